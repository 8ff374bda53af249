# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every time bound of the redeploy's window, in one place: how long each step may take, how long a step hands the
guard's lease over for (`after`) when the next thing happens where it cannot renew, how long the window may last,
and how long may pass on the controller between two renewals. The guard's deadline and idle bound are checked
against these (plugin_utils/_rules.py); the plan hands them to the role's tasks (sglang_plan's `timing`), which do
no arithmetic of their own. Pure functions over the role's settings; table-tested in test_timing.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import MOST_DEADLINE_S, MOST_IDLE_S
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import COMMAND_TIMEOUT
from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_bool, as_float, as_int, as_text
from ansible_collections.gpuops.sglang.plugins.plugin_utils._performance import levels_to_measure
from ansible_collections.gpuops.sglang.plugins.plugin_utils._steps import PHASES

# Besides the ssh connect: building and sending the next module (AnsiballZ), and a controller slowed by
# the other hosts' results. Measured on the lab: a module round trip costs 0.5 to 1 s; 30 s is the margin
# for a controller under load, not a typical value.
CONTROLLER_SLACK_S = 30.0
CONTROLLER_DEFAULTS = {'connect_timeout': 10, 'retries': 0, 'forks': None, 'strategy': 'free', 'batch': 1}
# Seconds on the controller a lockstep wait may add beside the bounded work of a step (the next task's build).
LOCKSTEP_SLACK_S = 30
# The router's admission after the last step on the host (the benchmark, or the start): the module's build and
# connection to the router beside the router's own timeout.
ADMISSION_SLACK_S = 30
# The guard's lock may be held by a restore that waits for the previous server's health.
LOCK_SLACK_S = 60
# Each /metrics reading of the canary's bake (sglang_canary_bake's timeout).
BAKE_READ_TIMEOUT_S = 10

HOUR_S = 3600.0
DAY_S = 86400.0


@dataclass(frozen=True)
class TimeBound:
    """The range of one of the role's time variables, in seconds, and why its maximum is that."""
    least: float
    most: float
    why: str
    # False: the least is itself refused (the value must be above it).
    least_allowed: bool = True
    # True: "auto" is taken too (the plan computes the value from the other, bounded, settings).
    auto: bool = False

    def holds(self, seconds: float) -> bool:
        """Whether `seconds` is within the range; NaN and the infinities never are."""
        above = seconds >= self.least if self.least_allowed else seconds > self.least
        return above and seconds <= self.most

    def words(self) -> str:
        """The range as the messages and the argument spec say it: "from 0 to 3600 s", "above 0, at most 60 s"."""
        words = ('from %g to %g s' if self.least_allowed else 'above %g, at most %g s') % (self.least, self.most)
        return words + (', or auto' if self.auto else '')


# Every time bound the role takes, with its range: the plan refuses a value outside it before anything stops
# (_rules._time_bound_problems, for the inventory, -e and the dashboard alike), the dashboard answers 422 for one
# before it starts a run (gpuops_dashboard/extra_vars.py reads this table), and the argument spec states each range.
# A bound without a maximum is a host left down: a run started with sglang_rollback_idle of 1e12 and then cancelled
# after the stop leaves the server down for 30,000 years. The floors are the rules' own (_rules.py).
TIME_BOUNDS = {
    'sglang_term_timeout': TimeBound(0, HOUR_S, 'SIGTERM lets SGLang finish what it holds; a server not gone after an'
                                                ' hour is stuck, and SIGKILL is the answer'),
    'sglang_health_timeout': TimeBound(0, 4 * HOUR_S, 'a model load: the largest checkpoints, read from network storage,'
                                                      ' load within an hour or two', least_allowed=False),
    'sglang_health_poll_interval': TimeBound(0, 60, 'a poll a minute at the slowest: a longer pause only delays the'
                                                    ' new server\'s confirmation', least_allowed=False),
    'sglang_gpu_release_timeout': TimeBound(0, HOUR_S, 'the driver frees a process\'s memory within seconds of its'
                                                       ' exit; an hour covers a slow container teardown many times',
                                            least_allowed=False),
    'sglang_router_timeout': TimeBound(0, 600, 'the router shows a removal or an addition within seconds'),
    'sglang_drain_timeout': TimeBound(0, HOUR_S, 'the longest generations already routed to the server finish within'
                                                 ' minutes; past an hour the server is stopped anyway'),
    'sglang_fleet_wait_timeout': TimeBound(0, DAY_S, 'nothing is stopped while a host waits for room; a rollout that'
                                                     ' finds none in a day is better started again'),
    'sglang_perf_timeout': TimeBound(0, HOUR_S, 'one level of a benchmark; the window holds two per level',
                                     least_allowed=False),
    'sglang_tune_timeout': TimeBound(0, HOUR_S, 'one level of the speculation tuner, whose host is off its server for'
                                                ' every level of every mode', least_allowed=False),
    'sglang_prefetch_timeout': TimeBound(0, HOUR_S, 'an hour reads several TB from local NVMe; past it the window'
                                                    ' reads the rest itself', least_allowed=False),
    'sglang_canary_bake': TimeBound(0, DAY_S, 'a day of live traffic shows every hour\'s load; 0 turns the bake off'),
    'sglang_rollback_idle': TimeBound(0, MOST_IDLE_S, 'how long a host stays down after its controller is gone'
                                                      ' (killed, cancelled, cut off) before it restores the previous'
                                                      ' server itself', least_allowed=False),
    # The host refuses a guard beyond these two maxima too (module_utils/domain/_lease.py holds the numbers).
    'sglang_rollback_deadline': TimeBound(0, MOST_DEADLINE_S, 'a day\'s bake, four hours of model load, seven'
                                                              ' benchmark levels of an hour, drain and stop fit in'
                                                              ' two days; a window the settings make longer, auto'
                                                              ' or not, is refused', least_allowed=False,
                                          auto=True),
}


