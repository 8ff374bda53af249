"""A server across several hosts: its nodes and ranks, the plan's group, one decision for all, the barrier."""
import pytest

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _groups

FLEET = ['gpu1', 'mn1', 'mn2', 'mn3']
# As _rollout.peer_urls lists them: a group once, under its key, at rank 0's URL.
PEERS = {'gpu1': 'http://127.0.0.1:30000', 'group:ds': 'http://127.0.0.32:30000'}


def inventory(**ranks):
    """The fleet's inventory: gpu1 a single-node server, each mnN of group ds with the rank given
    (the string 'unset': no sglang_node_rank; a host not named is not in the group)."""
    found = {'gpu1': {'ansible_host': '127.0.0.11'}}
    for number, host in enumerate(('mn1', 'mn2', 'mn3'), 1):
        found[host] = {'ansible_host': '127.0.0.3%d' % number}
        if host in ranks:
            found[host]['sglang_server_group'] = 'ds'
            if ranks[host] != 'unset':
                found[host]['sglang_node_rank'] = ranks[host]
    return lambda name: found.get(name, {})


@pytest.mark.parametrize('ranks, nodes, problems', [
    ({'mn1': 0, 'mn2': 1}, ['mn1', 'mn2'], []),
    ({'mn1': 1, 'mn2': 0}, ['mn2', 'mn1'], []),
    ({'mn1': '2', 'mn2': 0, 'mn3': ' 1 '}, ['mn2', 'mn3', 'mn1'], []),
    ({'mn1': 0, 'mn2': 'unset'}, ['mn1', 'mn2'], ['mn2 is a node of the server group ds but has no sglang_node_rank.']),
    ({'mn1': 0, 'mn2': 'one'}, ['mn1', 'mn2'], ["mn2: sglang_node_rank 'one' is not an integer."]),
    ({'mn1': 0, 'mn2': True}, ['mn1', 'mn2'], ['mn2: sglang_node_rank True is not an integer.']),
    ({'mn1': 0, 'mn2': 1.5}, ['mn1', 'mn2'], ['mn2: sglang_node_rank 1.5 is not an integer.']),
    ({'mn1': 0, 'mn2': 2}, ['mn1', 'mn2'],
     ['mn2: sglang_node_rank 2 is out of range (the 2 nodes of the server group ds have ranks 0 to 1).']),
    ({'mn1': -1, 'mn2': 0}, ['mn1', 'mn2'],
     ['mn1: sglang_node_rank -1 is out of range (the 2 nodes of the server group ds have ranks 0 to 1).']),
    ({'mn1': 0, 'mn2': 0, 'mn3': 1}, ['mn1', 'mn2', 'mn3'],
     ['mn1 and mn2 have the same sglang_node_rank 0 in the server group ds (one rank per node).']),
    ({'mn1': 0}, ['mn1'],
     ['the server group ds has 1 node(s) in sglang_fleet_hosts (mn1); a server spans at least two, a single-node'
      ' server leaves sglang_server_group empty.']),
], ids=['in-order', 'ranks-reversed', 'ranks-as-strings', 'rank-missing', 'rank-a-word', 'rank-a-bool',
        'rank-a-float', 'rank-too-high', 'rank-negative', 'rank-twice', 'group-of-one'])
def test_members_are_the_fleets_hosts_of_the_group_by_rank(ranks, nodes, problems):
    assert _groups.members('ds', FLEET, inventory(**ranks)) == (nodes, problems)


def test_members_come_from_the_fleet_not_the_play():
    # mn3 is of the group but outside the fleet: not a node; the fleet's order is not the ranks' order.
    assert _groups.members('ds', ['mn3', 'mn2', 'mn1'], inventory(mn1=1, mn2=0)) == (['mn2', 'mn1'], [])


@pytest.mark.parametrize('given, leader_vars, address', [
    ('', {'ansible_host': '127.0.0.31'}, '127.0.0.31:5000'),
    ('', {}, 'mn1:5000'),
    ('', {'ansible_host': '::1'}, '[::1]:5000'),
    ('10.1.0.1:6000', {'ansible_host': '127.0.0.31'}, '10.1.0.1:6000'),
], ids=['inventory-address', 'inventory-name', 'ipv6', 'given'])
def test_the_dist_init_address_is_rank_0s_unless_given(given, leader_vars, address):
    assert _groups.dist_init_addr(given, leader_vars, 'mn1', 5000) == address


