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
], ids=['takes-part', 'skip-flag', 'skip-flag-first', 'skip-flag-false', 'canary-failed', 'budget-spent',
        'budget-at-the-limit', 'budget-of-three'])
def test_gate_says_why_a_host_is_left_alone(skip, reports, canary, percentage, reason):
    assert _rollout.gate(skip, reports, canary, percentage) == reason


@pytest.mark.parametrize('canary, hosts', [(0, []), ('1', ['gpu1']), (5, ['gpu1', 'gpu2'])])
def test_canary_is_the_plays_first_hosts(canary, hosts):
    assert _rollout.canary_hosts(['gpu1', 'gpu2'], canary) == hosts