@dataclass(frozen=True)
class CountBound:
    """The most entries of a list of the role's whose every entry adds time to the window, and why."""
    most: int
    why: str

    def holds(self, entries: list[Any] | None) -> bool:
        return len(entries or []) <= self.most

    def words(self) -> str:
        return 'at most %d entries' % self.most


# Lists that multiply a time bound, with their most entries: checked where TIME_BOUNDS is (the plan, the dashboard,
# the argument spec). Each entry's time is bounded, their count was not: 2000 levels of a one-hour benchmark made
# an auto deadline of 168 days. Even within these counts the other maxima together may make a window longer than a
# guard may hold a host; the plan refuses that one naming what made it long (_rules.window_problems).
COUNT_BOUNDS = {
    'sglang_perf_levels': CountBound(16, 'each level is benchmarked twice inside the outage window, each within'
                                         ' sglang_perf_timeout'),
}


def _router(settings: dict[str, Any]) -> bool:
    return bool(as_text(settings['sglang_router_url']))


def _stop_term(settings: dict[str, Any]) -> list[tuple[str, float]]:
    # The stop's SIGTERM wait, and the container kill's or the GPU release's wait for what is left.
    return [('2 x sglang_term_timeout', 2 * as_float(settings['sglang_term_timeout']))]


def _router_term(settings: dict[str, Any]) -> list[tuple[str, float]]:
    # The removal and the drain before the stop, the admission after the start.
    if not _router(settings):
        return []
    return [('sglang_drain_timeout + 2 x sglang_router_timeout',
             as_float(settings['sglang_drain_timeout']) + 2 * as_float(settings['sglang_router_timeout']))]


def _benchmark_term(settings: dict[str, Any]) -> list[tuple[str, float]]:
    # The baseline and the candidate are benchmarked inside the window, each level within the timeout.
    if not as_bool(settings['sglang_perf_gate']):
        return []
    levels = levels_to_measure(settings['sglang_perf_levels'], settings['sglang_dynamic_spec_batch_size_threshold'])
    return [('2 benchmarks x %d levels (sglang_perf_levels) x sglang_perf_timeout %s s'
             % (len(levels), as_text(settings['sglang_perf_timeout'])),
             2 * len(levels) * as_float(settings['sglang_perf_timeout']))]


# Each step's share of the outage window's budget, by its phase in the step table (plugin_utils/_steps.py): a
# function of the settings giving [(words, seconds)]. A step that takes time in the window adds its term here.
STEP_TERMS = {
    'router_out': _router_term,
    'perf_before': _benchmark_term,
    'stop': _stop_term,
    'gpu_release': lambda settings: [('sglang_gpu_release_timeout', as_float(settings['sglang_gpu_release_timeout']))],
    'start': lambda settings: [('sglang_health_timeout', as_float(settings['sglang_health_timeout']))],
    'bake': lambda settings: [_bake_term(settings)],
}


def window_terms(settings: dict[str, Any]) -> list[tuple[str, float]]:
    """[(words, seconds)] of the outage window, in the step table's order: each step's STEP_TERMS (the stop's
    2 x term, the GPU release, the health wait; with a router its drain and 2 x its timeout, with the performance
    gate two benchmarks, and the canary's bake)."""
    return [term for phase in PHASES if phase in STEP_TERMS for term in STEP_TERMS[phase](settings)]


def window_budget(settings: dict[str, Any]) -> float:
    """How long the outage window may last: the sum of window_terms."""
    return sum(seconds for dummy, seconds in window_terms(settings))


