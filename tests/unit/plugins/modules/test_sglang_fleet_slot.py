"""sglang_fleet_slot (an action plugin: it runs on the controller) in-process, in a temporary slot folder.

The fleet's servers and the router are one responder (each peer's base URL a path on it). A slot names the
ansible-playbook process that holds it: this test process's parent for a slot taken here, and this test
process for one taken in a forked child (another run that lives on), or a child's own child whose parent
has exited (a run that died).
"""
import json
import os

import pytest

from helpers.http_responder import Reply, closed_port_url, http_responder  # noqa: F401  (the fixture)
from helpers.module_runner import run_action
from ansible_collections.gpuops.sglang.plugins.action.sglang_fleet_slot import ActionModule
from ansible_collections.gpuops.sglang.plugins.plugin_utils._host_files import host_file

KEYS = {'changed', 'slot', 'held_by', 'unavailable', 'waited_s'}
HOSTS = ('gpu1', 'gpu2', 'gpu3')


class Fleet(object):
    """Three servers answering /health (each scripted), and a router listing them, all on one responder."""

    def __init__(self, responder, folder):
        self.responder = responder
        self.folder = folder
        self.peers = dict((host, '%s/%s' % (responder.url, host)) for host in HOSTS)
        for host in HOSTS:
            self.health(host, 200)

    def health(self, host, status):
        self.responder.route('GET', '/%s/health' % host, status=status)

    def router(self, workers):
        """workers: (host, is_healthy) as sglang-router 0.3 lists them, or (host, is_healthy, status) as smg does."""
        listing = []
        for worker in workers:
            entry = {'id': worker[0], 'url': self.peers[worker[0]], 'is_healthy': worker[1]}
            if len(worker) > 2:
                entry['status'] = worker[2]
            listing.append(entry)
        self.responder.route('GET', '/router/workers', json={'workers': listing})
        return self.responder.url + '/router'

    def args(self, host, **extra):
        base = dict(host=host, folder=str(self.folder), max_unavailable=1, peers=self.peers, wait_timeout=0,
                    probe_timeout=2)
        base.update(extra)
        return base

    def acquire(self, host, check_mode=False, **extra):
        return run_action(ActionModule, self.args(host, **extra), check_mode=check_mode)

    def release(self, host, **extra):
        return run_action(ActionModule, self.args(host, state='released', **extra))

    def in_another_run(self, action, host, **extra):
        """The action run by another ansible-playbook that lives on (a forked child: its parent is this process)."""
        reader, writer = os.pipe()
        child = os.fork()
        if child == 0:
            try:
                os.close(reader)
                result = run_action(ActionModule, self.args(host, state=action, **extra))
                os.write(writer, json.dumps(result).encode())
            finally:
                os._exit(0)
        os.close(writer)
        with os.fdopen(reader) as answer:
            text = answer.read()
        os.waitpid(child, 0)
        return json.loads(text)

    def in_a_run_that_died(self, host, **extra):
        """A slot taken by a run whose ansible-playbook is gone: a grandchild takes it, its parent has exited."""
        child = os.fork()
        if child == 0:
            try:
                grandchild = os.fork()
                if grandchild == 0:
                    try:
                        run_action(ActionModule, self.args(host, **extra))
                    finally:
                        os._exit(0)
                os.waitpid(grandchild, 0)
            finally:
                os._exit(0)
        os.waitpid(child, 0)


@pytest.fixture
def fleet(http_responder, tmp_path):
    return Fleet(http_responder, tmp_path / 'slots')


def peer_probes(fleet):
    return [request.path for request in fleet.responder.requests]


def test_a_slot_is_granted_while_the_fleet_stays_within_the_budget(fleet):
    result = fleet.acquire('gpu1')
    assert not result['failed'], result.get('msg')
    assert set(result) >= KEYS and result['changed'] is True and result['slot'] is True
    assert result['held_by'] == [] and result['unavailable'] == []
    assert sorted(peer_probes(fleet)) == ['/gpu1/health', '/gpu2/health', '/gpu3/health']


