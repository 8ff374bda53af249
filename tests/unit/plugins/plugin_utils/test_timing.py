"""Every time bound of the window from one module (plugin_utils/_timing.py): the window's budget, the lease's
hand-overs (`after`) of each step and the controller's renewal gap, derived here from the settings by hand."""
import os

import pytest
import yaml

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import COMMAND_TIMEOUT
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _timing


@pytest.mark.parametrize('overrides, budget', [
    ({}, 1020.0),
    ({'sglang_router_url': 'http://router:30080'}, 1380.0),
    ({'sglang_perf_gate': 'true', 'sglang_perf_timeout': 60}, 1260.0),
    ({'sglang_perf_gate': True, 'sglang_perf_levels': [1, 2, 4], 'sglang_perf_timeout': '10'}, 1080.0),
    ({'sglang_term_timeout': '10', 'sglang_gpu_release_timeout': 5, 'sglang_health_timeout': 60.5}, 85.5),
    # The canary's bake: the hold, and two readings (10 s each at most) of the canary and the fleet's other server.
    ({'sglang_canary_bake': 120, 'sglang_fleet_hosts': ['gpu1', 'gpu2']}, 1020.0 + 120 + 2 * 2 * 10),
    ({'sglang_canary_bake': '60', 'sglang_fleet_hosts': ['gpu%d' % n for n in range(8)]}, 1020.0 + 60 + 2 * 8 * 10),
], ids=['defaults', 'with-router', 'with-perf-gate', 'with-perf-gate-3-levels', 'strings', 'with-bake',
        'with-bake-8-servers'])
def test_window_budget_adds_every_wait_of_the_outage(settings, overrides, budget):
    settings.update(overrides)
    assert _timing.window_budget(settings) == budget


PEER_SETTINGS = {'sglang_router_url': 'http://127.0.0.1:30080', 'sglang_router_timeout': 10, 'sglang_drain_timeout': 5,
                 'sglang_perf_gate': False, 'sglang_perf_timeout': 60, 'sglang_term_timeout': 2,
                 'sglang_health_timeout': 900, 'sglang_canary_bake': 0, 'sglang_fleet_hosts': ['mn1', 'mn2', 'gpu1']}


@pytest.mark.parametrize('rank, overrides, levels, wait', [
    (0, {}, [], {'armed': 0, 'started': 0}),
    # Behind a router: rank 0's removal (10 s), its stop with its drain (5 + 60 + 2 s), its start and admission.
    (1, {}, [], {'armed': 107.0, 'started': 940.0}),
    (1, {'sglang_router_url': ''}, [], {'armed': 92.0, 'started': 930.0}),
    # With the performance gate: two benchmarks of two levels, 60 s each, plus the drain before the baseline.
    (1, {'sglang_perf_gate': True}, [1, 16], {'armed': 232.0, 'started': 1065.0}),
    # The group as a canary: rank 0's bake (60 s and two readings of itself and the fleet's other two servers).
    (1, {'sglang_canary_bake': 60}, [], {'armed': 107.0, 'started': 940.0 + 60 + 2 * 3 * 10}),
], ids=['rank-0', 'behind-a-router', 'no-router', 'performance-gate', 'canary-bake'])
def test_a_rank_above_0_hands_its_lease_over_for_what_rank_0_does_meanwhile(rank, overrides, levels, wait):
    settings = dict(PEER_SETTINGS, **overrides)
    assert _timing.peer_wait({'rank': rank}, settings, levels) == wait
    assert _timing.peer_wait(None, settings, levels) == {'armed': 0, 'started': 0}


@pytest.mark.parametrize('controller, gap', [
    ({}, 40.0),
    ({'connect_timeout': 5}, 35.0),
    ({'connect_timeout': 10, 'retries': 2}, 60.0),
], ids=['defaults', 'short-timeout', 'retries'])
def test_the_renewal_gap_is_a_connect_with_its_retries_and_the_next_modules_build(controller, gap):
    assert _timing.renewal_gap(controller) == gap


RANK_1 = {'rank': 1}


@pytest.mark.parametrize('overrides, group, bounds', [
    # A single-node server with the lab's bounds: the arm hands over for the router's removal only.
    ({'sglang_router_timeout': 10, 'sglang_term_timeout': 5, 'sglang_health_timeout': 60},
     None,
     {'arm_after': {'in_router': 10.0, 'out_of_router': 0}, 'stop_after': 10.0 + COMMAND_TIMEOUT,
      'ranks_started_after': 0, 'readmit_after': {'in_router': 40.0, 'out_of_router': 0}, 'lock_timeout': 120.0}),
    # A rank 1 behind a router: the arm covers rank 0's removal and stop, longer than the router's timeout alone;
    # a restore waits for the lock through another restore's drain (5 s) and health wait.
    (dict(PEER_SETTINGS), RANK_1,
     {'arm_after': {'in_router': 107.0, 'out_of_router': 107.0}, 'stop_after': 4.0 + COMMAND_TIMEOUT,
      'ranks_started_after': 940.0, 'readmit_after': {'in_router': 40.0, 'out_of_router': 0}, 'lock_timeout': 965.0}),
    # A router whose timeout outlasts what rank 0 does meanwhile: the longer of the two.
    (dict(PEER_SETTINGS, sglang_router_timeout=200), RANK_1,
     {'arm_after': {'in_router': 297.0, 'out_of_router': 297.0}, 'stop_after': 4.0 + COMMAND_TIMEOUT,
      'ranks_started_after': 1130.0, 'readmit_after': {'in_router': 230.0, 'out_of_router': 0},
      'lock_timeout': 965.0}),
], ids=['single-node', 'rank-1-behind-a-router', 'slow-router'])
def test_every_step_bound_derives_from_the_settings(settings, overrides, group, bounds):
    settings.update(overrides)
    found = _timing.step_bounds(settings, group, [])
    assert found.pop('window_budget') == _timing.window_budget(settings)
    assert found.pop('deadline') == 1800.0
    assert found == bounds


