# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one wait loop: read until done or out of time, with a growing interval, never a fixed sleep."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import time


def poll_until(read, done, timeout, first_interval, max_interval, clock=time.monotonic, sleep=time.sleep):
    """Call read() until done(reading) or timeout seconds pass; return the last reading.

    The interval starts at first_interval and doubles up to max_interval, so a
    state that settles in 0.2 s is seen at once and a slow one costs few reads.
    """
    deadline = clock() + timeout
    interval = first_interval
    reading = read()
    while not done(reading) and clock() < deadline:
        sleep(min(interval, max(0.0, deadline - clock())))
        interval = min(interval * 2, max_interval)
        reading = read()
    return reading
