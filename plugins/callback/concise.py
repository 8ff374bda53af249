# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: concise
type: stdout
short_description: The default output made quiet, each change one line, each failure said once, detail back at -v
version_added: 0.3.0
author:
  - gpuops.sglang maintainers (@gpuops)
description:
  - ansible-core's C(default) callback, quiet by default, for playbooks such as C(gpuops.sglang.redeploy) that run
    many tasks per host, include task files, and whose modules return many keys every run.
  - >-
    Without C(-v), a changed result is one line that names its task, C(changed: [HOST] ROLE : TASK), with no
    task banner (with the C(free) strategy the hosts' tasks interleave, and a banner per task and host doubled
    the output); C(included:) lines are not shown.
  - >-
    A failed task is said once. The C(default) callback prints an C([ERROR]) block with the message and then
    the whole result, which holds the same message again. Here, without C(-v), the failure is its task's banner,
    its path (once per task) when O(show_task_path_on_failure) is set, and one line per host,
    C(fatal: [HOST]: FAILED! => MESSAGE).
  - >-
    At the end, before the recap, one line per host of the redeploy reports the run published (the
    C(sglang_redeploy) custom stats of C(gpuops.sglang.sglang_report)): status, health, downtime and why (after a
    check run's dry run, what the window would end and the launch flags it would change, indented); after a
    speculation tuning run, each tuned host's table and the command that applies its recommendation (the
    C(sglang_speculation) custom stats of C(gpuops.sglang.sglang_speculation)).
  - With C(-v) and more, the C(default) callback's full display comes back, and ok and skipped results are shown
    even where O(display_ok_hosts) or O(display_skipped_hosts) hide them, so hiding them in C(ansible.cfg) costs
    no detail when asked for.
  - Everything else (diffs, warnings, the recap, unreachable hosts) is the C(default) callback's.
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
requirements:
  - set as the stdout callback (C(stdout_callback = gpuops.sglang.concise) in C(ansible.cfg)).
