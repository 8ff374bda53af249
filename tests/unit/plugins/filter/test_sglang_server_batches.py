"""The filter hands the play's hosts and hostvars to _rollout.server_batches and turns its refusals into filter errors."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.sglang.plugins.filter.sglang_server_batches import FilterModule

BATCHES = FilterModule().filters()['sglang_server_batches']
HOSTVARS = {'gpu1': {}, 'mn2': {'sglang_server_group': 'mn', 'sglang_node_rank': 1},
            'mn1': {'sglang_server_group': 'mn', 'sglang_node_rank': 0}}


def test_hosts_and_hostvars_in_batches_out():
    assert BATCHES(['mn2', 'gpu1', 'mn1'], HOSTVARS, '100%', 1) == {
        'single_hosts': ['gpu1'], 'single_serial': [1], 'group_hosts': ['mn1', 'mn2'], 'group_serial': [2],
        'rollout_hosts': ['gpu1', 'mn1', 'mn2'], 'canary_hosts': ['gpu1']}


@pytest.mark.parametrize('hosts, hostvars, serial, message', [
    (['gpu1'], HOSTVARS, 'most', "sglang_server_batches: redeploy_serial: 'most' is neither"),
    (['group:mn', 'mn1'], dict(HOSTVARS, **{'group:mn': {}}), 1, 'sglang_server_batches: the host group:mn and'),
], ids=['bad-serial', 'host-named-like-a-group'])
def test_refusals_are_filter_errors(hosts, hostvars, serial, message):
    with pytest.raises(AnsibleFilterError, match=message):
        BATCHES(hosts, hostvars, serial)
