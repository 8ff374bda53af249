"""A server group (one SGLang server over several hosts, `sglang_server_group` with a `sglang_node_rank` each) is
one server: the hosts view and a run's summary show it as one card, rank 0's (the rank that serves HTTP), naming
the group, its nodes and ranks, and its outcome. Single-node servers pass through as they are.

Several servers on one machine (one inventory host per server, issue 44) are shown together on the machine's card:
servers on bare metal share a machine when they share the inventory address (ansible_host), servers in an LXC
container when they share pve_node and pve_vmid. A server group's card sits on its rank 0's machine.
"""


def _rank(value):
    """Ranks sort as numbers; one that is not a number sorts last."""
    try:
        return (0, int(value))
    except (TypeError, ValueError):
        return (1, 0)


def fold_groups(entries, name_of, group_of, rank_of, node_of, outcome_of):
    """One entry per server, in order of first appearance.

    A single-node server's entry comes back as it is, with `group` None. A group's nodes become one entry:
    its lowest rank's (rank 0's) with `name` the group's, `leader` that node, `limit` the --limit pattern of
    its nodes, and `group` = {name, nnodes, nodes: [node_of(entry) with name and rank, in rank order],
    outcome: outcome_of(the leader's entry) (None when not known), failed_nodes}.
    """
    order, members = [], {}
    for entry in entries:
        group = group_of(entry) or ''
        key = ('group', group) if group else ('host', name_of(entry))
        if key not in members:
            order.append(key)
            members[key] = []
        members[key].append(entry)
    servers = []
    for kind, name in order:
        if kind == 'host':
            servers.extend(dict(entry, group=None, limit=name_of(entry)) for entry in members[(kind, name)])
            continue
        nodes = sorted(members[(kind, name)], key=lambda entry: _rank(rank_of(entry)))
        leader = nodes[0]
        outcome = outcome_of(leader) or {}
        servers.append(dict(leader, name=name, leader=name_of(leader),
                            limit=','.join(name_of(entry) for entry in nodes),
                            group={'name': name, 'nnodes': len(nodes),
                                   'nodes': [dict(node_of(entry), name=name_of(entry), rank=rank_of(entry))
                                             for entry in nodes],
                                   'outcome': outcome.get('outcome'), 'failed_nodes': outcome.get('failed_nodes')}))
    return servers


def _report_group(report):
    return (report or {}).get('group') or {}


def fold_host_cards(hosts):
    """The hosts view (HostDirectory.state(): one dict per host with server_group and node_rank) as server cards;
    a group's outcome is its last report's."""
    return fold_groups(
        hosts, name_of=lambda host: host['name'], group_of=lambda host: host.get('server_group'),
        rank_of=lambda host: host.get('node_rank'),
        node_of=lambda host: {'address': host.get('address'),
                              'last_status': (host.get('last_report') or {}).get('status')},
        outcome_of=lambda host: _report_group(host.get('last_report')))


def fold_reports(reports):
    """A run's summary ({host: report}) as one entry per server, in host order; a group's from its reports'
    `group` (name, rank, outcome)."""
    return fold_groups(
        [dict(report, host=host) for host, report in sorted((reports or {}).items())],
        name_of=lambda report: report['host'], group_of=lambda report: _report_group(report).get('name'),
        rank_of=lambda report: _report_group(report).get('rank'),
        node_of=lambda report: {'status': report.get('status'), 'healthy': report.get('healthy')},
        outcome_of=_report_group)


def machine_of(card):
    """(key, label) of the machine a server card runs on: its container (pve_node, pve_vmid), else its inventory
    address."""
    if card.get('pve_vmid') is not None:
        return ('lxc:%s/%s' % (card.get('pve_node'), card['pve_vmid']),
                'LXC %s on %s (%s)' % (card['pve_vmid'], card.get('pve_node'), card.get('machine_address')))
    return 'host:%s' % card.get('machine_address'), '%s (bare metal)' % card.get('machine_address')


def fold_machines(servers):
    """The server cards (fold_host_cards) by machine, in order of first appearance: [{name, label, address,
    pve_node, pve_vmid, servers: [the names of its server cards, in card order]}]."""
    machines = {}
    for card in servers:
        key, label = machine_of(card)
        if key not in machines:
            machines[key] = {'name': key, 'label': label, 'address': card.get('machine_address'),
                             'pve_node': card.get('pve_node'), 'pve_vmid': card.get('pve_vmid'), 'servers': []}
        machines[key]['servers'].append(card['name'])
    return list(machines.values())
