"""The lab's stand-in loads before it serves, as SGLang does: it reads every byte of its weight files, and binds its
HTTP port only once they are read (lab/standin/sglang_standin/launch_server.py, load_weights).

The stand-in runs here as a plain process on loopback (helpers/standin.py). One of its weight files is a FIFO that
the test writes: while the test holds it open, the stand-in is certainly still loading, so "the port is not bound
while it loads" is checked at a known point, without any timing.
"""
from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys

import pytest

from helpers.simulated import free_port, wait_for
from helpers.standin import status, write_standin_module

MIB = 1 << 20


def write_random(path, size):
    with open(path, 'wb') as handle:
        handle.write(os.urandom(size))


def rchar(pid):
    """Bytes the process has read through read(2) and its kind so far (/proc/PID/io), page cache or not."""
    with open('/proc/%d/io' % pid) as handle:
        return int(dict(line.split(': ') for line in handle.read().splitlines())['rchar'])


def port_bound(port):
    with socket.socket() as sock:
        return sock.connect_ex(('127.0.0.1', port)) == 0


def open_writer(fifo, proc):
    """The FIFO's write end, once the stand-in has opened it for reading (ENXIO until then)."""
    opened = []

    def reader_there():
        assert proc.poll() is None, 'the stand-in exited before it opened %s' % fifo
        try:
            opened.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as error:
            if error.errno != errno.ENXIO:
                raise
        return bool(opened)
    wait_for(reader_there, 30, 'the stand-in to open the FIFO weight file for reading')
    os.set_blocking(opened[0], True)
    return opened[0]


@pytest.fixture
def launch(tmp_path):
    """Starts the stand-in with the given arguments, its stderr in a file: (process, port, stderr path)."""
    module, pythonpath, _gate = write_standin_module(tmp_path)
    env = dict(os.environ, PYTHONPATH=pythonpath, LAB_STANDIN_WARMUP='0', LAB_STANDIN_DRAIN='0')
    started = []

    def start(*args):
        port = free_port()
        log = tmp_path / ('standin-%d.err' % port)
        with open(log, 'wb') as err:
            # Its own process group: the teardown ends it and its children together.
            proc = subprocess.Popen([sys.executable, '-m', module, '--host', '127.0.0.1', '--port', str(port)] + list(args),
                                    env=env, stderr=err, start_new_session=True)
        started.append(proc)
        return proc, port, log
    yield start
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def test_standin_reads_every_weight_byte_before_it_binds_its_port(launch, tmp_path):
    model, draft = tmp_path / 'model', tmp_path / 'draft'
    (model / 'nested').mkdir(parents=True)
    draft.mkdir()
    write_random(model / 'model-00001-of-00002.safetensors', 3 * MIB)
    fifo = model / 'model-00002-of-00002.safetensors'
    os.mkfifo(fifo)
    write_random(draft / 'pytorch_model.bin', 2 * MIB)
    # Not weights SGLang loads: neither a config file nor a weight file below the top level.
    (model / 'config.json').write_text('{}')
    write_random(model / 'nested' / 'model.safetensors', MIB)
    proc, port, log = launch('--model-path', str(model), '--speculative-algorithm', 'EAGLE3',
                             '--speculative-draft-model-path', str(draft))

    # The shards load in order: the stand-in opens the FIFO only once it read all of the first one.
    writer = open_writer(fifo, proc)
    try:
        assert rchar(proc.pid) >= 3 * MIB
        assert not port_bound(port)
        os.write(writer, os.urandom(MIB))
        # Still loading (the FIFO's end is not reached while the test holds it open): still not serving.
        assert not port_bound(port) and status('http://127.0.0.1:%d/health' % port) is None
    finally:
        os.close(writer)

    wait_for(lambda: status('http://127.0.0.1:%d/health' % port) == 200, 30, 'the stand-in to answer /health')
    assert rchar(proc.pid) >= 6 * MIB
    loaded = [line for line in log.read_text().splitlines() if 'weight files' in line]
    assert loaded and loaded[0].startswith('standin: loaded 3 weight files, %d bytes in ' % (6 * MIB)), loaded


def test_standin_that_cannot_read_a_weight_file_exits_without_serving(launch, tmp_path):
    model = tmp_path / 'model'
    model.mkdir()
    (model / 'model.safetensors').symlink_to(tmp_path / 'gone.safetensors')
    proc, port, log = launch('--model-path', str(model))
    assert proc.wait(30) == 1
    assert 'cannot read the weight file %s' % (model / 'model.safetensors') in log.read_text()
    assert not port_bound(port)
