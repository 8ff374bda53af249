# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The steps of a redeploy, in the order they run: the one table their names come from.

Each step is a phase of the run: the role's tasks of that step carry the tag ``gpuops_phase_<phase>`` (the
dashboard reads a task's phase from it, so a task's title can change freely), and the step's registered results
reach the report under their run keys (``results``: run key -> the variable the step registers; the lookup
gpuops.sglang.sglang_run reads them for the role's ``_sglang_run``). The dashboard's phases, labels, colours and
outage window, the report's run keys and phases, the window's reset and the group barrier's results derive from
here; tests/unit/plugins/plugin_utils/test_steps.py holds every task file's tags and registers, and the window's
one flow (window_steps.yml), to it.

Adding a step: a row here, its task file (tagged, registering what the row names), one line in the window's flow
(the flow test says where it belongs), what the report makes of its results (_report.py), and its time bound
(_timing.py) where it takes one; docs/architecture.md ("Adding a step") walks through it.
"""

from __future__ import annotations

from typing import NamedTuple


class Step(NamedTuple):
    # The step's one name: its task file (roles/sglang/tasks/<phase>.yml where it has one of its own), its tag
    # (gpuops_phase_<phase>), the dashboard's phase, and, for a step with one result, the result's run key and
    # variable (_sglang_<phase>) and the report's phases_s key.
    phase: str
    # What people read: the dashboard's progress and timeline.
    label: str
    # The timeline's colour of the step's bar.
    colour: str
    # Whether the step lies inside the outage window (from the stop to the first healthy answer).
    in_window: bool = False
    # Whether the host measures the step itself (the report's phases_s[phase]); else the timeline measures it
    # from the run's events only.
    reported: bool = False
    # Run key -> the variable the step registers (or sets), as the lookup gpuops.sglang.sglang_run hands them to
    # the report.
    results: tuple[tuple[str, str], ...] = ()
    # Whether the window runs the step only when needed: its include, skipped as a whole, registers the skip under
    # the step's (first) result, so that an earlier window's result never reaches this one's report.
    when_needed: bool = False
    # Whether a failure of the step is left to what follows instead of rolling back (its tasks ignore errors).
    tolerated: bool = False
    # Where the step's work may be done by a later step's task instead (variable, key): its result under that key,
    # read where the step's own registration is a skip (the lookup gpuops.sglang.sglang_run).
    carried_by: tuple[str, str] | None = None


def _own(phase: str) -> tuple[tuple[str, str], ...]:
    """The one result of a step named after it: run key <phase>, variable _sglang_<phase>."""
    return ((phase, '_sglang_' + phase),)


STEPS: tuple[Step, ...] = (
    Step('preflight', 'preflight', '#9aa5b1', results=(
        ('state', '_sglang_state'), ('decision', '_sglang_decision'), ('group_decision', '_sglang_group_decision'),
        ('dry_run', '_sglang_dry_run'))),
    Step('takeover', 'earlier guard carried out', '#b08968', results=_own('takeover')),
    Step('prepare', 'prepare', '#7b8794', results=(
        ('gpu_probe', '_sglang_gpu_probe'), ('router_before', '_sglang_router_before'))),
    Step('slot', 'room in the fleet', '#cbd2d9', results=_own('slot')),
    # While the old server serves, once this host will be redeployed: the new server's files into the page cache.
    Step('prefetch', 'weights into the page cache', '#74b9ff', results=_own('prefetch'), when_needed=True),
    Step('arm', 'guard armed', '#6c5ce7', results=_own('arm')),
    Step('router_out', 'out of the router', '#fab1a0', results=_own('router_out')),
    # A baseline that cannot be read is no reason to keep the old server: the gate's verdict says so.
    Step('perf_before', 'benchmark old server', '#a29bfe', results=_own('perf_before'), when_needed=True,
         tolerated=True),
    Step('stop', 'drain + stop', '#e17055', in_window=True, reported=True, results=_own('stop')),
    Step('kill', 'kill in container', '#d63031', in_window=True, reported=True, results=_own('kill'),
         when_needed=True),
    # A single-node server's start releases its GPUs in its own module run when the stop found no strays (its
    # result's `release`).
    Step('gpu_release', 'GPUs free', '#fdcb6e', in_window=True, reported=True, results=_own('gpu_release'),
         carried_by=('_sglang_start', 'release')),
    Step('patch', 'patch', '#0984e3', in_window=True, results=_own('patch'), when_needed=True),
    # An undo run's (playbooks/undo.yml) instead of the patch: the files of a revision put back byte for byte.
    Step('restore', 'revision put back', '#00cec9', in_window=True, results=_own('restore'), when_needed=True),
    # Rank 0's start, or a single-node server's; the other ranks of a server group must still run after it.
    Step('start', 'start to healthy', '#00b894', in_window=True, reported=True,
         results=_own('start') + (('alive', '_sglang_alive'),)),
    # The verdict of the performance gate (the candidate's own figures are _sglang_perf_after, read by it).
    Step('perf_after', 'benchmark new server', '#5f3dc4', results=(('performance', '_sglang_performance'),),
         when_needed=True),
    Step('router_in', 'back in the router', '#55efc4', results=_own('router_in')),
    Step('bake', 'canary bake on live traffic', '#e9c46a', results=_own('bake'), when_needed=True),
    Step('confirm', 'confirmed', '#2d6a4f', results=_own('confirm')),
    Step('rollback', 'rollback', '#c0392b', results=_own('rollback')),
    Step('report', 'report', '#b2bec3', results=(('after_failure', '_sglang_after_failure'),)),
)

# What the report reads beside the steps' results: the run's notes (set_fact in the role, or vars/main.yml's).
NOTES: tuple[tuple[str, str], ...] = (
    ('group', '_sglang_group'), ('failure', '_sglang_failure'), ('run_id', '_sglang_run_id'),
    ('window_opened', '_sglang_window_opened'), ('skip_reason', '_sglang_skip_reason'))

PHASES: tuple[str, ...] = tuple(step.phase for step in STEPS)
WINDOW_PHASES: tuple[str, ...] = tuple(step.phase for step in STEPS if step.in_window)
REPORTED_PHASES: tuple[str, ...] = tuple(step.phase for step in STEPS if step.reported)
PHASE_TAG_PREFIX = 'gpuops_phase_'
# The steps of the window's one flow (window_steps.yml), the guard's arm to its confirmation, the rescue aside.
FLOW_PHASES: tuple[str, ...] = PHASES[PHASES.index('arm'):PHASES.index('confirm') + 1]


def run_keys() -> tuple[str, ...]:
    """Every key of the report's `run`: the steps' results in step order, then the notes."""
    return tuple(key for step in STEPS for key, dummy in step.results) + tuple(key for key, dummy in NOTES)


def run_sources() -> dict[str, str]:
    """Run key -> the role's variable it is read from (what the lookup gpuops.sglang.sglang_run reads)."""
    return {key: variable for step in STEPS for key, variable in step.results} | dict(NOTES)


def carried() -> dict[str, tuple[str, str]]:
    """Run key -> (variable, key) where another step's task may have done the step's work (Step.carried_by)."""
    return {step.results[0][0]: step.carried_by for step in STEPS if step.carried_by}


def window_results() -> tuple[str, ...]:
    """The variables the flow's steps register, in step order, but a tolerated step's: what a server group's
    barrier reads of each node to say which step a node failed."""
    return tuple(variable for step in STEPS if step.phase in FLOW_PHASES and not step.tolerated
                 for dummy, variable in step.results)


def tag(phase: str) -> str:
    return PHASE_TAG_PREFIX + phase
