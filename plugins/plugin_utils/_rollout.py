# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling policy across the fleet: where each server is reached, and whether this host takes part.

A server is a single host, or a group of hosts (`sglang_server_group`, one `sglang_node_rank` each) that
serves as one: the peers, the gate, the canary and the batches count servers, so a group is counted once,
under the key `group:<name>`, and reached at its rank 0's URL.
"""

from __future__ import annotations

from typing import Any, Callable

from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_bool, as_float, as_int, as_text

# A server listening on every address is reached at its inventory address.
EVERY_ADDRESS = ('0.0.0.0', '::', '')
# What a peer's role defaults would say: its own defaults are not visible from this host.
DEFAULT_HOST = '127.0.0.1'
DEFAULT_PORT = 30000
FAILED = ('failed', 'rolled_back')
GROUP_KEY = 'group:'


def server_key(host: str, group: str) -> str:
    """The name a server is counted under: its host, or `group:<name>` for every node of a group."""
    return GROUP_KEY + group if group else host


def _node(inventory_vars: Callable) -> Callable:
    """`node_of(name)` -> (group name or "", rank or None) from a host's inventory variables."""
    def node_of(name: str) -> tuple[str, Any]:
        peer = inventory_vars(name)
        group = peer.get('sglang_server_group') or ''
        return as_text(group), peer.get('sglang_node_rank') if group else None
    return node_of


def _rank_order(rank: int | str | None) -> tuple[int, int]:
    """Ranks sort as numbers; one that is not a number sorts last (the plan refuses it with its message)."""
    try:
        return (0, int(rank))
    except (TypeError, ValueError):
        return (1, 0)


def servers(hosts: list[Any], node_of: Callable) -> list[Any]:
    """[(key, [node, ...])] in order of first appearance: a single host alone, a group's nodes in rank order.

    A host literally named `group:<name>` (inventory names may hold a colon) would be counted as that group:
    refused rather than merged.
    """
    order, nodes, kind = [], {}, {}
    for name in hosts:
        group, rank = node_of(name)
        key = server_key(name, group)
        if kind.setdefault(key, bool(group)) != bool(group):
            raise ValueError('the host %s and the server group %s would both be counted as %s: rename the host'
                             % (key, key[len(GROUP_KEY):], key))
        if key not in nodes:
            order.append(key)
            nodes[key] = []
        nodes[key].append((_rank_order(rank), len(nodes[key]), name))
    return [(key, [name for dummy, dummy, name in sorted(nodes[key])]) for key in order]


def reachable_host(listen: str, inventory_address: str) -> str:
    """Where others reach a server that listens on `listen`."""
    return inventory_address if listen in EVERY_ADDRESS else listen


def server_url(peer: dict[str, Any], name: str) -> str:
    """Where clients reach a host's server: its sglang_router_worker_url, else
    http://<reachable host>:<sglang_port>, from its inventory variables."""
    url = peer.get('sglang_router_worker_url')
    if url is None:
        host = reachable_host(peer.get('sglang_host', DEFAULT_HOST), peer.get('ansible_host', name))
        url = 'http://%s:%s' % (host, as_text(peer.get('sglang_port', DEFAULT_PORT)))
    return url


def peer_urls(fleet_hosts: list[str], inventory_vars: Callable) -> dict[str, str]:
    """{server key: URL} of the fleet from each host's inventory variables (`inventory_vars(name)` -> dict-like):
    a single host under its name, a group once under `group:<name>` at its first node's (rank 0's) URL; the
    other ranks serve no HTTP and are no servers of their own."""
    return {key: server_url(inventory_vars(nodes[0]), nodes[0])
            for key, nodes in servers(fleet_hosts, _node(inventory_vars))}


def server_report(key: str, nodes: list[str], reports: list[dict[str, Any] | None]) -> Any:
    """One report for a server from its nodes' reports (None: none finished, or all were skipped): a group
    failed when any node failed, and its report names it `group:<name>` with its `nodes`."""
    finished = [report for report in reports if report is not None and report.get('status') != 'skipped']
    if not finished:
        return None
    if not key.startswith(GROUP_KEY):
        return finished[0]
    failed = [report for report in finished if report.get('status') in FAILED]
    # Rank 0 (the first node) bakes for the group.
    whole = {'host': key, 'nodes': list(nodes), 'status': (failed or finished)[0].get('status')}
    whole.update(('bake', report['bake']) for report in finished[:1] if report.get('bake'))
    return whole


