"""The one wait loop (_polling): its interval, on a fake clock (no sleeps)."""
import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia import FreeMemoryProof, memory_dropped
from ansible_collections.gpuops.sglang.plugins.module_utils.base._polling import next_interval, poll_until


class FakeClock(object):
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


@pytest.mark.parametrize('interval, progressed, expected', [
    (0.05, False, 0.1),
    (0.1, False, 0.2),
    (0.2, False, 0.25),    # capped
    (0.25, False, 0.25),
    (0.25, True, 0.05),    # the state moved: back to the first interval
    (0.05, True, 0.05),
])
def test_next_interval(interval, progressed, expected):
    assert next_interval(interval, 0.05, 0.25, progressed) == expected


def gpu(index, used):
    return {'index': index, 'uuid': 'GPU-%d' % index, 'memory_used_mib': used, 'memory_total_mib': 143771,
            'error': None}


@pytest.mark.parametrize('previous, current, dropped', [
    ([gpu(0, 21099)], [gpu(0, 21096)], True),
    ([gpu(0, 21099)], [gpu(0, 21099)], False),
    ([gpu(0, 100)], [gpu(0, 200)], False),
    ([gpu(0, 21099), gpu(1, 5)], [gpu(0, 21099), gpu(1, 0)], True),
    ([], [gpu(0, 0)], False),                          # nothing to compare with (a failed reading)
    ([gpu(0, 21099)], [gpu(0, None)], False),          # an unreadable GPU is no progress
    ([gpu(0, 21099)], [gpu(1, 0)], False),             # another GPU: no comparison
])
def test_memory_dropped(previous, current, dropped):
    assert memory_dropped(previous, current) is dropped


@pytest.mark.parametrize('readings, progressed, sleeps', [
    # Static until free: the wait doubles up to its cap (what the landed code always did).
    ([5, 5, 5, 5, 5, 0], None, [0.05, 0.1, 0.2, 0.25, 0.25]),
    # Going down while the driver frees it: every wait is the first interval again.
    ([5, 5, 4, 3, 2, 0], lambda a, b: b < a, [0.05, 0.1, 0.05, 0.05, 0.05]),
    # Done at once: no wait at all.
    ([0], lambda a, b: b < a, []),
])
def test_poll_until_starts_again_from_the_first_interval_on_progress(readings, progressed, sleeps):
    clock = FakeClock()
    values = list(readings)
    last = poll_until(lambda: values.pop(0), lambda value: value == 0, 10, 0.05, 0.25, clock=clock,
                      sleep=clock.sleep, progressed=progressed)
    assert last == 0 and clock.sleeps == sleeps


def test_poll_until_never_sleeps_past_its_deadline():
    clock = FakeClock()
    last = poll_until(lambda: 5, lambda value: value == 0, 0.3, 0.05, 0.25, clock=clock, sleep=clock.sleep)
    assert last == 5 and clock.sleeps == [0.05, 0.1, 0.15] and clock.now == pytest.approx(0.3)


class Reader(object):
    """A GPU reader with its own pace; each reading the next used MiB of GPU 0."""

    def __init__(self, used, poll_intervals):
        self.used = list(used)
        self.poll_intervals = poll_intervals

    def gpus(self):
        return [gpu(0, self.used.pop(0) if len(self.used) > 1 else self.used[0])]


@pytest.mark.parametrize('used, intervals, max_interval, sleeps', [
    # nvidia-smi's pace; the memory going down brings the wait back to 0.05 s.
    ([21099, 21099, 21099, 21096, 20000, 0], (0.05, 0.25), None, [0.05, 0.1, 0.2, 0.05, 0.05]),
    # NVML's pace: every 20 ms.
    ([21099, 21099, 21099, 0], (0.02, 0.02), None, [0.02, 0.02, 0.02]),
    # The guard's longer cap still applies to a reader at nvidia-smi's pace.
    ([5, 5, 5, 5, 5, 0], (0.05, 0.25), 0.5, [0.05, 0.1, 0.2, 0.4, 0.5]),
])
def test_memory_wait_follows_the_readers_pace(monkeypatch, used, intervals, max_interval, sleeps):
    clock = FakeClock()
    # poll_until's defaults were bound at import: hand it the fake clock through the module's names.
    import ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia as nvidia
    real = nvidia.poll_until
    monkeypatch.setattr(nvidia, 'poll_until', lambda *a, **k: real(*a, clock=clock, sleep=clock.sleep, **k))
    proof = FreeMemoryProof(Reader(used, intervals), 0, [0])
    proof.wait(60, max_interval=max_interval)
    assert proof.free() and clock.sleeps == sleeps