def test_a_node_plans_its_group():
    group, problems = _groups.plan_group('ds', 'mn1', FLEET, inventory(mn1=1, mn2=0), '', 5000, 8, PEERS)
    assert problems == []
    assert group == {'name': 'ds', 'rank': 1, 'nnodes': 2, 'nodes': ['mn2', 'mn1'], 'leader': 'mn2',
                     'dist_init_addr': '127.0.0.32:5000', 'leader_url': 'http://127.0.0.32:30000',
                     'key': 'group:ds'}


@pytest.mark.parametrize('play_hosts, problems', [
    (['gpu1', 'mn1', 'mn2'], []),
    (['mn2', 'mn1'], []),
    (['mn1'], ['the run covers only mn1 of the server group ds, not mn2: a group is redeployed whole (--limit must'
               ' name every node, or none).']),
], ids=['whole', 'whole-any-order', 'limited-to-one-node'])
def test_a_run_must_cover_every_node_of_a_group(play_hosts, problems):
    group = {'name': 'ds', 'nodes': ['mn1', 'mn2']}
    assert _groups.play_problems(group, play_hosts) == problems
    assert _groups.play_problems(None, play_hosts) == []


def test_a_single_node_server_has_no_group():
    assert _groups.plan_group('', 'gpu1', FLEET, inventory(), '', 5000, 1, PEERS) == (None, [])


@pytest.mark.parametrize('me, fleet, ranks, tp_size, problems', [
    ('mn1', FLEET, {'mn1': 0, 'mn2': 1}, 3,
     ['sglang_tp_size 3 is not divisible by the 2 nodes of the server group ds (every node runs the same share of'
      ' the tensor-parallel ranks).']),
    ('mn3', ['mn1', 'mn2'], {'mn1': 0, 'mn2': 1, 'mn3': 2}, 2,
     ["mn3 is in the server group ds but not among sglang_fleet_hosts (mn1, mn2), where the group's nodes are"
      " found."]),
    ('mn1', FLEET, {'mn1': 0, 'mn2': 0}, 2,
     ['mn1 and mn2 have the same sglang_node_rank 0 in the server group ds (one rank per node).']),
], ids=['tp-not-divisible', 'outside-the-fleet', 'ranks-refused'])
def test_a_group_the_plan_refuses_has_no_group(me, fleet, ranks, tp_size, problems):
    assert _groups.plan_group('ds', me, fleet, inventory(**ranks), '', 5000, tp_size, PEERS) == (None, problems)


ARGS = ['--model-path', '/m', '--host', '0.0.0.0', '--tp-size', '8', '--nnodes', '2', '--node-rank', '0',
        '--disable-overlap-schedule']


def argv(**changes):
    """ARGS with a flag's value replaced (None: the flag left out), extra arguments appended (extra=[...])."""
    found = list(ARGS)
    for flag, value in changes.items():
        if flag == 'extra':
            found.extend(value)
            continue
        at = found.index('--' + flag.replace('_', '-'))
        found[at:at + 2] = [] if value is None else [found[at], value]
    return found


