"""The host's clocks for a test of the guard: a boot clock that runs only when the code under test sleeps, and a
wall clock that runs with it but can be stepped (NTP correcting a drifted host, an operator's `date -s`).

It is a _lease.HostClock, so it goes wherever the guard takes its `clock=`; its `sleep` goes where the watcher
takes `sleep=`. Things the rest of the world does meanwhile (the run renewing, confirming) are scheduled on the
boot clock with `at`, and happen inside the sleep that reaches their time: the test needs no thread and no real
waiting, and a watcher that waits far past what the test expects is stopped by `limit`.
"""
from __future__ import annotations

from typing import Callable

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import HostClock

WALL_AT_BOOT = 1.7e9  # the wall clock's reading when the boot clock reads 0: any date, far from the boot clock's


class WaitedTooLong(AssertionError):
    """The code under test was still sleeping when the boot clock passed the test's limit."""


class SteppedClock(HostClock):
    def __init__(self, boot: float = 1000.0, boot_id: str = 'boot-1', limit: float | None = None):
        super().__init__(wall=self._wall, boot=self._boot, boot_id=self._boot_id)
        self.boot_seconds, self.current_boot = boot, boot_id
        self.limit = limit
        self.steps: list[tuple[float, float]] = []
        self.events: list[tuple[float, Callable[[], None]]] = []
        self.every: list[Callable[[], None]] = []

    def _wall(self) -> float:
        return WALL_AT_BOOT + self.boot_seconds + sum(size for when, size in self.steps if self.boot_seconds >= when)

    def _boot(self) -> float:
        return self.boot_seconds

    def _boot_id(self) -> str:
        return self.current_boot

    def step_wall(self, when: float, seconds: float) -> None:
        """Step the wall clock by `seconds` once the boot clock reaches `when`."""
        self.steps.append((when, seconds))

    def at(self, when: float, action: Callable[[], None]) -> None:
        """Do `action` once the boot clock reaches `when` (in the sleep that gets there)."""
        self.events.append((when, action))
        self.events.sort(key=lambda event: event[0])

    def on_every_sleep(self, action: Callable[[], None]) -> None:
        self.every.append(action)

    def reboot(self, boot: float, boot_id: str) -> None:
        """The host restarted: a new boot id, and the boot clock counts from 0 again."""
        self.boot_seconds, self.current_boot = boot, boot_id

    def sleep(self, seconds: float) -> None:
        self.boot_seconds += seconds
        if self.limit is not None and self.boot_seconds > self.limit:
            raise WaitedTooLong('still waiting at boot-clock %.1f s (wall clock %.1f), past the limit %.1f s'
                                % (self.boot_seconds, self._wall(), self.limit))
        while self.events and self.events[0][0] <= self.boot_seconds:
            self.events.pop(0)[1]()
        for action in self.every:
            action()