'''

from typing import Any

from ansible import constants as C
from ansible.playbook.task_include import TaskInclude
from ansible.plugins.callback.default import CallbackModule as DefaultCallbackModule

from ansible_collections.gpuops.sglang.plugins.plugin_utils._dry_run import lines

# The custom stats key gpuops.sglang.sglang_report publishes each host's redeploy report under.
REPORTS_KEY = 'sglang_redeploy'
# The one gpuops.sglang.sglang_speculation publishes each tuned host's table under (text lines).
TUNING_KEY = 'sglang_speculation'


def tuning_lines(tables: Any) -> list[Any]:
    """The SPECULATION TUNING block: each tuned host's name, then its table's lines indented ([] without one)."""
    shown = []
    for host in sorted(tables or {}) if isinstance(tables, dict) else []:
        if isinstance(tables[host], list):
            shown.append('%s:' % host)
            shown.extend('  %s' % line for line in tables[host])
    return shown


def report_line(host: str, report: dict[str, Any]) -> str:
    """One line for a host's redeploy report: 'gpu1: redeployed, healthy, downtime 3.05 s: why' (and the
    performance gate's verdict, when it judged the run)."""
    words = [str(report.get('status', 'unknown'))]
    if report.get('healthy') is not None:
        words.append('healthy' if report['healthy'] else 'NOT healthy')
    if report.get('downtime_s'):
        words.append('downtime %s s' % report['downtime_s'])
    # The performance gate's verdict when it judged this run (its reason names a regressed level).
    verdict = (report.get('performance') or {}).get('verdict')
    if verdict in ('pass', 'fail'):
        words.append('performance gate %s' % ('passed' if verdict == 'pass' else 'FAILED'))
    line = '%s: %s' % (host, ', '.join(words))
    return '%s: %s' % (line, report['reason']) if report.get('reason') else line


def dry_run_lines(report: dict[str, Any]) -> list[Any]:
    """A check run's dry run under its host's line, indented: what the window would end, the flags it would change,
    the guard's bounds ([] where no dry run ran)."""
    if report.get('would_kill') is None:
        return []
    return ['  %s' % line for line in lines(report['would_kill'], report.get('flag_changes') or [],
                                            report.get('deadline') or {})]


class CallbackModule(DefaultCallbackModule):

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'stdout'
    CALLBACK_NAME = 'gpuops.sglang.concise'

    def __init__(self) -> None:
        super().__init__()
        self._last_task_path_shown = None
        # The task whose banner a failure printed last, quiet; whether a banner is printed for a failure now.
        self._last_failure_banner = None
        self._failure_banner = False

    def set_options(self, task_keys: Any = None, var_options: Any = None, direct: Any = None) -> None:
        super().set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        if self._display.verbosity > 0:
            self._plugin_options['display_ok_hosts'] = True
            self._plugin_options['display_skipped_hosts'] = True

    def _quiet(self) -> bool:
        """The one-line layout: without -v, and with ok and skipped results hidden (the checkout's ansible.cfg)."""
        return not (self._display.verbosity > 0 or self.get_option('display_ok_hosts')
                    or self.get_option('display_skipped_hosts'))

    def _print_task_banner(self, task: Any) -> None:
        if self._quiet() and not self._failure_banner:
            # each line shown for the task names it instead (_task_line)
            self._last_task_banner = task._uuid
            return
        super()._print_task_banner(task)

    def _print_failure_banner(self, task: Any) -> None:
        """A failure keeps its task's banner, quiet or not (once per task, as the default callback does)."""
        if not self._quiet():
            if self._last_task_banner != task._uuid:
                self._print_task_banner(task)
            return
        if self._last_failure_banner != task._uuid:
            self._failure_banner = True
            try:
                self._print_task_banner(task)
            finally:
                self._failure_banner = False
            self._last_failure_banner = task._uuid

    def _task_line(self, status: str, result: Any, item: Any = None) -> str:
        line = '%s: [%s] %s' % (status, self.host_label(result), result.task.get_name(include_role_fqcn=False).strip())
        if item is not None:
            line += ' (item=%s)' % item
        if result.task.check_mode and self.get_option('check_mode_markers'):
            line += ' [CHECK MODE]'
        return line

    def v2_runner_on_ok(self, result: Any) -> None:
        if not self._quiet():
            super().v2_runner_on_ok(result)
            return
        if isinstance(result.task, TaskInclude) or not result.result.get('changed', False):
            return
        self._handle_warnings(result.result)
        if not (result.task.loop and 'results' in result.result):  # loops: one line per item, as they come
            self._display.display(self._task_line('changed', result), color=C.COLOR_CHANGED)

    def v2_runner_item_on_ok(self, result: Any) -> None:
        if not self._quiet():
            super().v2_runner_item_on_ok(result)
            return
        if isinstance(result.task, TaskInclude) or not result.result.get('changed', False):
            return
        self._display.display(self._task_line('changed', result, self._get_item_label(result.result)),
                              color=C.COLOR_CHANGED)

    def v2_on_file_diff(self, result: Any) -> None:
        if self._quiet() and result.result.get('changed', False) and result.result.get('diff'):
            self._display.display(self._task_line('diff', result))
        super().v2_on_file_diff(result)

    def v2_playbook_on_include(self, included_file: Any) -> None:
        if not self._quiet():
            super().v2_playbook_on_include(included_file)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        custom = (getattr(stats, 'custom', None) or {}).get('_run', {})
        reports = custom.get(REPORTS_KEY) or {}
        if reports and isinstance(reports, dict):
            self._display.banner('REDEPLOY SUMMARY')
            for host in sorted(reports):
                if isinstance(reports[host], dict):
                    self._display.display(report_line(host, reports[host]))
                    for line in dry_run_lines(reports[host]):
                        self._display.display(line)
        shown = tuning_lines(custom.get(TUNING_KEY))
        if shown:
            self._display.banner('SPECULATION TUNING')
            self._display.display('\n'.join(shown))
        super().v2_playbook_on_stats(stats)

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._print_failure_banner(result.task)
        super().v2_runner_on_unreachable(result)

    def v2_runner_item_on_failed(self, result: Any) -> None:
        self._print_failure_banner(result.task)
        super().v2_runner_item_on_failed(result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        if self._display.verbosity > 0:
            super().v2_runner_on_failed(result, ignore_errors=ignore_errors)
            return
        self._print_failure_banner(result.task)
        if result.task.loop and 'results' in result.result:
            super().v2_runner_on_failed(result, ignore_errors=ignore_errors)
            return
        self._handle_warnings(result.result)
        if self.get_option('show_task_path_on_failure') and self._last_task_path_shown != result.task._uuid:
            self._last_task_path_shown = result.task._uuid
            self._print_task_path(result.task)
        message = result.result.get('msg') or self._dump_results(result.result)
        stderr = result.result.get('stderr')
        if stderr and stderr not in message:
            # a command's own words say more than "non-zero return code"
            message = '%s: %s' % (message, stderr.strip())
        self._display.display('fatal: [%s]: FAILED! => %s' % (self.host_label(result), message),
                              color='red', stderr=self.get_option('display_failed_stderr'))
        if ignore_errors:
            self._display.display('...ignoring', color='cyan')