@pytest.mark.parametrize('args_by_host, problems', [
    ({'mn1': ARGS, 'mn2': argv(node_rank='1', host='127.0.0.32')}, []),
    ({'mn1': ARGS, 'mn2': argv(tp_size='16')},
     ["the nodes' launch arguments differ at --tp-size: 8 on mn1, 16 on mn2 (SGLang needs them equal on every"
      " node)."]),
    ({'mn1': ARGS, 'mn2': argv(tp_size='16'), 'mn3': ARGS},
     ["the nodes' launch arguments differ at --tp-size: 8 on mn1 and mn3, 16 on mn2 (SGLang needs them equal on"
      " every node)."]),
    ({'mn1': argv(extra=['--mem-fraction-static=0.8']), 'mn2': argv(extra=['--mem-fraction-static', '0.9'])},
     ["the nodes' launch arguments differ at --mem-fraction-static: 0.8 on mn1, 0.9 on mn2 (SGLang needs them"
      " equal on every node)."]),
    ({'mn1': ARGS, 'mn2': ARGS[:-1]},
     ["the nodes' launch arguments differ at --disable-overlap-schedule: (set) on mn1, (not given) on mn2 (SGLang"
      " needs them equal on every node)."]),
    ({'mn1': argv(extra=['--json-model-override-args', '{}', '--enable-x']), 'mn2': argv(extra=['--enable-x'])},
     ["the nodes' launch arguments differ at --json-model-override-args: {} on mn1, (not given) on mn2 (SGLang"
      " needs them equal on every node)."]),
    ({'mn1': ARGS, 'mn2': argv(tp_size='16', model_path='/n')},
     ["the nodes' launch arguments differ at --model-path: /m on mn1, /n on mn2 (SGLang needs them equal on every"
      " node).",
      "the nodes' launch arguments differ at --tp-size: 8 on mn1, 16 on mn2 (SGLang needs them equal on every"
      " node)."]),
], ids=['rank-and-host-differ-by-design', 'tp-size', 'two-agree', 'flag-equals-value', 'switch-missing',
        'extra-flag-missing', 'two-flags'])
def test_plan_differences_name_the_flag_and_the_nodes(args_by_host, problems):
    assert _groups.plan_differences(args_by_host) == problems


SERVING = {'running': True, 'healthy': True, 'sglang_version': '0.5.23', 'generates': True, 'generate_error': None}


def node(host, rank, reasons=(), args=None, patch_applied=True, **state):
    return {'host': host, 'rank': rank, 'args': list(args or argv(node_rank=str(rank))), 'reasons': list(reasons),
            'patch_applied': patch_applied, 'state': dict(SERVING, **dict({'generates': True if rank == 0 else None}, **state))}


@pytest.mark.parametrize('nodes, reasons', [
    ([node('mn1', 0), node('mn2', 1)], []),
    ([node('mn2', 1, ['server not running'], running=False, healthy=False), node('mn1', 0)],
     ['mn2: server not running']),
    ([node('mn1', 0), node('mn2', 1, running=False)], ['mn2: server not running']),
    ([node('mn1', 0, generates=False, generate_error='HTTP 500 from /generate'), node('mn2', 1)],
     ['mn1: generation fails: HTTP 500 from /generate']),
    ([node('mn1', 0, generates=False, generate_error=None), node('mn2', 1)],
     ['mn1: generation fails: no error given']),
    ([node('mn1', 0, ['launch configuration changed']), node('mn2', 1, ['force_restart'])],
     ['mn1: launch configuration changed', 'mn2: force_restart']),
    ([node('mn1', 0), node('mn2', 1, ['patch not applied'], patch_applied=False)],
     ['mn2: patch not applied', 'patch applied on mn1 only, not on mn2']),
    ([node('mn1', 0, ['patch not applied'], patch_applied=False),
      node('mn2', 1, ['patch not applied'], patch_applied=False)],
     ['mn1: patch not applied', 'mn2: patch not applied']),
    ([node('mn1', 0, patch_applied=None), node('mn2', 1, patch_applied=None)], []),
], ids=['all-serving', 'rank-1-down-in-its-decision', 'rank-1-down-only-in-its-state', 'rank-0-cannot-generate',
        'rank-0-fails-without-error', 'reasons-of-every-node', 'half-patched', 'patch-due-everywhere', 'no-patch'])
def test_one_decision_for_the_group_any_nodes_reason_redeploys_all(nodes, reasons):
    decision = _groups.group_decision(nodes)
    assert decision == {'redeploy_needed': bool(reasons), 'reasons': reasons, 'problems': []}


def test_a_rank_above_0_is_not_asked_to_generate():
    # Ranks > 0 serve no HTTP: their generation is never probed (None), which is no reason.
    assert _groups.group_decision([node('mn1', 0), node('mn2', 1, generates=None)])['reasons'] == []


