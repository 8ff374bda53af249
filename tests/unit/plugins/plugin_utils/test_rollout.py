"""The rolling policy: where each server is reached, which reports count, and the gate's three reasons."""
import pytest

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _rollout


@pytest.mark.parametrize('listen, reached', [('0.0.0.0', '10.0.0.7'), ('::', '10.0.0.7'), ('', '10.0.0.7'),
                                             ('127.0.0.5', '127.0.0.5'), ('gpu1.lan', 'gpu1.lan')])
def test_a_server_on_every_address_is_reached_at_the_inventory_address(listen, reached):
    assert _rollout.reachable_host(listen, '10.0.0.7') == reached


def test_peer_urls_follow_each_hosts_inventory_with_the_role_defaults_where_unset():
    inventory = {
        'gpu1': {'ansible_host': '127.0.0.11', 'sglang_host': '0.0.0.0', 'sglang_port': 30001},
        'gpu2': {'ansible_host': '127.0.0.12'},
        'gpu3': {'sglang_host': '::'},
        'gpu4': {'sglang_router_worker_url': 'http://worker4:9000', 'sglang_host': '0.0.0.0'},
    }
    assert _rollout.peer_urls(['gpu1', 'gpu2', 'gpu3', 'gpu4'], inventory.get) == {
        'gpu1': 'http://127.0.0.11:30001', 'gpu2': 'http://127.0.0.1:30000', 'gpu3': 'http://gpu3:30000',
        'gpu4': 'http://worker4:9000'}


def report(host, status):
    return {'host': host, 'status': status}


REPORTS = {'gpu1': report('gpu1', 'failed'), 'gpu2': report('gpu2', 'redeployed'), 'gpu3': report('gpu3', 'skipped'),
           'gpu4': report('gpu4', 'rolled_back')}


def test_peer_reports_leave_out_this_host_the_skipped_and_the_unfinished():
    found = _rollout.peer_reports(['gpu1', 'gpu2', 'gpu3', 'gpu4', 'gpu5'], 'gpu4', REPORTS.get)
    assert found == [REPORTS['gpu1'], REPORTS['gpu2']]


@pytest.mark.parametrize('skip, reports, canary, percentage, reason', [
    (False, [], [], 100, ''),
    (True, [], [], 100, 'sglang_redeploy_skip is set for this host'),
    ('yes', [report('gpu1', 'failed')], ['gpu1'], 0, 'sglang_redeploy_skip is set for this host'),
    ('false', [], [], 100, ''),
    (False, [report('gpu1', 'failed'), report('gpu2', 'rolled_back')], ['gpu1', 'gpu2'], 100,
     'rollout stopped: the canary gpu1, gpu2 failed'),
    (False, [report('gpu1', 'redeployed'), report('gpu2', 'failed')], ['gpu1'], '0',
     'rollout stopped: 1 of 2 finished host(s) failed (gpu2), above sglang_max_fail_percentage 0'),
    (False, [report('gpu1', 'redeployed'), report('gpu2', 'failed')], ['gpu1'], 50, ''),
    (False, [report('gpu1', 'unchanged'), report('gpu2', 'rolled_back'), report('gpu3', 'failed')], [], 60,
     'rollout stopped: 2 of 3 finished host(s) failed (gpu2, gpu3), above sglang_max_fail_percentage 60'),
    (False, [dict(report('gpu1', 'redeployed'), bake={'verdict': 'inconclusive', 'action': 'held'})], ['gpu1'], 100,
     'rollout held: the bake of the canary gpu1 was inconclusive (sglang_canary_inconclusive is hold); the canary keeps'
     ' the new version'),
    (False, [dict(report('gpu1', 'redeployed'), bake={'verdict': 'pass', 'action': 'kept'})], ['gpu1'], 100, ''),
], ids=['takes-part', 'skip-flag', 'skip-flag-first', 'skip-flag-false', 'canary-failed', 'budget-spent',
        'budget-at-the-limit', 'budget-of-three', 'canary-held', 'canary-baked'])
