"""The filter hands the play's hosts and hostvars to _rollout.server_batches and turns its refusals into filter errors."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.sglang.plugins.filter.sglang_server_batches import FilterModule

BATCHES = FilterModule().filters()['sglang_server_batches']
HOSTVARS = {'gpu1': {}, 'mn2': {'sglang_server_group': 'mn', 'sglang_node_rank': 1},
            'mn1': {'sglang_server_group': 'mn', 'sglang_node_rank': 0}}


def test_hosts_and_hostvars_in_batches_out():
    batches = BATCHES(['mn2', 'gpu1', 'mn1'], HOSTVARS, '100%', 1)
    assert dict(batches, policy=None) == {
        'single_hosts': ['gpu1'], 'single_serial': [1], 'group_hosts': ['mn1', 'mn2'], 'group_serial': [2],
        'rollout_hosts': ['gpu1', 'mn1', 'mn2'], 'canary_hosts': ['gpu1'], 'policy': None,
        'batches': [{'number': 1, 'hosts': ['gpu1'], 'canary': True}, {'number': 2, 'hosts': ['mn1', 'mn2'], 'canary': False}],
        'batch_lines': ['batch 1 (canary): gpu1', 'batch 2: mn1, mn2']}
    assert batches['policy']['asked'] == ['redeploy_serial', 'redeploy_canary']


SINGLE = dict(('gpu%d' % number, {}) for number in range(1, 9))


# What the playbook passes when the operator sets nothing (`redeploy_serial | default(none)`, ...): the safe
# default, never the whole fleet at once; that only when asked.
@pytest.mark.parametrize('asked, single_serial, canary_hosts, max_unavailable, max_fail, summary', [
    ({}, [1, 2, 2, 2, 1], ['gpu1'], 2, 0.0, 'default (no redeploy_serial'),
    ({'serial': None, 'canary': '', 'max_unavailable': None, 'max_fail_percentage': None}, [1, 2, 2, 2, 1],
     ['gpu1'], 2, 0.0, 'default (no redeploy_serial'),
    ({'serial': '100%', 'canary': 0}, [8], [], 0, 0.0, 'asked (redeploy_serial=100%, redeploy_canary=0)'),
    ({'serial': '100%', 'canary': 0, 'max_fail_percentage': 100}, [8], [], 0, 100.0,
     'asked (redeploy_serial=100%, redeploy_canary=0, redeploy_max_fail_percentage=100)'),
    ({'serial': '100%'}, [1, 7], ['gpu1'], 0, 0.0, 'asked (redeploy_serial=100%)'),
    ({'max_unavailable': 3}, [1, 2, 2, 2, 1], ['gpu1'], 3, 0.0, 'asked (redeploy_max_unavailable=3)'),
], ids=['nothing-set', 'set-to-nothing', 'whole-fleet-asked', 'whole-fleet-no-failure-budget', 'serial-only',
        'budget-only'])
def test_no_rolling_policy_means_a_canary_then_quarter_batches(asked, single_serial, canary_hosts,
                                                               max_unavailable, max_fail, summary):
    batches = BATCHES(sorted(SINGLE), SINGLE, **asked)
    policy = batches['policy']
    assert (batches['single_serial'], batches['canary_hosts'], policy['max_unavailable'],
            policy['max_fail_percentage']) == (single_serial, canary_hosts, max_unavailable, max_fail)
    assert policy['summary'].startswith(summary)


def test_the_unavailability_budget_is_a_quarter_of_the_fleet_not_of_the_limited_play():
    policy = BATCHES(['gpu1'], SINGLE, fleet=sorted(SINGLE))['policy']
    assert (policy['max_unavailable'], policy['canary']) == (2, 1)
    assert 'at most 2 of 8 server(s) unavailable' in policy['summary']


@pytest.mark.parametrize('hosts, hostvars, serial, message', [
    (['gpu1'], HOSTVARS, 'most', "sglang_server_batches: redeploy_serial: 'most' is neither"),
    (['group:mn', 'mn1'], dict(HOSTVARS, **{'group:mn': {}}), 1, 'sglang_server_batches: the host group:mn and'),
], ids=['bad-serial', 'host-named-like-a-group'])
def test_refusals_are_filter_errors(hosts, hostvars, serial, message):
    with pytest.raises(AnsibleFilterError, match=message):
        BATCHES(hosts, hostvars, serial)
