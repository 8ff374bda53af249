# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Whether the controller that started this module is still there to read its result.

Ansible hands a module its result channel on file descriptor 1: ssh's session (a pipe or a socket of sshd's,
pipelining or not) or, with the local connection, a pipe to the worker process. When the controller is cut off
(ansible-playbook SIGKILLed with its ssh clients, the dashboard's cancel, the connection lost), that pipe or socket
loses its reader, and poll() reports it at once: POLLERR on a pipe without readers, POLLHUP on a socket whose peer
closed. A module that finds its controller gone must not begin anything the run would have to answer for (start a
server, hold the rollback guard's lease): nobody will read what it did, and the guard's idle bound must count.

Where fd 1 is a regular file, a terminal, /dev/null or closed (an async task's job file, a run by hand, a test)
nothing can be told, and the controller counts as there: the behaviour before this check. Nor can it be told while
the worker and its ssh client at the controller's end live on: ansible-core's workers each start a session of their
own, so a kill of ansible-playbook's process group alone leaves them and the channel open (docs/guard.md, "When the
controller is gone").

Base layer, standard library only (the guard's lease imports it).
"""

from __future__ import annotations

import os
import select
import stat

# What poll() reports, whatever was asked for, on a channel whose other end is gone.
GONE_EVENTS = select.POLLERR | select.POLLHUP


def channel_kind(fd: int = 1) -> str:
    """'pipe', 'socket', or 'other' (a file, a terminal, a device, nothing open) for fd."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return 'other'
    if stat.S_ISFIFO(mode):
        return 'pipe'
    if stat.S_ISSOCK(mode):
        return 'socket'
    return 'other'


def controller_gone(fd: int = 1) -> bool:
    """Whether the reader of fd (the module's stdout) is gone: only a pipe or a socket can say; never blocks."""
    if channel_kind(fd) == 'other':
        return False
    poller = select.poll()
    # Asked for nothing: POLLERR and POLLHUP are reported anyway, and POLLOUT (room in a full pipe) is not news.
    poller.register(fd, 0)
    try:
        events = poller.poll(0)
    except OSError:
        return False
    return any(revents & GONE_EVENTS for dummy, revents in events)


GONE_MESSAGE = ('the controller of this run is gone (the connection this module reports through, its stdout, was '
                'closed: ansible-playbook killed or cancelled, or its connection to the host lost)')
