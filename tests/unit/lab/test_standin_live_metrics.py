"""The stand-in's live /metrics (lab/standin/sglang_standin/live_metrics.py), read back by the collection's reader
(plugins/module_utils/domain/_live_metrics.py): what one exports the other reads, as SGLang's names and buckets."""
import os
import sys

from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _live_metrics

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', '..', 'lab', 'standin'))
from sglang_standin import decode, live_metrics  # noqa: E402  (the stand-in is not an installed package)


def exported(live):
    return '\n'.join(live.lines('lab "model"')) + '\n'


def test_what_the_stand_in_exports_the_reader_reads_and_differences():
    live = live_metrics.LiveMetrics()
    before = _live_metrics.snapshot(exported(live))
    live.finished(True, 0.15, [0.01, 0.05], 0.3, 3)
    live.finished(False, 0.5, [0.03], 0.7, 2)
    live.failed()
    served = _live_metrics.difference(before, _live_metrics.snapshot(exported(live)))
    assert (served['requests'], served['aborted'], served['tokens']) == (2, 1, 5)
    # Streaming and not are one series for the bake; the bounds are upstream's, +Inf last.
    assert served['ttft']['bounds'][:3] == [0.1, 0.2, 0.4] and served['ttft']['bounds'][-1] == float('inf')
    assert served['ttft']['counts'][1] == 1 and served['ttft']['counts'][3] == 1 and sum(served['ttft']['counts']) == 2
    assert sum(served['itl']['counts']) == 3 and sum(served['e2e']['counts']) == 2
    # The exact totals, for the bake's means: 0.15 + 0.5 s to the first token, 0.01 + 0.05 + 0.03 s between tokens.
    assert abs(served['ttft']['sum'] - 0.65) < 1e-9 and abs(served['itl']['sum'] - 0.09) < 1e-9
    assert abs(served['e2e']['sum'] - 1.0) < 1e-9


def test_the_degrade_knob_slows_the_scheduler_only_after_its_time():
    scheduler = decode.Scheduler({1: 0}, 4, False, slowdown=5.0, degrade_at=decode.time.monotonic() + 60)
    assert scheduler.slowdown_now() == 1.0
    scheduler.degrade_at = decode.time.monotonic() - 1
    assert scheduler.slowdown_now() == 5.0
    assert decode.Scheduler({1: 0}, 4, False, slowdown=5.0).slowdown_now() == 5.0


def test_the_error_rate_fails_that_share_every_time():
    rate = live_metrics.ErrorRate('0.2')
    assert sum(rate.next_fails() for dummy in range(100)) == 20
    assert not any(live_metrics.ErrorRate(None).next_fails() for dummy in range(10))