def test_a_second_host_is_refused_while_the_first_holds_the_only_slot(fleet):
    assert fleet.acquire('gpu1')['slot'] is True
    refused = fleet.acquire('gpu2')
    assert refused['failed'] and set(refused) >= KEYS and refused['slot'] is False
    assert refused['msg'] == ('taking gpu2 down would make 2 server(s) unavailable, more than max_unavailable 1: '
                              'gpu1 (in its window); waited 0.0s for that to change')
    assert refused['held_by'] == ['gpu1'] and refused['changed'] is False
    # The holder's server is not probed: it counts through its slot.
    assert '/gpu1/health' not in peer_probes(fleet)[3:]


def test_a_larger_budget_grants_a_second_slot_naming_who_holds_the_first(fleet):
    fleet.acquire('gpu1', max_unavailable=2)
    second = fleet.acquire('gpu2', max_unavailable=2)
    assert not second['failed'] and second['slot'] is True and second['held_by'] == ['gpu1']


@pytest.mark.parametrize('down, status, why', [('gpu2', 503, '/health answered 503'),
                                              ('gpu3', 500, '/health answered 500')])
def test_a_peer_that_is_down_already_uses_the_budget(fleet, down, status, why):
    fleet.health(down, status)
    refused = fleet.acquire('gpu1')
    assert refused['failed'] and refused['slot'] is False
    assert refused['unavailable'] == [{'host': down, 'why': why}]
    assert refused['msg'].endswith(': %s (%s); waited 0.0s for that to change' % (down, why))


def test_a_peer_that_does_not_answer_at_all_is_unavailable(fleet):
    fleet.peers['gpu3'] = closed_port_url()
    refused = fleet.acquire('gpu1')
    assert refused['failed'] and refused['unavailable'] == [{'host': 'gpu3', 'why': '/health answered nothing'}]


def test_a_host_whose_server_is_down_already_costs_nothing_more(fleet):
    fleet.health('gpu1', 503)
    fleet.health('gpu2', 503)
    # gpu2 is down (1 of 1); gpu1 is down too, so taking it down changes nothing.
    result = fleet.acquire('gpu1')
    assert not result['failed'] and result['slot'] is True
    assert result['unavailable'] == [{'host': 'gpu2', 'why': '/health answered 503'}]


@pytest.mark.parametrize('workers, why', [
    ([('gpu1', True), ('gpu3', True)], 'not in the router'),
    ([('gpu1', True), ('gpu2', False), ('gpu3', True)], 'the router marks it unhealthy'),
    # smg keeps a worker it drains listed, healthy even, but routes it nothing new.
    ([('gpu1', True, 'ready'), ('gpu2', True, 'draining'), ('gpu3', True, 'ready')], 'the router is draining it'),
    ([('gpu1', True, 'ready'), ('gpu2', False, 'draining'), ('gpu3', True, 'ready')], 'the router is draining it'),
    ([('gpu1', True, 'ready'), ('gpu2', True, 'not_ready'), ('gpu3', True, 'ready')],
     'the router lists it as not_ready'),
])
def test_the_routers_view_counts_too(fleet, workers, why):
    refused = fleet.acquire('gpu1', router_url=fleet.router(workers))
    assert refused['failed'] and refused['unavailable'] == [{'host': 'gpu2', 'why': why}]


def test_smg_ready_workers_are_available(fleet):
    url = fleet.router([(host, True, 'ready') for host in HOSTS])
    result = fleet.acquire('gpu1', router_url=url)
    assert not result['failed'] and result['slot'] is True and result['unavailable'] == []


def test_an_unreadable_router_makes_every_peer_count_as_unavailable(fleet):
    fleet.responder.route('GET', '/router/workers', status=503)
    refused = fleet.acquire('gpu1', router_url=fleet.responder.url + '/router')
    assert refused['failed'] and [entry['host'] for entry in refused['unavailable']] == ['gpu2', 'gpu3']
    assert refused['unavailable'][0]['why'].startswith('the router could not be read: GET ')


