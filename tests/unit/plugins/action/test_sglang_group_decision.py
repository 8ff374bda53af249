"""sglang_group_decision reads every node's plan, state and decision through hostvars: one decision for the group."""
import pytest

from ansible_collections.gpuops.sglang.plugins.action.sglang_group_decision import ActionModule

GROUP = {'name': 'ds', 'rank': 0, 'nnodes': 2, 'nodes': ['mn1', 'mn2'], 'leader': 'mn1',
         'dist_init_addr': '127.0.0.31:5000', 'leader_url': 'http://127.0.0.31:30000'}
SERVING = {'running': True, 'healthy': True, 'sglang_version': '0.5.23', 'generates': None, 'generate_error': None}
NOTHING_TO_DO = {'redeploy_needed': False, 'reasons': [], 'patch_due': False,
                 'patch_state': {'applied': True, 'changed': False, 'proven': True}}


def args(rank, tp_size='2'):
    return ['--model-path', '/m', '--tp-size', tp_size, '--nnodes', '2', '--node-rank', str(rank),
            '--dist-init-addr', '127.0.0.31:5000']


def registered(rank, state=None, decision=None, plan=None):
    """A node's three registered results: serving, nothing to do, unless told otherwise."""
    return {'_sglang_plan': dict({'group': dict(GROUP, rank=rank), 'args': args(rank), 'left_alone_because': ''},
                                 **(plan or {})),
            '_sglang_state': dict(SERVING, **dict({'generates': True if rank == 0 else None}, **(state or {}))),
            '_sglang_decision': dict(NOTHING_TO_DO, **(decision or {}))}


NAMES = {'plan': '_sglang_plan', 'state': '_sglang_state', 'decision': '_sglang_decision'}


def decide(run_action, me='mn1', mn1=None, mn2=None):
    """The decision on `me`, both nodes' results in hostvars (None: the node registered nothing); its own plan and
    decision are arguments, as the role passes them."""
    nodes = {'mn1': registered(0) if mn1 is None else mn1, 'mn2': registered(1) if mn2 is None else mn2}
    own = nodes[me] or {}
    return run_action(ActionModule, {'hostvars': nodes}, args={
        'group': (own.get('_sglang_plan') or {}).get('group'),
        'left_alone_because': (own.get('_sglang_plan') or {}).get('left_alone_because', ''), 'decision': own.get('_sglang_decision') or {}, 'host': me,
        'from_nodes': NAMES})


def test_a_group_with_nothing_to_do_on_any_node_is_left_as_it_is(run_action):
    decision = decide(run_action)
    assert not decision.get('failed')
    assert decision == dict(decision, redeploy_needed=False, reasons=[], nodes=['mn1', 'mn2'], problems=[])


@pytest.mark.parametrize('me', ['mn1', 'mn2'])
def test_a_reason_on_one_node_redeploys_the_group_seen_from_every_node(run_action, me):
    down = registered(1, {'running': False, 'healthy': False},
                      {'redeploy_needed': True, 'reasons': ['server not running']})
    decision = decide(run_action, me, mn2=down)
    assert decision['redeploy_needed'] is True and decision['reasons'] == ['mn2: server not running']


def test_rank_0_that_answers_health_but_cannot_generate_redeploys_the_group(run_action):
    dead = registered(0, {'generates': False, 'generate_error': 'no output in 20 s'})
    decision = decide(run_action, mn1=dead)
    assert decision['reasons'] == ['mn1: generation fails: no output in 20 s'] and not decision.get('failed')


def test_a_group_patched_on_some_nodes_only_is_redeployed_not_refused(run_action):
    unpatched = registered(1, decision={'redeploy_needed': True, 'reasons': ['patch not applied'], 'patch_due': True,
                                        'patch_state': {'applied': False, 'changed': True}})
    decision = decide(run_action, mn2=unpatched)
    assert not decision.get('failed') and decision['problems'] == []
    assert decision['reasons'] == ['mn2: patch not applied', 'patch applied on mn1 only, not on mn2']


@pytest.mark.parametrize('mn2, words', [
    (registered(1, {'sglang_version': '0.5.12.post1'}), 'the nodes run different sglang versions'),
    (registered(1, plan={'args': args(1, tp_size='4')}), "the nodes' launch arguments differ at --tp-size"),
    ({}, 'mn2 of the server group ds: _sglang_plan has none in this run'),
    (dict(registered(1), _sglang_decision={'failed': True, 'msg': 'sglang_python /x does not exist on mn2'}),
     'mn2 of the server group ds: _sglang_decision failed: sglang_python /x does not exist on mn2'),
    (dict(registered(1), _sglang_state={'skipped': True}), '_sglang_state was skipped'),
    (registered(1, plan={'left_alone_because': 'sglang_redeploy_skip is set for this host'}),
     'mn2 of the server group ds: is left alone (sglang_redeploy_skip is set for this host)'),
], ids=['versions-differ', 'args-differ', 'node-not-in-the-run', 'node-decision-failed', 'state-skipped',
        'node-left-alone'])
def test_a_group_that_cannot_be_decided_together_is_refused_with_nothing_touched(run_action, mn2, words):
    decision = decide(run_action, mn2=mn2)
    assert decision['failed'] is True and words in decision['msg']
    assert decision['msg'].startswith('the server group ds is refused, nothing was touched: ')
    assert decision['problems'] and set(decision) >= {'redeploy_needed', 'reasons', 'nodes'}


@pytest.mark.parametrize('plan, own', [
    ({'group': None}, {'redeploy_needed': True, 'reasons': ['patch not applied'], 'patch_due': True}),
    ({'left_alone_because': 'rollout stopped: the canary gpu1 failed'}, {'skipped': True}),
], ids=['single-node', 'left-alone'])
def test_a_host_outside_any_group_decision_keeps_its_own(run_action, plan, own):
    me = dict(registered(0, plan=plan), _sglang_decision=own)
    decision = decide(run_action, mn1=me, mn2={})
    assert not decision.get('failed')
    assert (decision['redeploy_needed'], decision['reasons'], decision['problems']) \
        == (own.get('redeploy_needed', False), own.get('reasons', []), [])
    assert decision['nodes'] == (['mn1'] if plan.get('group', GROUP) is None else ['mn1', 'mn2'])