@pytest.mark.parametrize('nodes, problems', [
    ([node('mn1', 0), node('mn2', 1, sglang_version='0.5.12.post1')],
     ['the nodes run different sglang versions: 0.5.23 on mn1, 0.5.12.post1 on mn2 (every rank must run the same'
      ' code).']),
    ([node('mn1', 0), node('mn2', 1, sglang_version=None)], []),
    ([node('mn1', 0), node('mn2', 1, args=argv(node_rank='1', tp_size='4'))],
     ["the nodes' launch arguments differ at --tp-size: 8 on mn1, 4 on mn2 (SGLang needs them equal on every"
      " node)."]),
    # An undo: every node back to what one run left, whatever each node's own number of it.
    ([dict(node('mn1', 0), undo={'target': 3, 'run_id': 'r2'}), dict(node('mn2', 1), undo={'target': 2, 'run_id': 'r2'})],
     []),
    ([dict(node('mn1', 0), undo={'target': 3, 'run_id': 'r2'}), dict(node('mn2', 1), undo={'target': 3, 'run_id': 'r3'})],
     ['the nodes would go back to what different runs left: mn1 revision 3 (run r2), mn2 revision 3 (run r3) (each'
      ' node numbers its revisions itself; playbooks/revisions.yml lists them). Nothing was stopped: put the group'
      ' back with a redeploy of the release you want, which goes on every node alike.']),
    ([dict(node('mn1', 0), undo={'target': 3, 'run_id': 'r2'}), dict(node('mn2', 1), undo=None)],
     ['the nodes would go back to what different runs left: mn1 revision 3 (run r2), mn2 revision ? (run (none))'
      ' (each node numbers its revisions itself; playbooks/revisions.yml lists them). Nothing was stopped: put the'
      ' group back with a redeploy of the release you want, which goes on every node alike.']),
], ids=['versions-differ', 'version-unknown', 'args-differ', 'undo-one-run', 'undo-two-runs', 'undo-one-node-only'])
def test_a_group_that_cannot_run_together_is_refused(nodes, problems):
    assert _groups.group_decision(nodes)['problems'] == problems


STEPS = ('_sglang_arm', '_sglang_stop', '_sglang_patch')


def results(**by_host):
    """{host: {step: result}}: every step ok ({changed: true}), but those given as {host: {step: result}}."""
    found = {}
    for host in ('mn1', 'mn2'):
        found[host] = dict((step, {'changed': True}) for step in STEPS)
        found[host].update(by_host.get(host, {}))
    return found


@pytest.mark.parametrize('play_hosts, found, failed, msg', [
    (['mn1', 'mn2'], results(), [], ''),
    (['mn1', 'mn2'], results(mn2={'_sglang_patch': {'skipped': True}, '_sglang_stop': None}), [], ''),
    (['mn1', 'mn2'], results(mn2={'_sglang_stop': {'failed': True, 'msg': 'SIGKILL did not end 4242'}}), ['mn2'],
     'mn2 failed _sglang_stop: SIGKILL did not end 4242'),
    (['mn1', 'mn2'], results(mn1={'_sglang_arm': {'unreachable': True, 'msg': 'ssh: connect timed out'},
                                  '_sglang_stop': {'failed': True, 'msg': 'later'}}), ['mn1'],
     'mn1 failed _sglang_arm: ssh: connect timed out'),
    (['mn1', 'mn2'], results(mn2={'_sglang_patch': {'failed': True}}), ['mn2'], 'mn2 failed _sglang_patch: failed'),
    (['mn1'], results(), ['mn2'], 'mn2 left the play (unreachable, or failed outside any rescue)'),
    (['mn2'], results(mn2={'_sglang_stop': {'failed': True, 'msg': 'x'}}), ['mn1', 'mn2'],
     'mn1 left the play (unreachable, or failed outside any rescue); mn2 failed _sglang_stop: x'),
    (['mn1', 'mn2'], {'mn1': {}}, [], ''),
], ids=['all-ok', 'skipped-or-not-run', 'a-step-failed', 'first-failure-of-a-node', 'failed-without-msg',
        'left-the-play', 'both', 'no-results-yet'])
