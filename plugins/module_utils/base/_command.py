# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one way this collection runs a command: an argv list, the C locale, a deadline, recorded in ``cmd``.

Base layer, standard library only (the host-side guard runs it without Ansible).

Two back ends behind one ``CommandRunner``:

- Ansible (``CommandRunner(module, timeout)``): every command goes through
  ``module.run_command`` (so unit tests replace only that), prefixed with coreutils
  ``timeout``. ``run_command`` itself has no deadline, and a wedged driver
  (nvidia-smi) or a frozen container (pct exec) is exactly when these modules run.
  ``timeout`` puts the command in its own process group and signals the whole group,
  so helpers it started (nsenter, lxc-attach) die with it and release the output
  pipes ``run_command`` waits on.
- standard library (``CommandRunner.over(runner, timeout)``): any
  ``runner(argv, timeout) -> (rc, stdout, stderr)``, by default ``subprocess_runner``,
  for the guard's watcher, which has no AnsibleModule. A runner reports a missed
  deadline as rc 124, as coreutils ``timeout`` does.

No Ansible import here: the module object is passed in.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any, Callable

C_LOCALE = {'LANG': 'C', 'LC_ALL': 'C'}
# After the deadline: TERM to the command's process group, KILL this much later.
KILL_AFTER = 5
# coreutils timeout exits 124 when the command ended on its signal, 128+9 when KILL was needed.


class CommandError(Exception):
    """A command could not be run at all, or did not finish before its deadline."""

    def __init__(self, msg: str, result: CommandResult | None = None) -> None:
        super().__init__(msg)
        self.result = result


class BoundedCall:
    """action() run in a daemon thread of its own and waited for at most `bound` seconds.

    For what has no process to kill: an in-process library call (NVML, wedged with its driver) or a client
    talking to a peer that may never finish. A caller that stops waiting goes on; the thread, a daemon,
    never keeps the process from exiting. Whatever action() raised (RecursionError included) is raised again
    in the waiting thread.
    """

    def __init__(self, action: Callable, bound: float, name: str) -> None:
        self.action, self.bound, self.name = action, float(bound), name
        self.thread = None
        self.outcome = {}

    def _run(self) -> None:
        try:
            self.outcome['value'] = self.action()
        except BaseException as exc:  # handed to the waiting thread
            self.outcome['error'] = exc

    def timeout_error(self) -> CommandError:
        return CommandError('%s did not return within %gs' % (self.name, self.bound))

    def wait(self) -> list[dict[str, Any]] | int | None:
        """action()'s value; timeout_error() when it has not returned within the bound."""
        self.thread = threading.Thread(target=self._run, name=self.name)
        self.thread.daemon = True
        self.thread.start()
        self.thread.join(self.bound)
        if self.thread.is_alive():
            raise self.timeout_error()
        if 'error' in self.outcome:
            raise self.outcome['error']
        return self.outcome.get('value')

    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


class CommandResult:
    __slots__ = ('argv', 'rc', 'stdout', 'stderr', 'timed_out', 'timeout')

    def __init__(self, argv: list[str], rc: int, stdout: str, stderr: str, timed_out: bool, timeout: float) -> None:
        self.argv = argv
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.timed_out = timed_out
        self.timeout = timeout

    @property
    def output(self) -> str:
        """stdout and stderr together, stripped: nvidia-smi prints its driver errors on stdout."""
        return '\n'.join(part.strip() for part in (self.stdout, self.stderr) if part and part.strip())

    def describe(self) -> str:
        """'`ARGV` timed out after Ns' or '`ARGV` failed (rc N): OUTPUT' for a failure message."""
        if self.timed_out:
            return '`%s` timed out after %gs and was killed' % (format_argv(self.argv), self.timeout)
        return '`%s` failed (rc %d): %s' % (format_argv(self.argv), self.rc, self.output or 'no output')


def format_argv(argv: list[str]) -> str:
    return ' '.join(argv)