def test_gate_says_why_a_host_is_left_alone(skip, reports, canary, percentage, reason):
    assert _rollout.gate(skip, reports, canary, percentage) == reason


@pytest.mark.parametrize('canary, hosts', [(0, []), ('1', ['gpu1']), (5, ['gpu1', 'gpu2'])])
def test_canary_is_the_plays_first_hosts(canary, hosts):
    assert _rollout.canary_hosts(['gpu1', 'gpu2'], canary) == hosts


# A fleet of two single-node servers and two groups, listed out of rank order as an inventory may list them.
FLEET = {
    'gpu1': {'ansible_host': '127.0.0.11'},
    'big1': {'ansible_host': '127.0.0.32', 'sglang_server_group': 'big', 'sglang_node_rank': '1'},
    'big0': {'ansible_host': '127.0.0.31', 'sglang_server_group': 'big', 'sglang_node_rank': 0, 'sglang_port': 30001},
    'gpu2': {'ansible_host': '127.0.0.12'},
    'huge0': {'ansible_host': '127.0.0.41', 'sglang_server_group': 'huge', 'sglang_node_rank': 0},
    'huge2': {'sglang_server_group': 'huge', 'sglang_node_rank': 2},
    'huge1': {'sglang_server_group': 'huge', 'sglang_node_rank': 1},
}
ORDER = ['gpu1', 'big1', 'big0', 'gpu2', 'huge0', 'huge2', 'huge1']
GROUP_NODES = ['big0', 'big1', 'huge0', 'huge1', 'huge2']


def fleet_vars(name):
    return FLEET.get(name, {})


def test_servers_keep_first_appearance_and_put_a_groups_nodes_in_rank_order():
    assert _rollout.servers(ORDER, lambda name: (fleet_vars(name).get('sglang_server_group', ''),
                                                 fleet_vars(name).get('sglang_node_rank'))) == [
        ('gpu1', ['gpu1']), ('group:big', ['big0', 'big1']), ('gpu2', ['gpu2']),
        ('group:huge', ['huge0', 'huge1', 'huge2'])]


def test_a_rank_that_is_no_number_sorts_last_for_the_plan_to_refuse():
    nodes = {'x': ('g', 'one'), 'y': ('g', 1), 'z': ('g', 0)}
    assert _rollout.servers(['x', 'y', 'z'], nodes.get) == [('group:g', ['z', 'y', 'x'])]


def test_a_host_named_like_a_group_is_refused_not_merged_into_it():
    # Inventory names may hold a colon (a YAML or INI inventory accepts `group:big`).
    nodes = {'group:big': ('', None), 'big0': ('big', 0)}
    with pytest.raises(ValueError, match='the host group:big and the server group big'):
        _rollout.servers(['group:big', 'big0'], nodes.get)


def test_peer_urls_list_a_group_once_at_its_rank_0():
    assert _rollout.peer_urls(ORDER, fleet_vars) == {
        'gpu1': 'http://127.0.0.1:30000', 'gpu2': 'http://127.0.0.1:30000',
        'group:big': 'http://127.0.0.1:30001', 'group:huge': 'http://127.0.0.1:30000'}
    listening = dict((name, dict(variables, sglang_host='0.0.0.0')) for name, variables in FLEET.items())
    assert _rollout.peer_urls(ORDER, listening.get)['group:big'] == 'http://127.0.0.31:30001'


