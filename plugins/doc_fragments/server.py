# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """Where the server is: the options sglang_server, sglang_server_info and sglang_guard's O(server) share
    (module_utils/domain/_server.py SERVER_OPTIONS)."""

    DOCUMENTATION = r'''
options:
  service_name:
    description: Name of the systemd unit (without C(.service)); also names the detached server in messages.
    type: str
    default: sglang
  launch_file:
    description: The live C(launch.json) the detached server is started from (and whose C(--config) names its keys).
    type: path
    required: true
  pidfile:
    description: Pid file of the detached server (its session leader).
    type: path
    required: true
  url:
    description:
      - Base URL the server answers at, for example V(http://127.0.0.1:30000).
      - Nothing is sent to it (no probe, no API key) and no answer counts until the socket listening where it
        connects (that address, else V(0.0.0.0) or V(::) on its port) is held by the server's own processes (its
        unit's control group, or its detached session). Another process holding the port (a local user may bind
        it while SGLang loads its model) is never taken for the server; the reads and waits name it instead, by
        PID, user and command.
      - V("") for a rank above 0 of a server spanning several hosts (C(--node-rank) > 0), which serves no HTTP.
        Its health is then its process being alive, and its settings are not compared (rank 0 answers for the
        group).
    type: str
    required: true
  user:
    description:
      - The user the server runs as (the role's C(sglang_user)); unset, the user the module runs as (root).
      - A detached server is started as this user (its groups set as C(initgroups), then C(setgid) and C(setuid) in
        the child, as systemd's C(User=) and C(Group=) do), and only processes running as this user (all four uids)
        are taken for a detached server; a systemd server's unit names the user itself.
      - A user or group that does not exist on the host fails the call, naming it.
    type: str
  group:
    description: The server's group (the role's C(sglang_group)); unset, the primary group of O(user).
    type: str
'''
