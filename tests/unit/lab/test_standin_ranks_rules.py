"""The stand-in's multi-node rules (lab/standin/sglang_standin/ranks.py): which flags fit, which schedulers a node runs."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', '..', '..', 'lab', 'standin'))
from sglang_standin import ranks  # noqa: E402  (the stand-in is not an installed package)


@pytest.mark.parametrize('nnodes, node_rank, addr, tp_size, problem', [
    (1, 0, None, 1, None),
    (2, 1, '127.0.0.31:5000', 2, None),
    (4, 3, 'mn1:5000', 8, None),
    (2, 0, None, 2, '--dist-init-addr is required when --nnodes > 1'),
    (2, 0, '127.0.0.31:5000', 3, '--tp-size 3 is not divisible by --nnodes 2'),
    (2, 2, '127.0.0.31:5000', 2, '--node-rank must be from 0 to 1 (got 2)'),
    (1, -1, None, 1, '--node-rank must be from 0 to 0 (got -1)'),
    (0, 0, None, 1, '--nnodes must be at least 1 (got 0)'),
    (2, 0, '127.0.0.31', 2, "--dist-init-addr must be HOST:PORT (got '127.0.0.31')"),
    (2, 0, ':5000', 2, "--dist-init-addr must be HOST:PORT (got ':5000')"),
    (2, 0, '127.0.0.31:70000', 2, "--dist-init-addr must be HOST:PORT (got '127.0.0.31:70000')"),
])
def test_flag_problem(nnodes, node_rank, addr, tp_size, problem):
    assert ranks.flag_problem(nnodes, node_rank, addr, tp_size) == problem


@pytest.mark.parametrize('tp_size, nnodes, node_rank, schedulers', [
    (1, 1, 0, [(0, 0)]),
    (2, 2, 0, [(0, 0)]),
    (2, 2, 1, [(1, 0)]),
    (8, 2, 1, [(4, 0), (5, 1), (6, 2), (7, 3)]),
])
def test_each_node_runs_its_share_of_the_global_ranks_on_its_own_gpus(tp_size, nnodes, node_rank, schedulers):
    assert ranks.local_schedulers(tp_size, nnodes, node_rank) == schedulers