def test_the_whole_window_is_the_sum_of_its_steps_bounds(settings):
    """The budget, step by step with a router and the gate: two stops' waits (SIGTERM then SIGKILL), the GPU
    release, the health wait, the drain, the router twice, and a benchmark of each level before and after."""
    settings.update(sglang_router_url='http://r:1', sglang_term_timeout=30, sglang_gpu_release_timeout=60,
                    sglang_health_timeout=900, sglang_drain_timeout=120, sglang_router_timeout=30,
                    sglang_perf_gate=True, sglang_perf_levels=[1, 16], sglang_perf_timeout=120)
    steps = [2 * 30, 60, 900, 120, 2 * 30, 2 * 2 * 120]
    assert _timing.window_budget(settings) == sum(steps) == 1680


@pytest.mark.parametrize('given, expected', [
    (1800, 1800.0), ('600', 600.0),
    # auto: what the window may last with these settings, the gate's and the bake's bounds included.
    ('auto', 1020.0), ('AUTO', 1020.0),
    # Not a number: 0, which the rules refuse before anything is armed (test_rules).
    ('nonsense', 0.0),
])
def test_the_deadline_is_given_or_derived(settings, given, expected):
    settings['sglang_rollback_deadline'] = given
    assert _timing.deadline(settings) == expected
    assert _timing.step_bounds(settings, None, [])['deadline'] == expected


def test_an_auto_deadline_grows_with_the_gate_and_the_bake(settings):
    settings.update(sglang_rollback_deadline='auto', sglang_perf_gate=True, sglang_canary_bake=30,
                    sglang_fleet_hosts=['gpu1', 'gpu2'])
    assert _timing.deadline(settings) == _timing.window_budget(settings) == 1020.0 + 2 * 2 * 60 + 30 + 2 * 2 * 10


# One mode at the defaults: the stop (60 s command + 2 x 30), the release (2 x 30 s readings + 2 x (30 + 10) + 60),
# the start (60 s command + 900), seven levels of 300 s + 10, six steps' 30 s of slack.
MODE = (60 + 60) + (60 + 80 + 60) + (60 + 900) + (7 * 300 + 10) + 6 * 30.0


@pytest.mark.parametrize('overrides, modes, budget', [
    ({}, 2, 2 * MODE),
    ({'sglang_tune_steps': [1, 5]}, 4, 4 * MODE),
    # The router's removal and drain once, not per mode.
    ({'sglang_router_url': 'http://router:30080'}, 2, 2 * MODE + 300 + 2 * 30),
    ({'sglang_tune_levels': [1, 2], 'sglang_tune_timeout': '20', 'sglang_health_timeout': 60}, 2,
     2 * ((60 + 60) + (60 + 80 + 60) + (60 + 60) + (2 * 20 + 10) + 6 * 30.0)),
], ids=['defaults', 'four-modes', 'with-router', 'short'])
def test_a_tuning_run_has_room_for_every_mode(settings, overrides, modes, budget):
    settings.update(overrides)
    assert _timing.tune_budget(settings, [{}] * modes) == budget


@pytest.mark.parametrize('bound, seconds, holds', [
    (_timing.TimeBound(0, 60, 'why'), 0, True),
    (_timing.TimeBound(0, 60, 'why'), 60, True),
    (_timing.TimeBound(0, 60, 'why'), 60.001, False),
    (_timing.TimeBound(0, 60, 'why'), -0.001, False),
    (_timing.TimeBound(0, 60, 'why', least_allowed=False), 0, False),
    (_timing.TimeBound(0, 60, 'why', least_allowed=False), 0.001, True),
    # NaN compares false with every bound: a range that let it through would have no maximum at all.
    (_timing.TimeBound(0, 60, 'why'), float('nan'), False),
    (_timing.TimeBound(0, 60, 'why'), float('inf'), False),
    (_timing.TimeBound(0, 60, 'why'), float('-inf'), False),
])
def test_a_time_bound_holds_its_range_only(bound, seconds, holds):
    assert bound.holds(seconds) is holds


@pytest.mark.parametrize('bound, words', [
    (_timing.TimeBound(0, 3600, 'why'), 'from 0 to 3600 s'),
    (_timing.TimeBound(0, 0.5, 'why', least_allowed=False), 'above 0, at most 0.5 s'),
    (_timing.TimeBound(0, 172800, 'why', least_allowed=False, auto=True), 'above 0, at most 172800 s, or auto'),
])
def test_a_time_bound_says_its_range(bound, words):
    assert bound.words() == words


def test_every_time_bound_says_why_and_holds_the_roles_default():
    with open(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'roles', 'sglang', 'defaults',
                           'main.yml')) as handle:
        defaults = yaml.safe_load(handle)
    for name, bound in _timing.TIME_BOUNDS.items():
        assert bound.why and bound.holds(float(defaults[name])), name