def _bake_term(settings: dict[str, Any]) -> tuple[str, float]:
    baselines = len(settings['sglang_fleet_hosts'] or []) - 1
    return ('sglang_canary_bake %s s and 2 /metrics readings of the canary and each of %d other fleet servers'
            % (as_text(settings['sglang_canary_bake']), max(baselines, 0)), bake_bound(settings, baselines))


def bake_bound(settings: dict[str, Any], baselines: int = 0) -> float:
    """How long the canary's bake may take (0 without one): the hold and two /metrics readings of the canary and
    of each baseline server (at least one counted)."""
    seconds = as_float(settings['sglang_canary_bake'])
    if seconds <= 0:
        return 0
    return seconds + 2 * (1 + max(1, as_int(baselines))) * BAKE_READ_TIMEOUT_S


# gpu_release's own bounds the role leaves at their defaults (plugins/modules/gpu_release.py).
GPU_RELEASE_COMMAND_TIMEOUT = 30.0
GPU_RELEASE_KILL_TIMEOUT = 10.0
# The module round trips of one tuning mode (the candidates' write, the stop, the release, the start, the
# benchmark, the figures kept), each given the controller's slack.
TUNE_STEPS_PER_MODE = 6


def tune_budget(settings: dict[str, Any], modes: list[Any]) -> float:
    """How long a speculation tuning run (playbooks/tune_speculation.yml) may keep the host off its previous
    server, the deadline of the guard armed before its first stop: for each mode every step's own bound (the stop:
    its command and SIGTERM's then SIGKILL's wait; the GPU release waiting for the stopping server: gpu_release's
    release_bound; the start: its command and the health wait; the benchmark: every level within
    sglang_tune_timeout) and the controller's slack for each step; the router's removal and drain once."""
    term = as_float(settings['sglang_term_timeout'])
    stop_s = COMMAND_TIMEOUT + 2 * term
    release_s = (2 * GPU_RELEASE_COMMAND_TIMEOUT + 2 * (term + GPU_RELEASE_KILL_TIMEOUT)
                 + as_float(settings['sglang_gpu_release_timeout']))
    start_s = COMMAND_TIMEOUT + as_float(settings['sglang_health_timeout'])
    benchmark_s = len(settings['sglang_tune_levels'] or []) * as_float(settings['sglang_tune_timeout']) + 10
    per_mode = stop_s + release_s + start_s + benchmark_s + TUNE_STEPS_PER_MODE * CONTROLLER_SLACK_S
    budget = len(modes) * per_mode
    if _router(settings):
        budget += as_float(settings['sglang_drain_timeout']) + 2 * as_float(settings['sglang_router_timeout'])
    return budget


def renewal_gap(controller: dict[str, Any] | None) -> float:
    """The longest that may legitimately pass on the controller between two renewals of the guard's lease:
    an ssh connect with its retries (ControlPersist may have lapsed), then the next module built and sent."""
    controller = dict(CONTROLLER_DEFAULTS, **(controller or {}))
    return as_float(controller['connect_timeout']) * (1 + as_int(controller['retries'])) + CONTROLLER_SLACK_S


def peer_terms(group: dict[str, Any] | None, settings: dict[str, Any],
               perf_levels: list[Any]) -> dict[str, list[tuple[str, float]]]:
    """{armed, started}: [(words, seconds)] of peer_wait, in the order they add up ({armed: [], started: []} on
    rank 0 and on a single-node server)."""
    if group is None or group['rank'] == 0:
        return {'armed': [], 'started': []}
    router = _router(settings)
    router_s = as_float(settings['sglang_router_timeout']) if router else 0
    drain_s = as_float(settings['sglang_drain_timeout']) if router else 0
    benchmark = ("rank 0's benchmark: %d levels (sglang_perf_levels) x sglang_perf_timeout %s s, and its drain"
                 % (len(perf_levels), as_text(settings['sglang_perf_timeout'])),
                 len(perf_levels) * as_float(settings['sglang_perf_timeout']) + drain_s
                 if as_bool(settings['sglang_perf_gate']) else 0)
    # Rank 0's stop: its drain, the command, SIGTERM's wait (the stop does not wait for SIGKILL's).
    stop = ("rank 0's drain and stop", drain_s + COMMAND_TIMEOUT + as_float(settings['sglang_term_timeout']))
    router_term = ("rank 0's removal from the router or admission (sglang_router_timeout)", router_s)
    slack = ('the lockstep slack', LOCKSTEP_SLACK_S)
    return {
        'armed': [router_term, benchmark, stop, slack],
        # The group as a canary: rank 0 bakes after its admission, before the guards are confirmed.
        'started': [("rank 0's start (sglang_health_timeout)", as_float(settings['sglang_health_timeout'])),
                    benchmark, router_term, _bake_term(settings), slack],
    }