def peer_reports(fleet_hosts: list[str], me: str, report_of: Callable,
                 inventory_vars: Callable | None = None) -> list[Any]:
    """Reports of the fleet's servers that finished before this one (earlier batches, or faster peers), one
    per server (server_report); `report_of(name)` is the host's sglang_redeploy_report or None. This host's
    own server (its group, for a node) is left out."""
    node_of = _node(inventory_vars or (lambda name: {}))
    mine = server_key(me, node_of(me)[0])
    reports = []
    for key, nodes in servers(fleet_hosts, node_of):
        report = server_report(key, nodes, [report_of(name) for name in nodes]) if key != mine else None
        if report is not None:
            reports.append(report)
    return reports


def gate(skip: bool | str, reports: list[Any], canary_hosts: list[Any], max_fail_percentage: str | int) -> str:
    """Why this host is left alone: its skip flag, a failed canary, or a failure share above the budget;
    "" when it takes part."""
    failures = [report for report in reports if report.get('status') in FAILED]
    # A group's report names the group; its nodes are the canary's hosts.
    canary_failed = [report['host'] for report in failures
                     if set(report.get('nodes') or [report.get('host')]) & set(canary_hosts)]
    if as_bool(skip):
        return 'sglang_redeploy_skip is set for this host'
    if canary_failed:
        return 'rollout stopped: the canary %s failed' % ', '.join(canary_failed)
    held = [report['host'] for report in reports if (report.get('bake') or {}).get('action') == 'held'
            and set(report.get('nodes') or [report.get('host')]) & set(canary_hosts)]
    if held:
        return ('rollout held: the bake of the canary %s was inconclusive (sglang_canary_inconclusive is hold); the'
                ' canary keeps the new version' % ', '.join(held))
    if reports and len(failures) * 100.0 / len(reports) > as_float(max_fail_percentage):
        return ('rollout stopped: %d of %d finished host(s) failed (%s), above sglang_max_fail_percentage %s'
                % (len(failures), len(reports), ', '.join(report['host'] for report in failures),
                   as_text(max_fail_percentage)))
    return ''


def canary_hosts(rollout_hosts: list[Any], canary: int | str, inventory_vars: Callable | None = None) -> list[Any]:
    """The hosts of the rollout's first `canary` servers (a group's every node), in the rollout's order:
    the single-node servers first, then the groups (server_batches)."""
    chosen = servers(rollout_hosts, _node(inventory_vars or (lambda name: {})))[:max(0, as_int(canary))]
    return [name for dummy, nodes in chosen for name in nodes]


def bake_baselines(fleet_hosts: list[str], canary: list[str], peers: dict[str, str],
                   inventory_vars: Callable | None = None) -> dict[str, str]:
    """{server key: URL} of the servers a canary's bake compares with: every server of the fleet outside the
    canary (a group is one server, at rank 0's URL); during the canary batch they still run the previous version."""
    canary = set(canary)
    return {key: peers[key] for key, nodes in servers(fleet_hosts, _node(inventory_vars or (lambda name: {})))
            if not canary & set(nodes) and key in peers}


def _serial_entries(serial: Any) -> list[Any]:
    """Ansible's serial as a list of entries: a number, a percentage, or a list of those ([] when unset)."""
    if serial is None or serial == '':
        return []
    return list(serial) if isinstance(serial, (list, tuple)) else [serial]


def _serial_count(entry: int | str, total: int) -> int:
    """One serial entry as a count of servers, as Ansible's pct_to_int reads it (a percentage rounds down,
    to 1 at least); 0 or less means every server left."""
    if isinstance(entry, (int, float)) and not isinstance(entry, bool):
        return int(entry)
    text = as_text(entry).strip()
    try:
        if text.endswith('%'):
            return int(int(text[:-1]) / 100.0 * total) or 1
        return int(text)
    except ValueError:
        raise ValueError('redeploy_serial: %r is neither a number nor a percentage' % (entry,))


