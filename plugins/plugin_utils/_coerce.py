# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Jinja's own conversions, so the role's rules read variables exactly as the templates did.

A value from -e arrives as a string; the rules took `| int`, `| float` and `| bool` of it, which
never raise: a value that does not convert reads as 0 (or false), and the rule that wants it
positive refuses it with its message.
"""

from __future__ import annotations

from typing import Any

TRUE_WORDS = ('yes', 'on', '1', 'true')


def as_int(value: Any) -> int:
    """Jinja's `int` filter: int(value), else int(float(value)), else 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return 0


def as_float(value: Any) -> float:
    """Jinja's `float` filter: float(value), else 0.0."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def as_bool(value: Any) -> bool:
    """Ansible's `bool` filter."""
    if isinstance(value, (str, int)):
        return str(value).lower() in TRUE_WORDS
    return value == 1


def as_text(value: Any) -> str:
    """What Jinja's `~` makes of a value (an int stays 3, a float 1020.0)."""
    return value if isinstance(value, str) else str(value)
