"""sglang_canary_verdict: the bake's verdict on the controller, and what it does with an inconclusive one."""
import pytest

from ansible_collections.gpuops.sglang.plugins.action.sglang_canary_verdict import ActionModule

ITL = [0.01, 0.02, 0.04, 0.08, 0.16, '+Inf']


def side(requests, slow=False, aborted=0):
    counts = [0, 0, 0, 0, requests * 16, 0] if slow else [0, requests * 16, 0, 0, 0, 0]
    return {'requests': requests, 'aborted': aborted, 'tokens': requests * 16, 'ttft': None, 'e2e': None,
            'itl': {'bounds': ITL, 'counts': counts}}


def bake(canary, baselines, problems=None):
    return {'measured': True, 'canary': canary, 'baselines': baselines, 'baseline_problems': problems or {},
            'seconds': 30.0}


@pytest.mark.parametrize('read, inconclusive, verdict, action, failed', [
    (bake(side(50), {'gpu2': side(50)}), 'rollback', 'pass', 'kept', False),
    (bake(side(50, slow=True), {'gpu2': side(50)}), 'pass', 'fail', 'rolled_back', True),
    (bake(side(5), {'gpu2': side(50)}), 'rollback', 'inconclusive', 'rolled_back', True),
    (bake(side(5), {'gpu2': side(50)}), 'hold', 'inconclusive', 'held', False),
    (bake(side(5), {'gpu2': side(50)}), 'pass', 'inconclusive', 'kept', False),
], ids=['pass', 'fail-whatever-the-policy', 'inconclusive-rollback', 'inconclusive-hold', 'inconclusive-pass'])
def test_the_verdict_and_what_it_does(run_action, read, inconclusive, verdict, action, failed):
    result = run_action(ActionModule, {}, args={'bake': read, 'inconclusive': inconclusive})
    assert result['verdict'] == verdict and result['bake']['action'] == action
    assert bool(result.get('failed')) is failed
    assert result['bake']['seconds'] == 30.0
    if failed:
        assert result['msg'].startswith('the canary failed its bake: ' if verdict == 'fail'
                                        else 'the canary was inconclusive in its bake: ')


def test_a_baseline_left_out_is_named_in_the_reason(run_action):
    read = bake(side(50), {'gpu2': side(50)}, {'gpu3': 'http://127.0.0.13:30000/metrics did not answer: refused'})
    result = run_action(ActionModule, {}, args={'bake': read})
    assert result['bake']['reason'].endswith(
        '; left out of the baseline: gpu3 (http://127.0.0.13:30000/metrics did not answer: refused)')
    assert result['bake']['baseline_servers'] == 1


def test_without_a_peer_the_canary_is_compared_with_its_own_old_server(run_action):
    before = {'measured': True, 'canary': side(50), 'baselines': {}, 'baseline_problems': {}, 'seconds': 30.0}
    result = run_action(ActionModule, {}, args={'bake': bake(side(50, slow=True), {}), 'before': before})
    assert result['verdict'] == 'fail' and result['bake']['baseline_source'] == 'before'
    # Peers win over the old server; a failed reading of the old server is no baseline.
    assert run_action(ActionModule, {}, args={'bake': bake(side(50), {'gpu2': side(50)}), 'before': before}
                      )['bake']['baseline_source'] == 'peers'
    alone = run_action(ActionModule, {}, args={'bake': bake(side(50), {}), 'before': {'failed': True, 'msg': 'x'},
                                               'inconclusive': 'pass'})
    assert alone['verdict'] == 'inconclusive' and alone['bake']['baseline_source'] is None


@pytest.mark.parametrize('read, named', [
    # inf - inf in the reader of before: two ranks each exporting 1e308 requests.
    (bake(dict(side(50), requests=float('nan')), {'gpu2': side(50)}), "the canary's requests reads nan"),
    (bake(side(50), {'gpu2': dict(side(50), requests=1e308), 'gpu3': dict(side(50), requests=1e308)}),
     "the baseline servers' merged requests reads inf"),
], ids=['nan-canary', 'baselines-summing-to-inf'])
def test_figures_that_are_not_finite_are_an_inconclusive_bake_not_a_traceback(run_action, read, named):
    result = run_action(ActionModule, {}, args={'bake': read})
    assert result['verdict'] == 'inconclusive' and result['bake']['action'] == 'rolled_back'
    assert result['failed'] is True and result['msg'].startswith(
        'the canary was inconclusive in its bake: the figures cannot be judged, a figure is not a finite number: ')
    assert named in result['msg']
    held = run_action(ActionModule, {}, args={'bake': read, 'inconclusive': 'hold'})
    assert held['bake']['action'] == 'held' and not held.get('failed') and held['bake']['seconds'] == 30.0
