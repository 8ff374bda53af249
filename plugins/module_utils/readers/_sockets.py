# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who listens on a local TCP port: the listening sockets of /proc/net/tcp and tcp6, and the processes that hold
them (their /proc/PID/fd links, ``socket:[INODE]``).

Readers layer, standard library only: the guard's watcher reads them too (through _server).

An answer on a port proves only that something listens there. Any local user may bind a free port, and SGLang
binds its HTTP port only once its model is loaded (minutes): a process bound first answers /health and gets
every request meant for the server, its API key included (issue 41). A listener is the server's only when its
socket is among the open files of the server's own processes.

    parse_listeners(text)                    -> [Listener] in the LISTEN state, from /proc/net/tcp or tcp6 text
    read_listeners(port, proc_root)          -> [Listener] on that port, IPv4 and IPv6
    reached(listeners, address, port)        -> the listeners a connection to address:port lands on
    held_sockets(pids, inodes, proc_root)    -> which of inodes those processes hold
    socket_holders(inodes, proc_root)        -> {inode: [PIDs holding it]}, over every process
"""

from __future__ import annotations

import ipaddress
import os
import struct
from dataclasses import dataclass
from typing import Any, Iterator

from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import open_files

# include/net/tcp_states.h: TCP_LISTEN is 10, printed as two hex digits.
TCP_LISTEN = '0A'
SOCKET_LINK = 'socket:['
ANY_IPV4 = ipaddress.ip_address('0.0.0.0')
ANY_IPV6 = ipaddress.ip_address('::')


@dataclass(frozen=True)
class Listener:
    """One listening TCP socket: the address it is bound to, its port, the uid that made it, its inode."""

    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    port: int
    uid: int
    inode: int

    @property
    def endpoint(self) -> str:
        return ('[%s]:%d' if self.address.version == 6 else '%s:%d') % (self.address, self.port)


def _address(hex_text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    # The kernel prints the address as 32-bit words, each one in the host's byte order (%08X of a __be32).
    words = [int(hex_text[index:index + 8], 16) for index in range(0, len(hex_text), 8)]
    return ipaddress.ip_address(b''.join(struct.pack('=I', word) for word in words))


def parse_listeners(text: str) -> list[Listener]:
    """The sockets in the LISTEN state in the text of /proc/net/tcp or /proc/net/tcp6 (a line that is not one
    socket, the header included, is skipped)."""
    listeners = []
    for line in text.splitlines():
        # sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...
        fields = line.split()
        if len(fields) < 10 or not fields[0].endswith(':') or fields[3] != TCP_LISTEN:
            continue
        address, dummy, port = fields[1].rpartition(':')
        try:
            listeners.append(Listener(_address(address), int(port, 16), int(fields[7]), int(fields[9])))
        except ValueError:
            continue
    return listeners


def read_listeners(port: int, proc_root: str = '/proc') -> list[Listener]:
    """The sockets listening on port, IPv4 and IPv6, in this process's network namespace.

    OSError when /proc/net/tcp cannot be read; a host without IPv6 has no tcp6, which is no error.
    """
    listeners = []
    # The kernel prints a port as %04X after the address's colon: only lines naming it are parsed (a busy host's
    # table holds a line per connection, and this runs on every health probe).
    mark = ':%04X ' % port
    for name in ('tcp', 'tcp6'):
        try:
            with open(os.path.join(proc_root, 'net', name), 'rb') as handle:
                text = handle.read().decode('ascii', 'replace')
        except OSError:
            if name == 'tcp6':
                continue
            raise
        lines = '\n'.join(line for line in text.splitlines() if mark in line)
        listeners.extend(listener for listener in parse_listeners(lines) if listener.port == port)
    return listeners


def _plain(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The IPv4 address an IPv4-mapped IPv6 address (::ffff:a.b.c.d) stands for; any other unchanged."""
    return getattr(address, 'ipv4_mapped', None) or address


def reached(listeners: list[Listener], address: str, port: int) -> list[Listener]:
    """The listeners a connection to address:port lands on: [] when none listens there.

    The kernel hands a connection to the socket bound to that very address (an IPv4-mapped one counts as its
    IPv4 address), else to one bound to every address: 0.0.0.0, then :: (which takes IPv4 too unless it is
    IPV6_V6ONLY, which /proc does not show: it is counted). Several sockets of one tier (SO_REUSEPORT) share
    the connections, so each of them is returned. Connecting to 0.0.0.0 or :: reaches the loopback address.
    """
    target = _plain(ipaddress.ip_address(address))
    if target.is_unspecified:
        target = ipaddress.ip_address('127.0.0.1' if target.version == 4 else '::1')
    on_port = [listener for listener in listeners if listener.port == port]
    exact = [listener for listener in on_port if _plain(listener.address) == target]
    if exact:
        return exact
    for every_address in (ANY_IPV4, ANY_IPV6) if target.version == 4 else (ANY_IPV6,):
        # ::ffff:0.0.0.0 is the IPv4 wildcard too (an IPv6 socket bound to it takes IPv4 connections).
        wildcard = [listener for listener in on_port if _plain(listener.address) == every_address]
        if wildcard:
            return wildcard
    return []


def _socket_links(pid: int, proc_root: str) -> Iterator[int]:
    """The socket inodes among the open files of pid (nothing when it is gone or cannot be read)."""
    for target in open_files(pid, proc_root):
        if target.startswith(SOCKET_LINK) and target.endswith(']'):
            try:
                yield int(target[len(SOCKET_LINK):-1])
            except ValueError:
                continue


def held_sockets(pids: list[Any], inodes: list[int], proc_root: str = '/proc') -> set[int]:
    """Which of the socket inodes the processes pids hold open (reading stops once every one is found)."""
    wanted = set(inodes)
    found = set()
    for pid in pids:
        for inode in _socket_links(pid, proc_root):
            if inode in wanted:
                found.add(inode)
                if found == wanted:
                    return found
    return found


def socket_holders(inodes: list[int], proc_root: str = '/proc') -> dict[int, list[int]]:
    """{inode: the PIDs, sorted, that hold it open} over every process this one can read (root reads all)."""
    wanted = set(inodes)
    holders: dict[int, list[int]] = {}
    pids = sorted(int(entry) for entry in os.listdir(proc_root) if entry.isdigit())
    for pid in pids:
        for inode in set(_socket_links(pid, proc_root)) & wanted:
            holders.setdefault(inode, []).append(pid)
    return holders
