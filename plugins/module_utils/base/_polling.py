# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one wait loop: read until done or out of time, with a growing interval, never a fixed sleep."""

from __future__ import annotations

import time
from typing import Any, Callable


def next_interval(interval: float, first_interval: float, max_interval: float, progressed: bool = False) -> float:
    """The wait before the next read: doubled up to max_interval, or back to first_interval on progress.

    A state that is moving (GPU memory going down while the driver frees it) is about to settle:
    backing off then only delays seeing it. On an H200 a growing wait put the last reading up to
    0.25 s after the memory was free.
    """
    if progressed:
        return first_interval
    return min(interval * 2, max_interval)


def poll_until(read: Callable, done: Callable, timeout: float, first_interval: float, max_interval: float,
               clock: Callable[[], float] = time.monotonic, sleep: Callable = time.sleep, progressed: Callable | None = None) -> Any:
    """Call read() until done(reading) or timeout seconds pass; return the last reading.

    The interval starts at first_interval and doubles up to max_interval, so a
    state that settles in 0.2 s is seen at once and a slow one costs few reads.
    ``progressed(previous, current)``, when given, says a reading moved towards done: the
    interval then starts again from first_interval.
    """
    deadline = clock() + timeout
    interval = first_interval
    reading = read()
    while not done(reading) and clock() < deadline:
        sleep(min(interval, max(0.0, deadline - clock())))
        previous, reading = reading, read()
        interval = next_interval(interval, first_interval, max_interval,
                                 progressed is not None and progressed(previous, reading))
    return reading
