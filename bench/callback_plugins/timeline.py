# -*- coding: utf-8 -*-
"""Benchmark aid: one JSON line per task and host with the controller's start and end times.

Enabled by bench/outage.py (ANSIBLE_CALLBACKS_ENABLED=timeline, ANSIBLE_CALLBACK_PLUGINS=bench/callback_plugins)
and written to $GPUOPS_TIMELINE; it lets the benchmark draw where each host's time goes, task by task.
Not shipped in the collection (bench/ is left out of the build).
"""
from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = '''
name: timeline
type: aggregate
short_description: write each task's start and end per host as JSON lines (benchmarks only)
description: Writes one JSON line per finished task and host to the file named by GPUOPS_TIMELINE.
'''


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'aggregate'
    CALLBACK_NAME = 'timeline'
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._started = {}
        self._path = os.environ.get('GPUOPS_TIMELINE')

    def v2_runner_on_start(self, host, task):
        self._started[(host.get_name(), task._uuid)] = time.time()

    def _done(self, result, outcome):
        if not self._path:
            return
        host = result._host.get_name()
        task = result._task
        begun = self._started.pop((host, task._uuid), None)
        line = {'host': host, 'task': task.get_name(), 'start': begun, 'end': time.time(), 'outcome': outcome,
                'action': task.action}
        with open(self._path, 'a') as handle:
            handle.write(json.dumps(line) + '\n')

    def v2_runner_on_ok(self, result):
        self._done(result, 'ok')

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._done(result, 'failed')

    def v2_runner_on_skipped(self, result):
        self._done(result, 'skipped')

    def v2_runner_on_unreachable(self, result):
        self._done(result, 'unreachable')