@pytest.mark.parametrize('reports, me, found', [
    ({'big1': report('big1', 'failed'), 'big0': report('big0', 'redeployed')}, 'gpu2',
     [{'host': 'group:big', 'nodes': ['big0', 'big1'], 'status': 'failed'}]),
    ({'big0': report('big0', 'unchanged'), 'big1': report('big1', 'unchanged'), 'gpu1': report('gpu1', 'failed')},
     'gpu2', [report('gpu1', 'failed'), {'host': 'group:big', 'nodes': ['big0', 'big1'], 'status': 'unchanged'}]),
    ({'big0': report('big0', 'skipped'), 'big1': report('big1', 'skipped')}, 'gpu2', []),
    ({'big0': report('big0', 'rolled_back'), 'huge1': report('huge1', 'redeployed')}, 'huge0',
     [{'host': 'group:big', 'nodes': ['big0', 'big1'], 'status': 'rolled_back'}]),
], ids=['any-node-failed', 'one-per-server', 'all-skipped', 'own-group-left-out'])
def test_peer_reports_count_a_group_once(reports, me, found):
    assert _rollout.peer_reports(ORDER, me, reports.get, fleet_vars) == found


def test_a_failed_group_counts_once_in_the_failure_share_and_names_its_canary_by_group():
    reports = _rollout.peer_reports(ORDER, 'gpu2', {'big0': report('big0', 'failed'), 'big1': report('big1', 'failed'),
                                                    'gpu1': report('gpu1', 'redeployed')}.get, fleet_vars)
    assert _rollout.gate(False, reports, [], 50) == ''
    assert _rollout.gate(False, reports, [], 0) == (
        'rollout stopped: 1 of 2 finished host(s) failed (group:big), above sglang_max_fail_percentage 0')
    assert _rollout.gate(False, reports, ['big0', 'big1'], 100) == 'rollout stopped: the canary group:big failed'


@pytest.mark.parametrize('rollout, canary, hosts', [
    (ORDER, 1, ['gpu1']),
    (ORDER, 2, ['gpu1', 'big0', 'big1']),
    (['big1', 'big0', 'huge0', 'huge1', 'huge2'], 1, ['big0', 'big1']),
    (ORDER, '0', []),
    (ORDER, -1, []),
], ids=['a-single', 'a-single-and-a-group', 'a-group', 'none', 'negative'])
def test_the_canary_counts_servers(rollout, canary, hosts):
    assert _rollout.canary_hosts(rollout, canary, fleet_vars) == hosts


@pytest.mark.parametrize('canary, serial, total, sizes', [
    (0, '100%', 4, [4]),
    (0, None, 3, [3]),
    (0, [], 3, [3]),
    (1, '100%', 4, [1, 3]),
    (0, '50%', 5, [2, 2, 1]),
    (0, '10%', 5, [1, 1, 1, 1, 1]),
    (0, 2, 5, [2, 2, 1]),
    (0, '2', 3, [2, 1]),
    (2, [1, '50%'], 8, [2, 1, 4, 1]),
    (0, 0, 3, [3]),
    (3, 1, 2, [2]),
    (0, 1, 0, []),
], ids=['all', 'unset', 'empty-list', 'canary', 'half', 'rounds-to-one', 'number', 'number-as-text', 'list',
        'zero', 'canary-above-total', 'no-servers'])
def test_batch_sizes_cut_servers_as_ansibles_serial_cuts_hosts(canary, serial, total, sizes):
    assert _rollout.batch_sizes(canary, serial, total) == sizes


def test_a_serial_entry_that_is_no_number_is_refused():
    with pytest.raises(ValueError, match="redeploy_serial: 'half' is neither a number nor a percentage"):
        _rollout.batch_sizes(0, 'half', 3)


# The group play takes one group per batch whatever serial says (lockstep across groups would outlast the
# leases of the nodes that wait): group_serial is always each group's node count.
@pytest.mark.parametrize('serial, canary, single_serial, group_serial, canary_hosts', [
    ('100%', 0, [2], [2, 3], []),
    (1, 0, [1, 1], [2, 3], []),
    ('50%', 1, [1, 1], [2, 3], ['gpu1']),
    (1, 3, [2], [2, 3], ['gpu1', 'gpu2', 'big0', 'big1']),
    ([1, '100%'], 0, [1, 1], [2, 3], []),
    (2, 0, [2], [2, 3], []),
], ids=['all-at-once', 'one-server-a-batch', 'canary-in-the-single-play', 'canary-into-the-groups',
        'list', 'two-servers-a-batch'])
