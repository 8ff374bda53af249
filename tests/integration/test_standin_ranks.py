"""The stand-in's multi-node ranks (lab/standin/sglang_standin/ranks.py) behave like SGLang's, on loopback.

Each rank runs here as a plain process (no container) with its own simulated GPU host: its schedulers are
real gpu_holder.py processes, so "holds its GPU memory" is read from the nvidia-smi simulator, as the
redeploy reads it. Every step polls for the state it needs (an HTTP answer, a line of the rank's log, an
exit); nothing waits for a fixed time.
"""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from helpers.simulated import HOLDER, SimulatedGpuHost, free_port, wait_for
from helpers.standin import call, status, write_standin_module

MIB = 1000
# Rank 1's watchdog in the test that needs it: long enough for the test to see it hung and ignoring
# SIGTERM first, short enough to wait for.
WATCHDOG_S = 8


def generate(base, **extra):
    return call('POST', base + '/generate', dict({'text': 'Hello', 'sampling_params': {'max_new_tokens': 2}}, **extra))


def children_titles(pid):
    with open('/proc/%d/task/%d/children' % (pid, pid)) as handle:
        kids = [int(kid) for kid in handle.read().split()]
    titles = []
    for kid in kids:
        with open('/proc/%d/cmdline' % kid, 'rb') as handle:
            titles.append(handle.read().split(b'\0')[0].decode())
    return sorted(titles)


class Rank(object):
    """One node of a two-node server: its stand-in process, log, simulated GPU host and HTTP port."""

    def __init__(self, folder, rank, dist_port, nnodes=2, **env):
        folder.mkdir()
        self.gpus = SimulatedGpuHost(folder, gpus=1)
        module, pythonpath, _ = write_standin_module(folder, HOLDER, [str(self.gpus.dev / 'nvidiactl')])
        self.port = free_port()
        self.base = 'http://127.0.0.1:%d' % self.port
        self.log = folder / 'stderr.log'
        environment = dict(os.environ, PYTHONPATH=pythonpath, NVIDIA_SMI_SIM_STATE=str(self.gpus.state),
                           LAB_STANDIN_WARMUP='0', LAB_STANDIN_DRAIN='0', SGLANG_STANDIN_GENERATE_DELAY='0',
                           LAB_STANDIN_GPU_MIB=str(MIB), **env)
        with open(str(self.log), 'wb') as log:
            # Its own process group: the teardown ends the rank and its schedulers together.
            self.proc = subprocess.Popen(
                [sys.executable, '-m', module, '--model-path', '/models/m', '--host', '127.0.0.1',
                 '--port', str(self.port), '--tp-size', str(nnodes), '--nnodes', str(nnodes), '--node-rank', str(rank),
                 '--dist-init-addr', '127.0.0.1:%d' % dist_port],
                env=environment, stderr=log, start_new_session=True)

    def logged(self, text):
        return text in self.log.read_text()

    def memory(self):
        return self.gpus.gpus()

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


@pytest.fixture
def ranks(tmp_path):
    """start(rank, **env) starts one rank of a two-node server sharing one dist-init port."""
    started = []
    dist_port = free_port()

    def start(rank, **env):
        node = Rank(tmp_path / ('start%d-rank%d' % (len(started), rank)), rank, dist_port, **env)
        started.append(node)
        return node
    start.dist_port = dist_port
    yield start
    for node in started:
        node.kill()


@pytest.fixture
def group(ranks):
    """Rank 0 and rank 1 joined and healthy."""
    leader = ranks(0)
    follower = ranks(1, LAB_STANDIN_WATCHDOG=str(WATCHDOG_S))
    wait_for(lambda: status(leader.base + '/health') == 200, 30, 'rank 0 healthy')
    return leader, follower


def test_rank_0_is_healthy_only_once_rank_1_joined_and_the_group_generates(ranks):
    leader = ranks(0)
    wait_for(lambda: status(leader.base + '/server_info') == 200, 30, 'rank 0 to serve HTTP')
    # Warm-up is 0 s: only the missing rank keeps it unhealthy.
    code, body = call('GET', leader.base + '/health')
    assert code == 503 and 'waiting for ranks 1' in body['error'], body
    assert status(leader.base + '/health_generate') == 503
    assert generate(leader.base)[0] == 503
    info = call('GET', leader.base + '/server_info')[1]
    assert (info['nnodes'], info['node_rank'], info['dist_init_addr']) == (2, 0, '127.0.0.1:%d' % ranks.dist_port)
    assert info['internal_states'][0]['standin_ranks']['joined'] == []

    follower = ranks(1)
    wait_for(lambda: status(leader.base + '/health') == 200, 30, 'rank 0 healthy once rank 1 joined')
    assert call('GET', leader.base + '/server_info')[1]['internal_states'][0]['standin_ranks']['joined'] == [1]
    code, answer = generate(leader.base)
    assert code == 200 and answer['meta_info']['completion_tokens'] == 2, answer
    assert status(leader.base + '/health_generate') == 200
    # Rank 1 runs, holds its GPU under its global rank's title, and serves no HTTP at all.
    assert follower.proc.poll() is None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(('127.0.0.1', follower.port), timeout=5).close()
    # The schedulers retitle themselves once started (as setproctitle does): read until they have.
    wait_for(lambda: children_titles(follower.proc.pid) == ['sglang::scheduler_TP1'], 30, "rank 1's one scheduler")
    wait_for(lambda: children_titles(leader.proc.pid) == ['sglang::detokenizer', 'sglang::scheduler_TP0'], 30,
             "rank 0's scheduler and detokenizer")
    wait_for(lambda: leader.memory() == [MIB] and follower.memory() == [MIB], 30, 'each node to hold its GPU')


