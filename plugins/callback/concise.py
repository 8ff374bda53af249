# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: concise
type: stdout
short_description: The default output, with each failure said once and the hidden results back at -v
version_added: 0.3.0
author:
  - gpuops.sglang maintainers (@gpuops)
description:
  - ansible-core's C(default) callback with two changes, for playbooks such as C(gpuops.sglang.redeploy) that run
    many tasks per host and whose modules return many keys every run.
  - >-
    A failed task is said once. The C(default) callback prints an C([ERROR]) block with the message and then
    the whole result, which holds the same message again. Here, without C(-v), the failure is one line per host,
    C(fatal: [HOST]: FAILED! => MESSAGE), after the task's path (once per task) when O(show_task_path_on_failure) is set.
    With C(-v) and more, the C(default) callback's full display comes back.
  - With C(-v) and more, ok and skipped results are shown even where O(display_ok_hosts) or
    O(display_skipped_hosts) hide them, so hiding them in C(ansible.cfg) costs no detail when asked for.
  - Everything else (changed results, diffs, warnings, the recap, loops, unreachable hosts) is the C(default)
    callback's.
extends_documentation_fragment:
  - ansible.builtin.default_callback
  - ansible.builtin.result_format_callback
requirements:
  - set as the stdout callback (C(stdout_callback = gpuops.sglang.concise) in C(ansible.cfg)).
'''

from ansible.plugins.callback.default import CallbackModule as DefaultCallbackModule


class CallbackModule(DefaultCallbackModule):

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = 'stdout'
    CALLBACK_NAME = 'gpuops.sglang.concise'

    def __init__(self):
        super(CallbackModule, self).__init__()
        self._last_task_path_shown = None

    def set_options(self, task_keys=None, var_options=None, direct=None):
        super(CallbackModule, self).set_options(task_keys=task_keys, var_options=var_options, direct=direct)
        if self._display.verbosity > 0:
            self._plugin_options['display_ok_hosts'] = True
            self._plugin_options['display_skipped_hosts'] = True

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if self._display.verbosity > 0 or (result.task.loop and 'results' in result.result):
            super(CallbackModule, self).v2_runner_on_failed(result, ignore_errors=ignore_errors)
            return
        if self._last_task_banner != result.task._uuid:
            self._print_task_banner(result.task)
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