def test_server_batches_count_servers_and_never_split_a_group(serial, canary, single_serial, group_serial,
                                                             canary_hosts):
    batches = _rollout.server_batches(ORDER, fleet_vars, serial, canary)
    assert batches == {'single_hosts': ['gpu1', 'gpu2'], 'single_serial': single_serial,
                       'group_hosts': GROUP_NODES, 'group_serial': group_serial,
                       'rollout_hosts': ['gpu1', 'gpu2'] + GROUP_NODES, 'canary_hosts': canary_hosts}


def test_server_batches_of_a_fleet_of_groups_only_put_the_canary_in_the_group_play():
    batches = _rollout.server_batches(GROUP_NODES, fleet_vars, '100%', 1)
    assert (batches['single_hosts'], batches['single_serial'], batches['group_serial']) == ([], [], [2, 3])


def test_a_group_canary_held_by_its_bake_holds_the_rollout():
    reports = _rollout.peer_reports(ORDER, 'gpu2', {
        'big0': dict(report('big0', 'redeployed'), bake={'verdict': 'inconclusive', 'action': 'held'}),
        'big1': report('big1', 'redeployed')}.get, fleet_vars)
    assert _rollout.gate(False, reports, ['big0', 'big1'], 100).startswith(
        'rollout held: the bake of the canary group:big was inconclusive')


def test_the_bake_compares_with_every_server_outside_the_canary():
    peers = {'gpu1': 'http://a:1', 'group:big': 'http://b:1', 'gpu2': 'http://c:1'}
    assert _rollout.bake_baselines(ORDER, ['gpu1'], peers, fleet_vars) == {'group:big': 'http://b:1',
                                                                          'gpu2': 'http://c:1'}
    assert _rollout.bake_baselines(ORDER, ['gpu1', 'big0', 'big1'], peers, fleet_vars) == {'gpu2': 'http://c:1'}


# No rolling policy set: a canary of one server, then 25% batches, at most 25% of the fleet unavailable (at
# least 1), the first failure stops; a knob the operator set replaces its own part only, and an asked serial
# lifts the default unavailability budget (the batches asked for are the bound).
@pytest.mark.parametrize('asked, servers_count, chosen', [
    ({}, 8, ('25%', 1, 2, 0.0, [])),
    ({}, 3, ('25%', 1, 1, 0.0, [])),
    ({}, 1, ('25%', 1, 1, 0.0, [])),
    ({}, 0, ('25%', 1, 1, 0.0, [])),
    ({'serial': '', 'canary': None}, 12, ('25%', 1, 3, 0.0, [])),
    ({'serial': '100%', 'canary': 0}, 8, ('100%', 0, 0, 0.0, ['redeploy_serial', 'redeploy_canary'])),
    ({'serial': 2}, 8, (2, 1, 0, 0.0, ['redeploy_serial'])),
    ({'canary': '2', 'max_fail_percentage': '40'}, 8,
     ('25%', 2, 2, 40.0, ['redeploy_canary', 'redeploy_max_fail_percentage'])),
    ({'max_unavailable': 0}, 8, ('25%', 1, 0, 0.0, ['redeploy_max_unavailable'])),
    ({'serial': [1, '50%'], 'max_unavailable': '4'}, 8,
     ([1, '50%'], 1, 4, 0.0, ['redeploy_serial', 'redeploy_max_unavailable'])),
], ids=['fleet-of-8', 'fleet-of-3-rounds-down', 'one-server', 'no-server', 'set-to-nothing', 'whole-fleet-asked',
        'serial-asked', 'canary-and-failure-budget-asked', 'no-budget-asked', 'list-and-budget-asked'])
