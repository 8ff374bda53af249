"""base/_controller.py on real file descriptors: a pipe and a socket pair whose reader is open or closed, as Ansible's
ssh session and local connection hand a module its stdout; a file, /dev/null, a terminal and a closed descriptor,
which cannot tell and count as a controller that is there."""
import os
import pty
import socket

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.base import _controller


@pytest.fixture
def pipe():
    reader, writer = os.pipe()
    opened = {reader, writer}
    yield reader, writer, opened
    for fd in opened:
        os.close(fd)


def close(fd, opened):
    os.close(fd)
    opened.discard(fd)


def test_a_pipe_whose_reader_is_open_has_its_controller(pipe):
    reader, writer, dummy = pipe
    assert _controller.channel_kind(writer) == 'pipe'
    assert _controller.controller_gone(writer) is False


def test_a_pipe_whose_reader_closed_has_lost_its_controller(pipe):
    reader, writer, opened = pipe
    close(reader, opened)
    assert _controller.controller_gone(writer) is True


def test_a_full_pipe_whose_reader_is_open_is_not_a_gone_controller(pipe):
    # A controller that has not read yet (ssh's buffer full) is still there: poll's POLLOUT is not news.
    reader, writer, dummy = pipe
    os.set_blocking(writer, False)
    try:
        while True:
            os.write(writer, b'x' * 65536)
    except BlockingIOError:
        pass
    assert _controller.controller_gone(writer) is False


def test_a_socket_whose_peer_is_open_has_its_controller():
    mine, peer = socket.socketpair()
    with mine, peer:
        assert _controller.channel_kind(mine.fileno()) == 'socket'
        assert _controller.controller_gone(mine.fileno()) is False


def test_a_socket_whose_peer_closed_has_lost_its_controller():
    mine, peer = socket.socketpair()
    with mine:
        peer.close()
        assert _controller.controller_gone(mine.fileno()) is True


def test_a_socket_whose_peer_closed_with_data_unread_has_lost_its_controller():
    mine, peer = socket.socketpair()
    with mine:
        peer.sendall(b'module arguments not read')
        mine.sendall(b'{"changed": false}')
        peer.close()
        assert _controller.controller_gone(mine.fileno()) is True


def test_a_regular_file_cannot_tell_and_counts_as_there(tmp_path):
    # An async task's job output, a run by hand redirected to a file.
    with open(str(tmp_path / 'out'), 'w') as handle:
        assert _controller.channel_kind(handle.fileno()) == 'other'
        assert _controller.controller_gone(handle.fileno()) is False


def test_dev_null_counts_as_there():
    fd = os.open(os.devnull, os.O_WRONLY)
    try:
        assert _controller.controller_gone(fd) is False
    finally:
        os.close(fd)


def test_a_terminal_counts_as_there_even_once_its_master_closed():
    # A run by hand on a terminal: a hung-up terminal is not a controller of this module's.
    master, slave = pty.openpty()
    try:
        assert _controller.controller_gone(slave) is False
        os.close(master)
        master = None
        assert _controller.channel_kind(slave) == 'other' and _controller.controller_gone(slave) is False
    finally:
        os.close(slave)
        if master is not None:
            os.close(master)


def test_a_closed_descriptor_counts_as_there(pipe):
    reader, writer, opened = pipe
    close(writer, opened)
    assert _controller.controller_gone(writer) is False


def test_stdout_is_what_is_read_by_default(pipe, monkeypatch):
    reader, writer, opened = pipe
    saved = os.dup(1)
    try:
        os.dup2(writer, 1)
        assert _controller.controller_gone() is False
        close(reader, opened)
        assert _controller.controller_gone() is True
    finally:
        os.dup2(saved, 1)
        os.close(saved)