def batch_sizes(canary: int, serial: Any, total: int) -> list[Any]:
    """Servers per batch, as Ansible's serial would cut `total` hosts: a canary batch first when > 0, then
    the serial entries, the last one repeated; a percentage is of `total`."""
    entries = ([canary] if canary > 0 else []) + _serial_entries(serial) or [-1]
    sizes, left = [], total
    while left > 0:
        size = _serial_count(entries[min(len(sizes), len(entries) - 1)], total)
        size = left if size <= 0 else min(size, left)
        sizes.append(size)
        left -= size
    return sizes


def server_batches(play_hosts: list[Any], inventory_vars: Callable, serial: Any, canary: int) -> dict[str, Any]:
    """The redeploy's two plays from the play's hosts: {single_hosts, single_serial, group_hosts,
    group_serial, rollout_hosts, canary_hosts}.

    Serial and canary count servers (a group is one), and a batch never splits a group. The group play
    takes ONE group per batch (group_serial: each group's node count; its hosts are group_hosts, each
    group's nodes together in rank order), whatever `serial` says: under its linear strategy the nodes of
    a batch move in lockstep, so a node of one group would wait, without renewing its guard's lease, for
    as long as another group's rank 0 drains or loads its model (minutes), and its guard would roll it
    back under a live run. The canary is the rollout's first `canary` servers, the single-node ones
    first: it is in the single-node play when that has hosts enough, and the first group is a batch of
    its own anyway. A percentage is of the play's own servers, as Ansible counts it.
    """
    canary = max(0, as_int(canary))
    listed = servers(play_hosts, _node(inventory_vars))
    single = [nodes[0] for key, nodes in listed if not key.startswith(GROUP_KEY)]
    groups = [nodes for key, nodes in listed if key.startswith(GROUP_KEY)]
    single_canary = min(canary, len(single))
    group_serial = [len(nodes) for nodes in groups]
    group_hosts = [name for nodes in groups for name in nodes]
    return {
        'single_hosts': single, 'single_serial': batch_sizes(single_canary, serial, len(single)),
        'group_hosts': group_hosts, 'group_serial': group_serial, 'rollout_hosts': single + group_hosts,
        'canary_hosts': canary_hosts(single + group_hosts, canary, inventory_vars),
    }


# The rolling policy when the operator sets none (Kubernetes' RollingUpdate default is 25% unavailable): one
# canary server first, then a quarter of the servers at a time, at most a quarter down, the first failure stops.
DEFAULT_POLICY = {'serial': '25%', 'canary': 1, 'max_unavailable': '25%', 'max_fail_percentage': 0}
# The playbook's variable for each knob, in the order the plan names them.
POLICY_VARIABLES = (('serial', 'redeploy_serial'), ('canary', 'redeploy_canary'),
                    ('max_unavailable', 'redeploy_max_unavailable'),
                    ('max_fail_percentage', 'redeploy_max_fail_percentage'))
WHOLE_FLEET = '-e redeploy_serial=100% -e redeploy_canary=0'


def _is_set(value: Any) -> bool:
    return value is not None and value != ''