def test_rollout_policy_defaults_to_a_canary_then_a_quarter(asked, servers_count, chosen):
    policy = _rollout.rollout_policy(asked, servers_count)
    assert (policy['serial'], policy['canary'], policy['max_unavailable'], policy['max_fail_percentage'],
            policy['asked']) == chosen


@pytest.mark.parametrize('asked, summary', [
    ({}, 'default (no redeploy_serial, redeploy_canary, redeploy_max_unavailable or redeploy_max_fail_percentage'
         ' set; the whole fleet at once: -e redeploy_serial=100% -e redeploy_canary=0): canary 1 server(s), then'
         ' batches of 25% server(s), at most 2 of 8 server(s) unavailable, the first failure stops the rollout'),
    ({'serial': '100%', 'canary': 0, 'max_fail_percentage': 100},
     'asked (redeploy_serial=100%, redeploy_canary=0, redeploy_max_fail_percentage=100): no canary, batches of'
     ' 100% server(s), no bound on unavailable servers beyond the batches, stops once more than 100% of the'
     ' finished servers failed'),
    ({'serial': [1, '50%']}, 'asked (redeploy_serial=1,50%): canary 1 server(s), then batches of 1,50% server(s)'),
], ids=['default', 'whole-fleet', 'serial-list'])
def test_the_printed_plan_says_which_policy_applies_and_why(asked, summary):
    assert _rollout.rollout_policy(asked, 8)['summary'].startswith(summary)


def test_a_bad_serial_is_refused_even_where_the_canary_covers_the_play():
    with pytest.raises(ValueError, match="redeploy_serial: 'most' is neither"):
        _rollout.rollout_plan(['gpu1'], fleet_vars, {'serial': 'most'})


def test_the_default_budget_counts_a_group_once():
    # gpu1, gpu2, group:big, group:huge: four servers, 25% of them is one.
    plan = _rollout.rollout_plan(ORDER, fleet_vars, {})
    assert (plan['single_serial'], plan['canary_hosts'], plan['policy']['max_unavailable']) == ([1, 1], ['gpu1'], 1)


GROUPED = {'gpu1': {}, 'gpu2': {}, 'gpu3': {}, 'mn0': {'sglang_server_group': 'mn', 'sglang_node_rank': 0},
           'mn1': {'sglang_server_group': 'mn', 'sglang_node_rank': 1}}


# The printed plan's batches, from the same plan the plays take their serial from.
@pytest.mark.parametrize('hosts, asked, lines', [
    (['gpu1', 'gpu2', 'gpu3'], {}, ['batch 1 (canary): gpu1', 'batch 2: gpu2', 'batch 3: gpu3']),
    (['gpu1', 'gpu2', 'gpu3'], {'serial': '100%', 'canary': 0}, ['batch 1: gpu1, gpu2, gpu3']),
    (['gpu1', 'gpu2', 'gpu3'], {'serial': 2, 'canary': 1}, ['batch 1 (canary): gpu1', 'batch 2: gpu2, gpu3']),
    (['gpu1', 'gpu2', 'gpu3'], {'serial': [1, 2], 'canary': 0}, ['batch 1: gpu1', 'batch 2: gpu2, gpu3']),
    (['mn1', 'gpu1', 'mn0'], {'serial': '100%', 'canary': 2},
     ['batch 1 (canary): gpu1', 'batch 2 (canary): mn0, mn1']),
    (['mn1', 'mn0'], {}, ['batch 1 (canary): mn0, mn1']),
    ([], {}, []),
], ids=['default-policy', 'whole-fleet', 'canary-then-two', 'serial-list', 'canary-reaching-a-group', 'group-only',
        'no-hosts'])
def test_the_plan_lists_its_batches_canary_first(hosts, asked, lines):
    plan = _rollout.rollout_plan(hosts, lambda name: GROUPED[name], asked)
    assert plan['batch_lines'] == lines
    assert [batch['hosts'] for batch in plan['batches']] == [line.split(': ', 1)[1].split(', ') for line in lines]
