"""_sockets: the listening sockets of /proc/net/tcp and tcp6 (parsed from captured text), the one a connection lands
on, and who holds it (real sockets on 127.0.0.1, a real process of another user)."""
import ipaddress
import os
import socket

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.readers._sockets import (
    Listener, held_sockets, parse_listeners, reached, read_listeners, socket_holders)
from helpers.port_owner import Squatter
from helpers.simulated import free_port

# Captured on an x86_64 host (Linux 6.x): listeners on 127.0.0.7:30002, 127.0.0.1:30000, 0.0.0.0:30001, one of
# nobody's on 127.0.0.5:30004, an accepted connection and its client on 30000 (not listening; the accepted one's
# inode is 0 while it waits in the accept queue).
TCP = '''\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0500007F:7534 00000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 27728 1 0000000037ac3c4e 100 0 0 10 0
   1: 0700007F:7532 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 26624 1 00000000aa3e2189 100 0 0 10 0
   2: 0100007F:7530 00000000:0000 0A 00000000:00000001 00:00000000 00000000     0        0 26622 2 0000000089f75b83 100 0 0 10 0
   5: 00000000:7531 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 26623 1 0000000037ac3c4e 100 0 0 10 0
  26: 0100007F:7530 0100007F:8574 01 00000000:00000000 00:00000000 00000000     0        0 0 1 000000003c03aef1 20 0 0 10 -1
  31: 0100007F:8574 0100007F:7530 01 00000000:00000000 00:00000000 00000000     0        0 27652 2 000000003ed11224 20 0 0 10 -1
'''
# The same host's tcp6: ::1:30000, ::ffff:127.0.0.9:30003 (an IPv6 socket bound to an IPv4-mapped address), :::30001.
TCP6 = '''\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:7530 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 27649 1 0000000041515d9e 100 0 0 10 0
   1: 0000000000000000FFFF00000900007F:7533 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 27651 1 00000000ed41eef6 100 0 0 10 0
   2: 00000000000000000000000000000000:7531 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 27650 1 000000002ad02a5e 100 0 0 10 0
'''


def listener(address, port, inode, uid=0):
    return Listener(ipaddress.ip_address(address), port, uid, inode)


def test_the_listening_sockets_of_tcp_are_read_with_their_address_port_owner_and_inode():
    assert parse_listeners(TCP) == [listener('127.0.0.5', 30004, 27728, uid=65534), listener('127.0.0.7', 30002, 26624),
                                    listener('127.0.0.1', 30000, 26622), listener('0.0.0.0', 30001, 26623)]


def test_the_listening_sockets_of_tcp6_are_read_ipv4_mapped_and_wildcard_included():
    assert parse_listeners(TCP6) == [listener('::1', 30000, 27649), listener('::ffff:127.0.0.9', 30003, 27651),
                                     listener('::', 30001, 27650)]


@pytest.mark.parametrize('text', ['', 'garbage\n', '   0: ZZZZ:7530 00000000:0000 0A 0 0 0 0 0 1 1\n',
                                  '   0: 0100007F:7530 00000000:0000 0A 0 0 0 0 0 notanumber\n'],
                         ids=['empty', 'not-a-table', 'bad-address', 'bad-inode'])
def test_a_line_that_is_not_one_socket_is_skipped(text):
    assert parse_listeners(text) == []


LISTENERS = parse_listeners(TCP) + parse_listeners(TCP6)


@pytest.mark.parametrize('address, port, inodes', [
    # That very address wins over a wildcard, IPv4 and IPv6 alike.
    ('127.0.0.1', 30000, [26622]),
    ('::1', 30000, [27649]),
    # Another host of the lab on 127.0.0.M (host networking) is not this one's: only the wildcard would be.
    ('127.0.0.2', 30000, []),
    ('127.0.0.7', 30002, [26624]),
    # An IPv4-mapped listener is its IPv4 address's; a client given the mapped form lands on an IPv4 one too.
    ('127.0.0.9', 30003, [27651]),
    ('::ffff:127.0.0.1', 30000, [26622]),
    # No socket of that address: 0.0.0.0 before ::, and :: for IPv6.
    ('127.0.0.1', 30001, [26623]),
    ('::1', 30001, [27650]),
    # Connecting to 0.0.0.0 or :: reaches the loopback address.
    ('0.0.0.0', 30000, [26622]),
    ('::', 30000, [27649]),
    ('127.0.0.1', 30009, []),
], ids=['ipv4-exact', 'ipv6-exact', 'other-loopback-host', 'ipv4-other-address', 'ipv4-mapped-listener',
        'ipv4-mapped-target', 'ipv4-wildcard', 'ipv6-wildcard', 'unspecified-ipv4', 'unspecified-ipv6', 'none'])
def test_a_connection_lands_on_the_most_specific_listener(address, port, inodes):
    assert [found.inode for found in reached(LISTENERS, address, port)] == inodes


def test_a_wildcard_ipv6_listener_takes_ipv4_when_no_ipv4_one_listens():
    alone = [listener('::', 30001, 27650)]
    assert reached(alone, '127.0.0.1', 30001) == alone


def test_an_ipv6_socket_on_the_mapped_ipv4_wildcard_is_an_ipv4_wildcard():
    # An IPv6-only server on [::] leaves ::ffff:0.0.0.0 free to another user, whose socket then takes every IPv4
    # connection: it must be found as the listener an IPv4 client reaches (before issue 41's review, it was not).
    sockets = [listener('::', 30001, 1), listener('::ffff:0.0.0.0', 30001, 2)]
    assert [found.inode for found in reached(sockets, '127.0.0.1', 30001)] == [2]


def test_sockets_sharing_a_port_are_all_returned():
    shared = [listener('127.0.0.1', 30000, 1), listener('127.0.0.1', 30000, 2), listener('0.0.0.0', 30000, 3)]
    assert [found.inode for found in reached(shared, '127.0.0.1', 30000)] == [1, 2]


def test_a_real_listener_is_found_and_held_by_this_process_only():
    listening = socket.socket()
    try:
        listening.bind(('127.0.0.1', 0))
        listening.listen(1)
        port = listening.getsockname()[1]
        found = reached(read_listeners(port), '127.0.0.1', port)
        assert len(found) == 1 and found[0].uid == os.geteuid()
        inode = found[0].inode
        assert held_sockets([os.getpid()], [inode]) == {inode}
        assert held_sockets([os.getppid()], [inode]) == set()
        assert socket_holders([inode]) == {inode: [os.getpid()]}
    finally:
        listening.close()


def test_another_users_listener_is_named_by_its_process_and_owner():
    port = free_port()
    with Squatter(port, {}) as squatter:
        found = reached(read_listeners(port), '127.0.0.1', port)
        assert [entry.uid for entry in found] == [squatter.uid]
        assert socket_holders([found[0].inode]) == {found[0].inode: [squatter.pid]}
        assert held_sockets([os.getpid()], [found[0].inode]) == set()
