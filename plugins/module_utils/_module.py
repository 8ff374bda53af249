# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How every module of this collection ends: one result with the same keys every run, one way to fail.

Module layer (the top of module_utils; only plugins/modules import it). No Ansible import here:
the AnsibleModule is passed in.

A module's main() builds its AnsibleModule and its result (``new_result``: every key it returns,
with its empty value), then hands a body to ``run_module``. The body fills the result in place and
returns (success), or raises ``ModuleFailure`` (``fail``) or one of the project's own exceptions the
module names: either becomes ``fail_json`` with a clear msg and the result as far as it got, so a
failure still says what was already signalled, stopped or changed.
"""

from __future__ import annotations

from typing import Any, Callable, NoReturn


class ModuleFailure(Exception):
    """Ends the module run as failed with msg; ``keys`` are added to the result first."""

    def __init__(self, msg: str, **keys: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.keys = keys


def fail(msg: str, **keys: Any) -> NoReturn:
    raise ModuleFailure(msg, **keys)


def new_result(**keys: Any) -> dict[str, Any]:
    """The result of a run: ``changed`` false and every key the module returns, at its empty value."""
    result = dict(changed=False)
    result.update(keys)
    return result


def require_not_negative(params: dict[str, Any], names: tuple[str, ...], msg: str | None = None) -> None:
    """ModuleFailure unless each of params[names] is at least 0 (msg, else '<name> must not be negative')."""
    for name in names:
        if params[name] < 0:
            fail(msg or '%s must not be negative' % name)


def require_positive(params: dict[str, Any], name: str) -> None:
    if params[name] <= 0:
        fail('%s must be greater than 0' % name)


def run_module(module: Any, result: dict[str, Any], body: Callable, errors: tuple[type[Exception], ...] = (),
               describe: Callable = str, finish: Callable | None = None) -> None:
    """Run body() and end the module: exit_json with result, or fail_json with msg and the partial result.

    errors: the project's own exceptions the body may raise; describe(exc) is then the msg.
    finish(result), when given, runs last either way (a key only known at the end, such as ``cmd``).
    """
    msg = None
    try:
        body()
    except ModuleFailure as failure:
        result.update(failure.keys)
        msg = failure.msg
    except errors as exc:
        msg = describe(exc)
    if finish is not None:
        finish(result)
    if msg is None:
        module.exit_json(**result)
    module.fail_json(msg=msg, **result)