def subprocess_runner(argv: list[str], timeout: float) -> tuple[int, str, str]:
    """The standard-library back end: (rc, stdout, stderr) of argv, rc 124 when it missed its deadline."""
    env = dict(os.environ, **C_LOCALE)
    try:
        # The guard's watcher runs without an AnsibleModule, so without run_command.
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                env=env, universal_newlines=True)
    except OSError as exc:
        return 127, '', str(exc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return 124, out, (err or '') + '\n%s did not finish within %ss' % (argv[0], timeout)
    return proc.returncode, out, err


class CommandRunner:
    """Runs argv lists through ``module.run_command`` under a deadline and records each in ``cmd``.

    ``cmd`` holds the argv as the operator would type it, without the
    ``timeout`` prefix that bounds it.
    """

    def __init__(self, module: Any, timeout: int, clock: Any = time.monotonic, runner: Any = None) -> None:
        if timeout <= 0:
            raise CommandError('command_timeout must be greater than 0, got %r' % timeout)
        self.module = module
        self.timeout = timeout
        self.clock = clock
        self.cmd = []
        self._timeout_bin = None
        self._runner = runner

    @classmethod
    def over(cls, runner: Any = subprocess_runner, timeout: int = 60.0,
             clock: Callable = time.monotonic) -> CommandRunner:
        """The standard-library back end: commands go to ``runner(argv, timeout)``, not to an AnsibleModule."""
        return cls(None, timeout, clock=clock, runner=runner)

    def _deadline_prefix(self, timeout: float) -> list[str]:
        if self._timeout_bin is None:
            self._timeout_bin = self.module.get_bin_path('timeout', required=False)
            if not self._timeout_bin:
                raise CommandError('coreutils `timeout` was not found on PATH; every command runs under it '
                                   'so that a hung driver or container cannot hang the task')
        return [self._timeout_bin, '--kill-after=%d' % KILL_AFTER, '%gs' % timeout]

    def run(self, argv: list[str], timeout: float | None = None, cwd: str | None = None,
            data: bytes | None = None) -> CommandResult:
        """Run argv and return a CommandResult; never raises for a non-zero rc or a timeout."""
        argv = [str(arg) for arg in argv]
        timeout = self.timeout if timeout is None else timeout
        if self._runner is not None:
            if cwd is not None or data is not None:
                raise CommandError('the standard-library runner takes no cwd or input: `%s`' % format_argv(argv))
            self.cmd.append(argv)
            rc, stdout, stderr = self._runner(argv, timeout)
            return CommandResult(argv, rc, stdout or '', stderr or '', rc == 124, timeout)
        prefix = self._deadline_prefix(timeout)
        self.cmd.append(argv)
        started = self.clock()
        rc, stdout, stderr = self.module.run_command(prefix + argv, environ_update=dict(C_LOCALE), cwd=cwd,
                                                     data=data, binary_data=data is not None)
        # 137 is also what a command killed by someone else (the OOM killer) exits with: only a
        # 137 at or past the deadline is ours. None of the wrapped tools exits 124 by itself.
        timed_out = rc == 124 or (rc == 137 and self.clock() - started >= timeout)
        return CommandResult(argv, rc, stdout or '', stderr or '', timed_out, timeout)

    def as_runner(self) -> Callable:
        """A ``runner(argv, timeout) -> (rc, stdout, stderr)`` for the pure-stdlib helpers (_server, _guard),
        which run the same commands without Ansible on the host-side guard."""
        def runner(argv: list[str], timeout: float | None) -> tuple[int, str, str]:
            result = self.run(argv, timeout=timeout)
            return result.rc, result.stdout, result.stderr
        return runner

    def check(self, argv: list[str], timeout: float | None = None, cwd: str | None = None,
              data: bytes | None = None) -> CommandResult:
        """Run argv; raise CommandError (carrying the result) unless it exited 0 in time."""
        result = self.run(argv, timeout=timeout, cwd=cwd, data=data)
        if result.timed_out or result.rc != 0:
            raise CommandError(result.describe(), result)
        return result
