# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling policy across the fleet: where each server is reached, and whether this host takes part."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_bool, as_float, as_int, as_text

# A server listening on every address is reached at its inventory address.
EVERY_ADDRESS = ('0.0.0.0', '::', '')
# What a peer's role defaults would say: its own defaults are not visible from this host.
DEFAULT_HOST = '127.0.0.1'
DEFAULT_PORT = 30000
FAILED = ('failed', 'rolled_back')


def reachable_host(listen, inventory_address):
    """Where others reach a server that listens on `listen`."""
    return inventory_address if listen in EVERY_ADDRESS else listen


def peer_urls(fleet_hosts, inventory_vars):
    """{host: URL} of the fleet from each host's inventory variables (`inventory_vars(name)` -> dict-like):
    its sglang_router_worker_url, else http://<reachable host>:<sglang_port>."""
    peers = {}
    for name in fleet_hosts:
        peer = inventory_vars(name)
        url = peer.get('sglang_router_worker_url')
        if url is None:
            host = reachable_host(peer.get('sglang_host', DEFAULT_HOST), peer.get('ansible_host', name))
            url = 'http://%s:%s' % (host, as_text(peer.get('sglang_port', DEFAULT_PORT)))
        peers[name] = url
    return peers


def peer_reports(fleet_hosts, me, report_of):
    """Reports of the fleet's hosts that finished before this one (earlier batches, or faster peers);
    `report_of(name)` is the host's sglang_redeploy_report or None."""
    reports = []
    for name in fleet_hosts:
        report = report_of(name) if name != me else None
        if report is not None and report.get('status') != 'skipped':
            reports.append(report)
    return reports


def gate(skip, reports, canary_hosts, max_fail_percentage):
    """Why this host is left alone: its skip flag, a failed canary, or a failure share above the budget;
    "" when it takes part."""
    failures = [report for report in reports if report.get('status') in FAILED]
    canary_failed = [report['host'] for report in failures if report.get('host') in canary_hosts]
    if as_bool(skip):
        return 'sglang_redeploy_skip is set for this host'
    if canary_failed:
        return 'rollout stopped: the canary %s failed' % ', '.join(canary_failed)
    if reports and len(failures) * 100.0 / len(reports) > as_float(max_fail_percentage):
        return ('rollout stopped: %d of %d finished host(s) failed (%s), above sglang_max_fail_percentage %s'
                % (len(failures), len(reports), ', '.join(report['host'] for report in failures),
                   as_text(max_fail_percentage)))
    return ''


def canary_hosts(play_hosts, canary):
    """The play's first batch (serial puts the canary first, in the play's host order)."""
    return list(play_hosts[:as_int(canary)])