def test_the_barrier_fails_when_any_node_failed(play_hosts, found, failed, msg):
    assert _groups.barrier(['mn1', 'mn2'], play_hosts, found) == {'failed_nodes': failed, 'msg': msg}


@pytest.mark.parametrize('said, failed, msg', [
    ({'mn1': 'stopped', 'mn2': 'stopped'}, [], ''),
    ({'mn1': 'stopped', 'mn2': 'armed'}, ['mn2'], 'mn2 did not get to the barrier "stopped" (its last one was "armed")'),
    ({'mn1': 'stopped'}, ['mn2'], 'mn2 did not get to the barrier "stopped" (it got to none)'),
    ({}, ['mn1', 'mn2'], 'mn1 did not get to the barrier "stopped" (it got to none); '
                         'mn2 did not get to the barrier "stopped" (it got to none)'),
], ids=['both-there', 'one-stuck-earlier', 'one-never-said', 'none-said'])
def test_the_barrier_fails_a_node_that_did_not_say_it_got_there(said, failed, msg):
    found = _groups.barrier(['mn1', 'mn2'], ['mn1', 'mn2'], {}, said, 'stopped')
    assert found == {'failed_nodes': failed, 'msg': msg}


GROUP = {'name': 'ds', 'nodes': ['mn1', 'mn2']}


# What the messages call each result: the role's names for them.
NAMES = {'plan': '_sglang_plan', 'state': '_sglang_state', 'decision': '_sglang_decision'}


def gathered(plan=None, state=None, decision=None):
    return {'plan': dict({'args': ['--nnodes', '2'], 'left_alone_because': ''}, **(plan or {})),
            'state': dict(SERVING, **(state or {})),
            'decision': dict({'reasons': [], 'patch_state': {'applied': True, 'changed': False}}, **(decision or {}))}


def test_decided_nodes_are_read_from_every_nodes_results_in_rank_order():
    nodes, problems = _groups.decided_nodes(GROUP, {'mn2': gathered(decision={'reasons': ['force_restart'],
                                                                               'patch_state': {}}),
                                                    'mn1': gathered()}, NAMES)
    assert problems == []
    assert [(found['host'], found['rank'], found['reasons']) for found in nodes] \
        == [('mn1', 0, []), ('mn2', 1, ['force_restart'])]
    assert nodes[1]['patch_applied'] is None
    assert nodes[0]['args'] == ['--nnodes', '2'] and nodes[0]['state'] == SERVING and nodes[0]['patch_applied'] is True


@pytest.mark.parametrize('mn2, problem', [
    (None, 'mn2 of the server group ds: _sglang_plan has none in this run (not in the play, or it failed before),'
           ' _sglang_state has none in this run (not in the play, or it failed before), _sglang_decision has none in'
           ' this run (not in the play, or it failed before); every node of a group is redeployed together or none'
           ' is.'),
    (dict(gathered(), plan={'failed': True, 'msg': 'broken rules'}),
     'mn2 of the server group ds: _sglang_plan failed: broken rules; every node of a group is redeployed together or'
     ' none is.'),
    (dict(gathered(), decision={'skipped': True, 'changed': False}),
     'mn2 of the server group ds: _sglang_decision was skipped; every node of a group is redeployed together or none'
     ' is.'),
    (gathered(plan={'left_alone_because': 'rollout stopped: the canary gpu1 failed'}),
     'mn2 of the server group ds: is left alone (rollout stopped: the canary gpu1 failed); every node of a group is'
     ' redeployed together or none is.'),
], ids=['not-in-the-run', 'plan-failed', 'decision-skipped', 'left-alone'])
def test_a_node_that_cannot_be_decided_on_refuses_the_group(mn2, problem):
    nodes, problems = _groups.decided_nodes(GROUP, {'mn1': gathered(), 'mn2': mn2}, NAMES)
    assert [found['host'] for found in nodes] == ['mn1'] and problems == [problem]


def test_without_names_the_messages_say_the_results_own_names():
    dummy, problems = _groups.decided_nodes(GROUP, {'mn1': gathered(), 'mn2': dict(gathered(), state={'skipped': True})})
    assert problems == ['mn2 of the server group ds: state was skipped; every node of a group is redeployed together'
                        ' or none is.']
