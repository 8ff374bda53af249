# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One SGLang server across several hosts (a server group): its nodes, their ranks, one decision for all of
them, and the barrier that fails every node when one failed.

Every host of the group runs the same launch_server with the total --tp-size, --nnodes, the same
--dist-init-addr (rank 0's address) and its own --node-rank; only rank 0 serves HTTP. `inventory_vars(name)`
is a host's inventory variables (dict-like), as _rollout.peer_urls reads them.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_int, as_text
from ansible_collections.gpuops.sglang.plugins.plugin_utils._rollout import server_key

DEFAULT_GROUP = ''
INTEGER = re.compile(r'^[+-]?[0-9]+$')
# Launch arguments that differ between the nodes by design: the rank, and the address each node listens on
# (only rank 0 serves HTTP, each node on its own address).
PER_NODE_FLAGS = ('--node-rank', '--host')
# A step's registered result that stops the group: the task failed (rescued or ignored included) or the
# host could not be reached.
STEP_FAILURES = ('failed', 'unreachable')
# What one decision for the group reads of every node (the role registers them, per node).
DECIDED_ON = ('plan', 'state', 'decision')


def group_name(host_vars: Any) -> str:
    """The server group a host belongs to ("" for a single-node server)."""
    return as_text(host_vars.get('sglang_server_group') or DEFAULT_GROUP)


def _rank(value: Any) -> int | None:
    """The rank as an int, or None when it is not an integer (a bool is not a rank, though Python says it is)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and INTEGER.match(value.strip()):
        return int(value)
    return None


def _rank_problems(name: str, ranked: list[Any], nnodes: int) -> list[Any]:
    problems = []
    holders = {}
    for host, value in ranked:
        rank = _rank(value)
        if value is None:
            problems.append('%s is a node of the server group %s but has no sglang_node_rank.' % (host, name))
        elif rank is None:
            problems.append('%s: sglang_node_rank %r is not an integer.' % (host, value))
        elif not 0 <= rank < nnodes:
            problems.append('%s: sglang_node_rank %d is out of range (the %d nodes of the server group %s have ranks'
                            ' 0 to %d).' % (host, rank, nnodes, name, nnodes - 1))
        else:
            holders.setdefault(rank, []).append(host)
    for rank in sorted(holders):
        if len(holders[rank]) > 1:
            problems.append('%s have the same sglang_node_rank %d in the server group %s (one rank per node).'
                            % (' and '.join(holders[rank]), rank, name))
    return problems


def members(name: str, fleet_hosts: list[str], inventory_vars: Callable) -> tuple[list[str], list[Any]]:
    """(the group's hosts by rank, problems): the hosts of the fleet whose sglang_server_group is `name`.
    Refused: a node without a rank, a rank that is not an integer, out of range or held twice, a group of one."""
    ranked = [(host, inventory_vars(host).get('sglang_node_rank')) for host in fleet_hosts
              if group_name(inventory_vars(host)) == name]
    problems = []
    if len(ranked) < 2:
        problems.append('the server group %s has %d node(s) in sglang_fleet_hosts (%s); a server spans at least two,'
                        ' a single-node server leaves sglang_server_group empty.'
                        % (name, len(ranked), ', '.join(host for host, dummy in ranked) or 'none'))
    problems.extend(_rank_problems(name, ranked, len(ranked)))
    # Hosts without a valid rank go last, so the order stays the ranks' even when the group is refused.
    by_rank = sorted(ranked, key=lambda pair: (_rank(pair[1]) is None, _rank(pair[1]) or 0, pair[0]))
    return [host for host, dummy in by_rank], problems


def dist_init_addr(given: str, leader_vars: dict[str, Any], leader_name: str, port: int) -> str:
    """Where the ranks meet: `given` when set, else rank 0's inventory address (ansible_host, else its name)
    and the port."""
    if given:
        return as_text(given)
    address = as_text(leader_vars.get('ansible_host') or leader_name)
    # An IPv6 address takes brackets before its port, as in a URL.
    if ':' in address and not address.startswith('['):
        address = '[%s]' % address
    return '%s:%s' % (address, as_text(port))


def _rank_without_group(me: str, rank: str | int | None) -> list[Any]:
    """A rank on a host with no group: it would run as a single-node server and replace that node of a live
    group (its ranks hang or end), so it is refused before anything stops."""
    if rank is None or as_text(rank).strip() == '':
        return []
    return ['%s has sglang_node_rank %s but no sglang_server_group: it would be redeployed as a single-node server,'
            ' replacing that rank of a running group. Set sglang_server_group (the same on every node of the group)'
            ' or remove sglang_node_rank.' % (me, as_text(rank))]


def plan_group(name: str, me: str, fleet_hosts: list[str], inventory_vars: Callable, given_addr: str, port: int,
               tp_size: int, peers: dict[str, str]) -> tuple[dict[str, Any] | None | None, list[Any]]:
    """(the plan's `group`, problems): None for a single-node server (`name` ""), else the group's name, this
    host's rank, the node count, the nodes by rank, the leader (rank 0), the dist-init address and the URL the
    others reach rank 0 at (`peers`: _rollout.peer_urls of the fleet)."""
    if not name:
        return None, _rank_without_group(me, inventory_vars(me).get('sglang_node_rank'))
    nodes, problems = members(name, fleet_hosts, inventory_vars)
    if me not in nodes:
        problems.append('%s is in the server group %s but not among sglang_fleet_hosts (%s), where the group\'s'
                        ' nodes are found.' % (me, name, ', '.join(fleet_hosts)))
    if nodes and as_int(tp_size) % len(nodes):
        problems.append('sglang_tp_size %s is not divisible by the %d nodes of the server group %s (every node runs'
                        ' the same share of the tensor-parallel ranks).' % (as_text(tp_size), len(nodes), name))
    if problems:
        return None, problems
    leader = nodes[0]
    return {
        'name': name, 'rank': nodes.index(me), 'nnodes': len(nodes), 'nodes': nodes, 'leader': leader,
        'dist_init_addr': dist_init_addr(given_addr, inventory_vars(leader), leader, port),
        'leader_url': peers.get(server_key(leader, name)),
        # The fleet slot and the reports count the group once, under this key.
        'key': server_key(leader, name),
    }, []


def play_problems(group: dict[str, Any] | None, play_hosts: list[str]) -> list[Any]:
    """A run that covers only some nodes of a group (--limit) would restart some ranks under the others: refused."""
    if group is None:
        return []
    missing = [node for node in group['nodes'] if node not in play_hosts]
    if not missing:
        return []
    covered = ', '.join(node for node in group['nodes'] if node in play_hosts) or 'none'
    return ['the run covers only %s of the server group %s, not %s: a group is redeployed whole (--limit must name'
            ' every node, or none).' % (covered, group['name'], ', '.join(missing))]


def flag_pairs(args: list[Any]) -> list[Any]:
    """[(flag, value)] of an argv, in order: `--flag=value` and `--flag value` as the flag and its value, a bare
    switch with the value True. The one reader of an SGLang argv (the group's comparison, the dry run's flag
    changes)."""
    found, index = [], 0
    while index < len(args):
        flag, value = as_text(args[index]), True
        if '=' in flag and flag.startswith('--'):
            flag, value = flag.split('=', 1)
        elif index + 1 < len(args) and not as_text(args[index + 1]).startswith('--'):
            index += 1
            value = as_text(args[index])
        found.append((flag, value))
        index += 1
    return found


def _flag_values(args: list[str]) -> dict[str, Any]:
    """{flag: [its values, in order]} of an argv (flag_pairs)."""
    found = {}
    for flag, value in flag_pairs(args):
        found.setdefault(flag, []).append('(the node\'s own)' if flag in PER_NODE_FLAGS else value)
    return found


def _spread(values_by_host: dict[str, str]) -> str:
    """'A on mn1 and mn3, B on mn2' for {host: value text}, in the hosts' order."""
    hosts_by_value = {}
    for host, value in values_by_host.items():
        hosts_by_value.setdefault(value, []).append(host)
    return ', '.join('%s on %s' % (value, ' and '.join(hosts)) for value, hosts in hosts_by_value.items())


def _shown(values: list[Any] | None) -> str:
    if values is None:
        return '(not given)'
    return ' '.join('(set)' if value is True else value for value in values)


def plan_differences(args_by_host: dict[str, list[str]]) -> list[Any]:
    """Problems: the launch arguments that differ between the nodes ({host: argv}, hosts in rank order), which
    SGLang needs equal on every node; --node-rank and the listen --host differ by design."""
    values = {host: _flag_values(args) for host, args in args_by_host.items()}
    flags = []
    for found in values.values():
        flags.extend(flag for flag in found if flag not in flags)
    problems = []
    for flag in flags:
        shown = {host: _shown(found.get(flag)) for host, found in values.items()}
        if len(set(shown.values())) > 1:
            problems.append('the nodes\' launch arguments differ at %s: %s (SGLang needs them equal on every node).'
                            % (flag, _spread(shown)))
    return problems


def _version_problems(nodes: list[dict[str, Any]]) -> list[Any]:
    versions = {node['host']: as_text(node['state']['sglang_version']) for node in nodes
                if (node.get('state') or {}).get('sglang_version')}
    if len(set(versions.values())) > 1:
        return ['the nodes run different sglang versions: %s (every rank must run the same code).' % _spread(versions)]
    return []


def _node_reasons(node: dict[str, Any]) -> list[Any]:
    """A node's reasons to redeploy the group, without its name: its own decision's, then what only the
    group sees (rank 0's generation, a rank > 0 whose process is gone)."""
    state = node.get('state') or {}
    found = list(node.get('reasons') or [])
    # Rank 0 keeps answering /health while generation is dead when another rank died (sglang issue 4780).
    if node['rank'] == 0 and state.get('generates') is False:
        found.append('generation fails: %s' % as_text(state.get('generate_error') or 'no error given'))
    if node['rank'] > 0 and not state.get('running') and 'server not running' not in found:
        found.append('server not running')
    return found


def _patch_reasons(nodes: list[dict[str, Any]]) -> list[Any]:
    """A group patched on some nodes only runs two codes: it is redeployed (the patch goes on every node), never
    refused. `patch_applied` is None on a node without a patch to apply."""
    applied = [node['host'] for node in nodes if node.get('patch_applied') is True]
    not_applied = [node['host'] for node in nodes if node.get('patch_applied') is False]
    if applied and not_applied:
        return ['patch applied on %s only, not on %s' % (', '.join(applied), ', '.join(not_applied))]
    return []


def _undo_problems(nodes: list[dict[str, Any]]) -> list[Any]:
    """An undo puts every node back to what one run left: each node numbers its revisions itself (a node a run
    changed nothing on records none, a recording that failed only warned), so the same number may be another run's
    on another node. Refused unless every node's target was recorded by the same run."""
    undos = {node['host']: node.get('undo') for node in nodes}
    if not any(undos.values()):
        return []
    runs = {host: as_text((undo or {}).get('run_id') or '(none)') for host, undo in undos.items()}
    if len(set(runs.values())) == 1 and all(undos.values()):
        return []
    targets = ', '.join('%s revision %s (run %s)' % (host, (undo or {}).get('target', '?'), runs[host])
                        for host, undo in undos.items())
    return ['the nodes would go back to what different runs left: %s (each node numbers its revisions itself;'
            ' playbooks/revisions.yml lists them). Nothing was stopped: put the group back with a redeploy of the'
            ' release you want, which goes on every node alike.' % targets]


def _unread(result: Any) -> str:
    """Why a node's registered result cannot be decided on ("" when it can): absent (the node is not in this
    run: --limit, or it failed earlier), skipped, or failed."""
    if not isinstance(result, dict) or not result:
        return 'has none in this run (not in the play, or it failed before)'
    if result.get('failed'):
        return 'failed: %s' % as_text(result.get('msg') or 'no message')
    if result.get('skipped'):
        return 'was skipped'
    return ''


def decided_nodes(group: dict[str, Any], registered: dict[str, Any], names: dict[str, str] | None = None) -> Any:
    """(the nodes as group_decision reads them, problems): `registered` is {host: {'plan': ..., 'state': ...,
    'decision': ...}} of every node of `group` (the plan's), `names` what the messages call each of the three
    (the role's names for them; the keys themselves without). A node whose results are missing, skipped or failed,
    or that is left alone, is refused: a group is decided on every node or none."""
    names = {**{key: key for key in DECIDED_ON}, **(names or {})}
    nodes, problems = [], []
    for host in group['nodes']:
        found = registered.get(host) or {}
        unread = [(names[key], _unread(found.get(key))) for key in DECIDED_ON]
        unread = ['%s %s' % (name, why) for name, why in unread if why]
        plan = found.get('plan') or {}
        if not unread and plan.get('left_alone_because'):
            unread = ['is left alone (%s)' % as_text(plan['left_alone_because'])]
        if unread:
            problems.append('%s of the server group %s: %s; every node of a group is redeployed together or none is.'
                            % (host, group['name'], ', '.join(unread)))
            continue
        decision = found['decision']
        # The group's nodes are in rank order: a node's rank is its place there.
        nodes.append({'host': host, 'rank': group['nodes'].index(host),
                      'args': plan.get('args') or [], 'reasons': decision.get('reasons') or [],
                      # The patch as sglang_decision sees it (its stamp, or the dry run); {} without a patch.
                      'patch_applied': (decision.get('patch_state') or {}).get('applied'),
                      # An undo run's target on this node (sglang_revisions state=planned), else None.
                      'undo': decision.get('undo'),
                      'state': found['state']})
    return nodes, problems


def group_decision(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """One decision for the group from its nodes' ({host, rank, args, reasons, state, patch_applied}): any node's
    reason redeploys every node (each reason prefixed with its node's name); different sglang versions or
    launch arguments, or an undo whose nodes would go back to different runs' revisions, are refused (problems)."""
    nodes = sorted(nodes, key=lambda node: node['rank'])
    reasons = ['%s: %s' % (node['host'], reason) for node in nodes for reason in _node_reasons(node)]
    reasons.extend(_patch_reasons(nodes))
    problems = _version_problems(nodes) + _undo_problems(nodes)
    problems.extend(plan_differences({node['host']: node.get('args') or [] for node in nodes}))
    return {'redeploy_needed': bool(reasons), 'reasons': reasons, 'problems': problems}


def _step_failure(result: dict[str, Any] | None) -> str | None:
    """The failure's message of a registered step result, or None when it did not fail (or did not run)."""
    if not isinstance(result, dict) or not any(result.get(key) for key in STEP_FAILURES):
        return None
    return as_text(result.get('msg') or ('unreachable' if result.get('unreachable') else 'failed'))


def barrier(nodes: list[str], play_hosts: list[str], results: dict[str, Any], said: dict[str, Any] | None = None,
            step: str | None = None) -> dict[str, Any]:
    """{failed_nodes, msg}: the nodes that may not go on past the barrier `step`, and why.

    A node fails the barrier when it left the play (unreachable, or failed outside any rescue), when one of its
    step results failed (`results`: {host: {registered name: result or None}}, in the steps' order), or when
    it did not say it got to this barrier (`said`: {host: the last barrier it said it got to}): a node whose
    failure is being rescued waits in its rescue (the linear strategy runs the other nodes' block first), and a
    failed task registers nothing unless told to, so only getting there proves a node is fine. msg names each
    node with its step's message; no failed node: msg "".
    """
    failed, words = [], []
    for host in nodes:
        if host not in play_hosts:
            failed.append(host)
            words.append('%s left the play (unreachable, or failed outside any rescue)' % host)
            continue
        for name, result in (results.get(host) or {}).items():
            message = _step_failure(result)
            if message is not None:
                failed.append(host)
                words.append('%s failed %s: %s' % (host, name, message))
                break
        else:
            if step is not None and (said or {}).get(host) != step:
                failed.append(host)
                last = (said or {}).get(host)
                words.append('%s did not get to the barrier "%s" (%s)' % (
                    host, step, 'its last one was "%s"' % last if last else 'it got to none'))
    return {'failed_nodes': failed, 'msg': '; '.join(words)}
