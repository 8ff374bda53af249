# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The other servers of a machine, whose processes a stop, a kill or a restore never ends (sglang_server,
    pct_exec_kill, sglang_guard; issue 44)."""

    DOCUMENTATION = r'''
options:
  neighbours:
    description:
      - The other servers of this machine (the role passes the inventory hosts that share it - one address, and in a
        container one C(pve_node) and C(pve_vmid)), each by what marks its processes.
      - A process matching the kill patterns that carries a neighbour's marks, or a mark that is not this server's
        (another C(--port), another launch file or service in its environment), is never signalled and is listed as
        spared, with why. A child that carries none is judged by its nearest parent that does; one that nothing tells
        whose it is is spared too while neighbours are given.
      - Empty (the default), only another server's marks spare a process, as on a machine the server owns.
    type: list
    elements: dict
    default: []
    suboptions:
      service_name:
        description: Its service name (its systemd unit, or the service mark of a detached start).
        type: str
      port:
        description: The port it serves on (C(--port) in its command line).
        type: int
      launch_file:
        description: Its launch configuration (the launch file mark of a detached start).
        type: path
      name:
        description: How messages call it (its inventory host).
        type: str
        default: ''
'''