def test_a_second_rank_1_is_refused(group, ranks):
    leader, follower = group
    duplicate = ranks(1)
    assert duplicate.proc.wait(30) == 1
    assert duplicate.logged('rank 1 already joined this group')
    assert status(leader.base + '/health') == 200 and generate(leader.base)[0] == 200


def test_rank_1_killed_leaves_rank_0_answering_health_while_generation_fails(group):
    leader, follower = group
    follower.proc.send_signal(signal.SIGKILL)
    wait_for(lambda: status(leader.base + '/health_generate') == 503, 30, '/health_generate to fail')
    assert status(leader.base + '/health') == 200
    code, body = generate(leader.base)
    assert code == 500 and 'rank 1 of 2 was lost' in body['error']['message'], body
    code, body = generate(leader.base, stream=True)
    assert code == 500 and 'rank 1' in body['error']['message'], body
    assert call('GET', leader.base + '/health_generate')[1]['error'].startswith('rank 1 of 2 was lost')


def test_rank_1_stopped_gracefully_leaves_rank_0_degraded(group):
    leader, follower = group
    follower.proc.send_signal(signal.SIGTERM)
    assert follower.proc.wait(30) == 0
    wait_for(lambda: status(leader.base + '/health_generate') == 503, 30, '/health_generate to fail')
    assert status(leader.base + '/health') == 200
    code, body = generate(leader.base)
    assert code == 500 and 'rank 1 of 2 left the group' in body['error']['message'], body


@pytest.mark.slow
def test_rank_0_killed_leaves_rank_1_hung_ignoring_sigterm_holding_its_gpu_until_its_watchdog(group):
    leader, follower = group
    wait_for(lambda: follower.memory() == [MIB], 30, 'rank 1 to hold its GPU')
    leader.kill()
    wait_for(lambda: follower.logged('rank 0 was lost without goodbye: hung'), 30, 'rank 1 to hang')
    hung_at = time.monotonic()
    follower.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: follower.logged('ignoring signal %d' % signal.SIGTERM), 30, 'rank 1 to ignore SIGTERM')
    assert follower.proc.poll() is None
    assert follower.memory() == [MIB]
    assert follower.proc.wait(WATCHDOG_S + 30) == 1
    # Not before its watchdog: the SIGTERM did not end it.
    assert time.monotonic() - hung_at >= WATCHDOG_S - 1
    assert follower.logged('watchdog fired')
    wait_for(lambda: follower.memory() == [0], 30, 'rank 1 GPU freed after the watchdog')


def test_sigterm_of_rank_0_ends_both_ranks_cleanly(group):
    leader, follower = group
    leader.proc.send_signal(signal.SIGTERM)
    assert leader.proc.wait(30) == 0
    assert follower.proc.wait(30) == 0
    assert follower.logged('rank 0 ended the group')
    wait_for(lambda: leader.memory() == [0] and follower.memory() == [0], 30, 'both GPUs freed')


def test_rank_1_gives_up_when_rank_0_never_listens(ranks):
    follower = ranks(1, LAB_STANDIN_DIST_TIMEOUT='0.5')
    assert follower.proc.wait(30) == 1
    assert follower.logged('did not answer within 0.5 s')


@pytest.mark.parametrize('flags, message', [
    (['--nnodes', '2', '--tp-size', '2'], '--dist-init-addr is required when --nnodes > 1'),
    (['--nnodes', '2', '--tp-size', '3', '--dist-init-addr', '127.0.0.1:5000'], 'not divisible by --nnodes 2'),
    (['--nnodes', '2', '--tp-size', '2', '--node-rank', '2', '--dist-init-addr', '127.0.0.1:5000'],
     '--node-rank must be from 0 to 1'),
    (['--node-rank', '-1'], '--node-rank must be from 0 to 0'),
    (['--nnodes', '0'], '--nnodes must be at least 1'),
    (['--nnodes', '2', '--tp-size', '2', '--dist-init-addr', '127.0.0.1'], '--dist-init-addr must be HOST:PORT'),
    (['--nnodes', 'two'], "invalid int value: 'two'"),
])
def test_bad_multinode_flags_exit_2_as_argparse_does(tmp_path, flags, message):
    module, pythonpath, _ = write_standin_module(tmp_path)
    run = subprocess.run([sys.executable, '-m', module, '--model-path', '/models/m', '--port', str(free_port())] + flags,
                         env=dict(os.environ, PYTHONPATH=pythonpath), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert message in run.stderr and 'usage: sglang.launch_server' in run.stderr