def test_the_routers_api_key_is_sent(fleet):
    url = fleet.router([(host, True) for host in HOSTS])
    result = fleet.acquire('gpu1', router_url=url, router_api_key='router-key')
    assert not result['failed'], result.get('msg')
    assert fleet.responder.requests_to('GET', '/router/workers')[0].headers['Authorization'] == 'Bearer router-key'
    assert 'router-key' not in repr(result)


@pytest.mark.parametrize('max_unavailable', [0, -1])
def test_no_budget_grants_every_slot_without_probing(fleet, max_unavailable):
    fleet.health('gpu2', 503)
    for host in HOSTS:
        result = fleet.acquire(host, max_unavailable=max_unavailable)
        assert not result['failed'] and result['slot'] is True and result['changed'] is False
    assert peer_probes(fleet) == []


def test_check_mode_takes_no_slot_and_does_not_wait(fleet):
    fleet.health('gpu2', 503)
    checked = fleet.acquire('gpu1', check_mode=True, wait_timeout=600)
    assert not checked['failed'] and set(checked) >= KEYS
    assert checked['slot'] is False and checked['changed'] is False and peer_probes(fleet) == []
    assert fleet.acquire('gpu3', max_unavailable=2)['slot'] is True


def test_releasing_gives_the_slot_back_and_a_second_release_changes_nothing(fleet):
    fleet.acquire('gpu1')
    released = fleet.release('gpu1')
    assert not released['failed'] and set(released) >= KEYS and released['changed'] is True
    assert fleet.acquire('gpu2')['slot'] is True
    again = fleet.release('gpu1')
    assert not again['failed'] and again['changed'] is False


def test_the_same_run_may_take_its_own_slot_again(fleet):
    fleet.acquire('gpu1')
    again = fleet.acquire('gpu1')
    assert not again['failed'] and again['slot'] is True and again['held_by'] == []


def test_a_slot_held_by_another_live_run_counts_and_is_not_released_by_this_one(fleet):
    taken = fleet.in_another_run('acquired', 'gpu1')
    assert not taken['failed'] and taken['slot'] is True
    refused = fleet.acquire('gpu2')
    assert refused['failed'] and refused['held_by'] == ['gpu1']
    # Another live run's slot is not this run's to drop.
    released = fleet.release('gpu1')
    assert not released['failed'] and released['changed'] is False
    assert fleet.acquire('gpu2')['failed']


def test_another_live_run_redeploying_the_same_host_is_refused(fleet):
    fleet.in_another_run('acquired', 'gpu1')
    refused = fleet.acquire('gpu1', max_unavailable=3)
    assert refused['failed'] and refused['slot'] is False
    assert refused['msg'].startswith('another run (ansible-playbook pid %d) holds the slot of gpu1: it is '
                                     'redeploying that host now' % os.getpid())


def test_a_slot_of_a_run_that_died_does_not_count(fleet):
    fleet.in_a_run_that_died('gpu1')
    assert os.listdir(str(fleet.folder)), 'the dead run took no slot'
    result = fleet.acquire('gpu2')
    assert not result['failed'] and result['slot'] is True and result['held_by'] == []
    # and its own host may be taken by this run
    assert fleet.acquire('gpu1', max_unavailable=2)['slot'] is True


def test_a_slot_counts_within_its_ttl(fleet):
    fleet.in_another_run('acquired', 'gpu1', ttl=600)
    assert fleet.acquire('gpu2')['failed']


def test_a_slot_past_its_ttl_no_longer_counts(fleet):
    fleet.in_another_run('acquired', 'gpu1', ttl=0.2)
    # Waits (re-reading every half second) until the other run's slot lapses; never longer than that.
    result = fleet.acquire('gpu2', wait_timeout=30)
    assert not result['failed'], result.get('msg')
    assert result['slot'] is True and result['held_by'] == []