def peer_wait(group: dict[str, Any] | None, settings: dict[str, Any], perf_levels: list[Any]) -> dict[str, float]:
    """{armed, started}: how long a rank > 0 waits, after each of those steps of its own, for what rank 0 alone
    does in lockstep meanwhile (the group play runs each step on every node before the next), which its lease
    must cover (`after`): after the arm, rank 0's removal from the router, its baseline benchmark and its drain
    and stop (the other ranks stop once rank 0 stopped); after the ranks' start, rank 0's start, health wait,
    verification, benchmark, admission and canary bake. Zeros on rank 0 and on a single-node server, whose own steps renew
    their own leases."""
    return {key: sum(seconds for dummy, seconds in terms) for key, terms in peer_terms(group, settings, perf_levels).items()}


def step_bounds(settings: dict[str, Any], group: dict[str, Any] | None, perf_levels: list[Any]) -> dict[str, Any]:
    """What the role's steps are handed (sglang_plan's `timing`). `after` values are keyed by whether the run found
    the server in the router (`in_router`) or not (`out_of_router`): the router is read after the plan, and the
    role picks one without arithmetic.

    - arm_after: the guard's arm, before the server is taken out of the router on the controller's side (the
      router's timeout), and on a rank > 0 rank 0's steps meanwhile (peer_wait armed).
    - stop_after: the graceful stop, before the container kill on the Proxmox node when strays were seen (its
      SIGTERM wait, SIGKILL's wait, and pct exec's command).
    - ranks_started_after: a rank > 0's start, before rank 0's start, verification and admission (peer_wait
      started).
    - readmit_after: the step before the router's admission (the start, or the candidate's benchmark).
    - lock_timeout: the guard's restore waits this long for its lock (another restore waits for health).
    """
    router_s = as_float(settings['sglang_router_timeout'])
    peers = peer_wait(group, settings, perf_levels)
    return {
        'arm_after': {'in_router': max(router_s, peers['armed']), 'out_of_router': peers['armed']},
        'stop_after': 2 * as_float(settings['sglang_term_timeout']) + COMMAND_TIMEOUT,
        'ranks_started_after': peers['started'],
        'readmit_after': {'in_router': router_s + ADMISSION_SLACK_S, 'out_of_router': 0},
        # A restore with a router waits for the requests in flight of a readmitted server before its stop.
        'lock_timeout': (as_float(settings['sglang_health_timeout']) + LOCK_SLACK_S
                         + (as_float(settings['sglang_drain_timeout']) if _router(settings) else 0)),
        'window_budget': window_budget(settings),
        'deadline': deadline(settings),
    }


# What each of step_bounds' values is, as a refusal's sentence starts (_rules.window_problems).
BOUND_WORDS = {
    'window_budget': 'The outage window (timing.window_budget, the guard\'s deadline with sglang_rollback_deadline'
                     ' auto)',
    'arm_after': 'What this host waits for after its guard\'s arm without renewing it (timing.arm_after)',
    'stop_after': 'What the stop hands the lease over for (timing.stop_after)',
    'ranks_started_after': 'What this rank waits for after its start without renewing its guard'
                           ' (timing.ranks_started_after)',
    'readmit_after': 'What the step before the router\'s admission hands the lease over for (timing.readmit_after)',
    'lock_timeout': 'How long the guard\'s restore waits for its lock (timing.lock_timeout)',
}


def long_bounds(settings: dict[str, Any], group: dict[str, Any] | None,
                perf_levels: list[Any]) -> list[tuple[str, float, list[tuple[str, float]]]]:
    """[(name, seconds, terms)]: every value of step_bounds longer than a guard may keep a host off its previous
    server (MOST_DEADLINE_S, the host refuses it too), NaN included, with the terms that add up to it
    ([(words, seconds)], longest first; [] for a value that is one variable's own). The deadline is left to the
    window's entry when it is auto (the same number), and to its own range when given."""
    bounds = step_bounds(settings, group, perf_levels)
    peers = peer_terms(group, settings, perf_levels)
    terms = {'window_budget': window_terms(settings), 'arm_after': peers['armed'],
             'ranks_started_after': peers['started']}
    found = []
    for name, value in bounds.items():
        seconds = max(value.values()) if isinstance(value, dict) else value
        if name == 'deadline' or seconds <= MOST_DEADLINE_S:
            continue
        found.append((name, seconds, sorted((term for term in terms.get(name, []) if term[1]),
                                            key=lambda term: term[1], reverse=True)))
    return found


def deadline(settings: dict[str, Any]) -> float:
    """The guard's deadline in seconds: sglang_rollback_deadline, or with `auto` the window's budget."""
    if is_auto(settings['sglang_rollback_deadline']):
        return window_budget(settings)
    # Not a number: 0, which the rules refuse (_rules._deadline_problems) before anything is armed.
    return as_float(settings['sglang_rollback_deadline'])


def is_auto(value: Any) -> bool:
    return as_text(value).strip().lower() == 'auto'
