# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The steps of a redeploy, in the order they run: the one table their names come from.

Each step is a phase of the run: the role's tasks of that step carry the tag ``gpuops_phase_<phase>`` (the
dashboard reads a task's phase from it, so a task's title can change freely), and the step's registered results
reach the report under their run keys (``results``: run key -> the variable the step registers, the role's
``_sglang_run`` in vars/main.yml). The dashboard's phases, labels, colours and outage window, and the report's
run keys, derive from here; tests/unit/plugins/plugin_utils/test_steps.py checks every task file's tags and
registers, ``_sglang_run`` and both window flows (window_single.yml, window_group.yml) against it.

Adding a step: a row here, its task file (tagged, registering what the row names), one line in each window flow
(the flows test says where they differ), its run keys in ``_sglang_run``, and what the report makes of them
(_report.py); docs/architecture.md ("Adding a step") walks through it.
"""

from __future__ import annotations

from typing import NamedTuple


class Step(NamedTuple):
    phase: str
    # What people read: the dashboard's progress and timeline.
    label: str
    # The timeline's colour of the step's bar.
    colour: str
    # Whether the step lies inside the outage window (from the stop to the first healthy answer).
    in_window: bool = False
    # The report's phases_s key the host measures the step by (None: measured from the events only).
    reported: str | None = None
    # Run key -> the variable the step registers (or sets), as _sglang_run hands it to the report.
    results: tuple[tuple[str, str], ...] = ()


STEPS: tuple[Step, ...] = (
    Step('preflight', 'preflight', '#9aa5b1', results=(
        ('state', '_sglang_state'), ('decision', '_sglang_decision'), ('group_decision', '_sglang_group_decision'),
        ('dry_run', '_sglang_dry_run'))),
    Step('takeover', 'earlier guard carried out', '#b08968', results=(('takeover', '_sglang_takeover'),)),
    Step('prepare', 'prepare', '#7b8794', results=(
        ('gpu_probe', '_sglang_gpu_probe'), ('router_before', '_sglang_router_before'))),
    Step('slot', 'room in the fleet', '#cbd2d9', results=(('slot', '_sglang_slot'),)),
    Step('arm', 'guard armed', '#6c5ce7'),
    Step('router_out', 'out of the router', '#fab1a0', results=(('router_removed', '_sglang_router_removed'),)),
    Step('perf_before', 'benchmark old server', '#a29bfe'),
    Step('stop', 'drain + stop', '#e17055', in_window=True, reported='stop', results=(('stop', '_sglang_stop'),)),
    Step('kill', 'kill in container', '#d63031', in_window=True, reported='kill_in_container',
         results=(('killed', '_sglang_killed'),)),
    Step('gpu_release', 'GPUs free', '#fdcb6e', in_window=True, reported='gpu_release',
         results=(('released', '_sglang_released'),)),
    Step('patch', 'patch', '#0984e3', in_window=True, results=(('patched', '_sglang_patched'),)),
    Step('start', 'start to healthy', '#00b894', in_window=True, reported='start_to_healthy',
         results=(('started', '_sglang_started'),)),
    Step('perf_after', 'benchmark new server', '#5f3dc4', results=(('performance', '_sglang_performance'),)),
    Step('router_in', 'back in the router', '#55efc4', results=(('router_readmitted', '_sglang_router_readmitted'),)),
    Step('bake', 'canary bake on live traffic', '#e9c46a', results=(('bake', '_sglang_bake'),)),
    Step('confirm', 'confirmed', '#2d6a4f'),
    Step('rollback', 'rollback', '#c0392b', results=(('rollback', '_sglang_rollback'),)),
    Step('report', 'report', '#b2bec3', results=(('after_failure', '_sglang_after_failure'),)),
)

# What the report reads beside the steps' results: the run's notes (set_fact in the role, or the plan's).
NOTES: tuple[tuple[str, str], ...] = (
    ('group', '_sglang_plan.group'), ('failure', '_sglang_failure'), ('run_id', '_sglang_run_id'),
    ('window_opened', '_sglang_window_opened'), ('skip_reason', '_sglang_skip_reason'))

PHASES: tuple[str, ...] = tuple(step.phase for step in STEPS)
WINDOW_PHASES: tuple[str, ...] = tuple(step.phase for step in STEPS if step.in_window)
PHASE_TAG_PREFIX = 'gpuops_phase_'


def run_keys() -> tuple[str, ...]:
    """Every key of the report's `run`: the steps' results in step order, then the notes."""
    return tuple(key for step in STEPS for key, dummy in step.results) + tuple(key for key, dummy in NOTES)


def run_sources() -> dict[str, str]:
    """Run key -> the role's variable it is read from (what _sglang_run must say)."""
    return dict([pair for step in STEPS for pair in step.results] + list(NOTES))


def tag(phase: str) -> str:
    return PHASE_TAG_PREFIX + phase