def test_a_slot_freed_while_waiting_is_granted(fleet):
    # gpu3 comes back after its first probe: the second reading, half a second later, grants the slot.
    fleet.responder.route('GET', '/gpu3/health', replies=[Reply(503), Reply(200)])
    result = fleet.acquire('gpu1', wait_timeout=30)
    assert not result['failed'] and result['slot'] is True and result['unavailable'] == []
    assert peer_probes(fleet).count('/gpu3/health') == 2


def test_slots_of_hosts_outside_the_fleet_do_not_count(fleet):
    fleet.in_another_run('acquired', 'other-fleet-host', peers={'other-fleet-host': fleet.peers['gpu1']})
    result = fleet.acquire('gpu1')
    assert not result['failed'] and result['slot'] is True and result['held_by'] == []


def test_bad_input_is_refused_before_the_folder_is_made(fleet):
    result = run_action(ActionModule, dict(host='gpu1', folder=str(fleet.folder), max_unavailable='two'))
    assert result['failed'] and 'max_unavailable' in result['msg']
    assert not fleet.folder.exists()


def test_a_folder_that_cannot_be_made_is_a_clear_failure(fleet, tmp_path):
    blocker = tmp_path / 'a-file'
    blocker.write_text('not a folder')
    result = run_action(ActionModule, fleet.args('gpu1', folder=str(blocker / 'slots')))
    assert result['failed'] and set(result) >= KEYS
    assert result['msg'].startswith('cannot create the fleet slot folder %s' % (blocker / 'slots'))
    assert blocker.read_text() == 'not a folder'


def test_a_group_takes_one_slot_under_its_key_and_counts_once(fleet):
    # The peers as _rollout.peer_urls lists a group: once, under group:<name>, at its rank 0's URL; rank 0 holds
    # the slot under that key (a file name with a colon), the other ranks take none.
    fleet.peers = {'gpu1': fleet.peers['gpu1'], 'group:big': fleet.peers['gpu2']}
    held = fleet.acquire('group:big')
    assert not held['failed'] and held['slot'] is True
    assert os.path.isfile(os.path.join(str(fleet.folder), 'group:big.json'))
    refused = fleet.acquire('gpu1')
    assert refused['failed'] and refused['held_by'] == ['group:big']
    assert refused['msg'].startswith('taking gpu1 down would make 2 server(s) unavailable, more than max_unavailable 1: '
                                     'group:big (in its window)')
    assert fleet.release('group:big')['changed'] is True
    assert fleet.acquire('gpu1')['slot'] is True


@pytest.mark.parametrize('host', ['../../escaped', 'rack/gpu1', '..', 'a%2Fb'])
def test_a_host_name_with_a_slash_keeps_its_slot_inside_the_folder(fleet, host):
    # An inventory host name may hold '/': written as it is, the slot of '../../escaped' was a file two
    # folders up, beyond the lock's reach.
    fleet.peers = {host: fleet.peers['gpu1'], 'gpu2': fleet.peers['gpu2']}
    held = fleet.acquire(host)
    assert not held['failed'] and held['slot'] is True
    slots = os.listdir(str(fleet.folder))
    assert sorted(slots) == sorted(['.lock', host_file(host, 'slot')]) and '/' not in host_file(host, 'slot')
    assert not os.path.exists(str(fleet.folder.parent.parent / 'escaped.json'))
    refused = fleet.acquire('gpu2')
    assert refused['failed'] and refused['held_by'] == [host]
    assert fleet.release(host)['changed'] is True
    assert os.listdir(str(fleet.folder)) == ['.lock']


def test_slot_file_names_are_distinct_per_host():
    names = ['rack/gpu1', 'rack%2Fgpu1', 'rack_gpu1', 'group:big', '.', '..', '.lock']
    assert len(set(host_file(name, 'slot') for name in names)) == len(names)
    assert host_file('group:big', 'slot') == 'group:big.json' and host_file('rack/gpu1', 'slot') == 'rack%2Fgpu1.json'