def rollout_policy(asked: dict[str, Any], servers_count: int) -> dict[str, Any]:
    """The rolling policy from the knobs the operator set (`asked`: {serial, canary, max_unavailable,
    max_fail_percentage}, None or '' for one not set) and the fleet's number of servers: {serial, canary,
    max_unavailable (a count, 0 for no limit), max_fail_percentage, asked (the variables set), summary}.

    A knob not set takes DEFAULT_POLICY's value, but max_unavailable only while redeploy_serial is not set
    either: batches the operator sized are the bound they chose, and a quarter-of-the-fleet budget they never
    asked for would make their larger batches wait and fail (0, no limit, as before).
    """
    chosen = {knob: asked.get(knob) if _is_set(asked.get(knob)) else DEFAULT_POLICY[knob]
              for knob, dummy in POLICY_VARIABLES}
    if not _is_set(asked.get('max_unavailable')):
        chosen['max_unavailable'] = (0 if _is_set(asked.get('serial'))
                                     else _serial_count(DEFAULT_POLICY['max_unavailable'], servers_count))
    for entry in _serial_entries(chosen['serial']):
        # Refused here, even where the canary alone covers a small play and the entry would never be read.
        _serial_count(entry, servers_count)
    chosen['canary'] = max(0, as_int(chosen['canary']))
    chosen['max_unavailable'] = max(0, as_int(chosen['max_unavailable']))
    chosen['max_fail_percentage'] = as_float(chosen['max_fail_percentage'])
    names = [name for knob, name in POLICY_VARIABLES if _is_set(asked.get(knob))]
    chosen.update(asked=names, summary='%s: %s' % (
        'asked (%s)' % ', '.join('%s=%s' % (name, _shown(asked[knob])) for knob, name in POLICY_VARIABLES
                                 if _is_set(asked.get(knob))) if names
        else 'default (no redeploy_serial, redeploy_canary, redeploy_max_unavailable or redeploy_max_fail_percentage'
             ' set; the whole fleet at once: %s)' % WHOLE_FLEET,
        _described(chosen, servers_count)))
    return chosen


def _shown(value: Any) -> str:
    return ','.join(as_text(entry) for entry in value) if isinstance(value, (list, tuple)) else as_text(value)


def _described(policy: dict[str, Any], servers_count: int) -> str:
    """The policy in the operator's words, e.g. "canary 1 server, then batches of 25%, at most 2 of 8 servers
    unavailable, the first failure stops the rollout"."""
    canary = 'canary %d server(s), then ' % policy['canary'] if policy['canary'] else 'no canary, '
    bound = ('at most %d of %d server(s) unavailable' % (policy['max_unavailable'], servers_count)
             if policy['max_unavailable'] else 'no bound on unavailable servers beyond the batches')
    failure = ('the first failure stops the rollout' if policy['max_fail_percentage'] <= 0 else
               'stops once more than %g%% of the finished servers failed' % policy['max_fail_percentage'])
    return '%sbatches of %s server(s), %s, %s' % (canary, _shown(policy['serial']), bound, failure)


def _cut(hosts: list[Any], sizes: list[Any]) -> list[Any]:
    """hosts in consecutive batches of sizes (Ansible's serial list: its last entry repeats while hosts are left)."""
    cut, start = [], 0
    while start < len(hosts) and sizes:
        size = max(1, sizes[min(len(cut), len(sizes) - 1)])
        cut.append(hosts[start:start + size])
        start += size
    return cut


def batches(plan: dict[str, Any]) -> list[Any]:
    """[{number, hosts, canary}] of server_batches' plan, in the order the two plays run them: the single-node
    servers' batches (single_serial), then one batch per server group (group_serial); a batch holding a canary
    host is the canary's."""
    canary = set(plan['canary_hosts'])
    cut = _cut(plan['single_hosts'], plan['single_serial']) + _cut(plan['group_hosts'], plan['group_serial'])
    return [{'number': number, 'hosts': hosts, 'canary': bool(canary & set(hosts))}
            for number, hosts in enumerate(cut, 1)]


def batch_lines(listed: list[Any]) -> list[Any]:
    """One line per batch for the printed plan: "batch 1 (canary): gpu1", "batch 2: gpu2, gpu3"."""
    return ['batch %d%s: %s' % (batch['number'], ' (canary)' if batch['canary'] else '', ', '.join(batch['hosts']))
            for batch in listed]


def rollout_plan(play_hosts: list[Any], inventory_vars: Callable, asked: dict[str, Any],
                 fleet_hosts: list[str] | None = None) -> dict[str, Any]:
    """server_batches under rollout_policy, with the policy under `policy`: a percentage of max_unavailable is of
    the fleet's servers (`fleet_hosts`, the play's hosts when not given; a group counts once), as the budget is."""
    fleet = servers(fleet_hosts or play_hosts, _node(inventory_vars))
    policy = rollout_policy(asked, len(fleet))
    plan = server_batches(play_hosts, inventory_vars, policy['serial'], policy['canary'])
    plan['policy'] = policy
    plan['batches'] = batches(plan)
    plan['batch_lines'] = batch_lines(plan['batches'])
    return plan
