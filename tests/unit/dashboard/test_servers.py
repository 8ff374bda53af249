"""A server group is one server on the dashboard: fold_groups and its two uses (the hosts view, a run's summary)."""
import pytest

from gpuops_dashboard.servers import fold_groups, fold_host_cards, fold_reports


def card(name, group='', rank=None, healthy=False, status=None, outcome=None):
    report = None
    if status is not None:
        report = {'status': status, 'group': ({'name': group, 'nnodes': 2, 'rank': rank, 'outcome': outcome,
                                               'failed_nodes': [] if outcome else None} if group else None)}
    return {'name': name, 'address': '127.0.0.%d' % (len(name) + (rank or 0)), 'port': 30000, 'healthy': healthy,
            'server_group': group, 'node_rank': rank, 'last_report': report}


def test_single_servers_pass_through_in_order():
    hosts = [card('gpu1', healthy=True), card('gpu2')]
    assert fold_host_cards(hosts) == [dict(hosts[0], group=None, limit='gpu1'), dict(hosts[1], group=None, limit='gpu2')]


def test_a_group_is_one_card_rank_0s_naming_its_nodes_ranks_and_outcome():
    hosts = [card('gpu1'), card('mn2', 'mn', 1, status='redeployed', outcome='redeployed'),
             card('mn1', 'mn', 0, healthy=True, status='redeployed', outcome='redeployed'), card('gpu2')]
    servers = fold_host_cards(hosts)
    assert [server['name'] for server in servers] == ['gpu1', 'mn', 'gpu2']
    group = servers[1]
    # Rank 0's card: its address and health are the server's (only rank 0 serves HTTP).
    assert (group['leader'], group['address'], group['healthy'], group['limit']) == ('mn1', hosts[2]['address'], True,
                                                                                     'mn1,mn2')
    assert group['group'] == {'name': 'mn', 'nnodes': 2, 'outcome': 'redeployed', 'failed_nodes': [], 'nodes': [
        {'name': 'mn1', 'rank': 0, 'address': hosts[2]['address'], 'last_status': 'redeployed'},
        {'name': 'mn2', 'rank': 1, 'address': hosts[1]['address'], 'last_status': 'redeployed'}]}


def test_a_group_never_redeployed_has_no_outcome():
    servers = fold_host_cards([card('mn1', 'mn', 0), card('mn2', 'mn', 1)])
    assert len(servers) == 1 and servers[0]['group']['outcome'] is None and servers[0]['group']['failed_nodes'] is None


def report(status, group=None, rank=None, outcome=None, failed=None):
    return {'status': status, 'healthy': status != 'failed',
            'group': {'name': group, 'nnodes': 2, 'rank': rank, 'outcome': outcome, 'failed_nodes': failed}
            if group else None}


@pytest.mark.parametrize('reports, servers', [
    ({'gpu1': report('redeployed')}, [('gpu1', None, None)]),
    ({'mn2': report('failed', 'mn', 1, 'split', ['mn2']), 'gpu1': report('unchanged'),
      'mn1': report('rolled_back', 'mn', 0, 'split', ['mn2'])},
     [('gpu1', None, None), ('mn', 'split', [('mn1', 0, 'rolled_back'), ('mn2', 1, 'failed')])]),
    # Before the group stage ran (a run cut short), the outcome is not known.
    ({'mn1': report('redeployed', 'mn', 0), 'mn2': report('redeployed', 'mn', 1)},
     [('mn', None, [('mn1', 0, 'redeployed'), ('mn2', 1, 'redeployed')])]),
], ids=['single', 'split-group', 'outcome-unknown'])
def test_a_runs_summary_names_a_group_once(reports, servers):
    folded = fold_reports(reports)
    assert [(server.get('name', server['host']), (server['group'] or {}).get('outcome'),
             [(node['name'], node['rank'], node['status']) for node in server['group']['nodes']]
             if server['group'] else None) for server in folded] == servers


def test_a_rank_that_is_no_number_sorts_last():
    folded = fold_groups([{'n': 'x', 'r': 'one'}, {'n': 'y', 'r': 1}, {'n': 'z', 'r': 0}], name_of=lambda e: e['n'],
                         group_of=lambda e: 'g', rank_of=lambda e: e['r'], node_of=lambda e: {},
                         outcome_of=lambda e: None)
    assert [node['name'] for node in folded[0]['group']['nodes']] == ['z', 'y', 'x'] and folded[0]['leader'] == 'z'
