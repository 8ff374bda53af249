"""sglang_group_barrier fails every node of the group once one node failed a step, or left the play."""
import pytest

from ansible_collections.gpuops.sglang.plugins.action.sglang_group_barrier import ActionModule

PLAN = {'group': {'name': 'ds', 'rank': 1, 'nnodes': 2, 'nodes': ['mn1', 'mn2'], 'leader': 'mn1'}}
STEPS = ['_sglang_stop', '_sglang_gpu_release']


def task_vars(batch=('mn1', 'mn2'), mn1=None, mn2=None, plan=None):
    """mn2's task variables; each node stopped and released its GPUs but for the results given."""
    done = {'_sglang_stop': {'changed': True}, '_sglang_gpu_release': {'changed': True, 'msg': 'freed'},
            '_sglang_group_step': 'stopped'}
    hostvars = {'mn1': dict(done, **(mn1 or {})), 'mn2': dict(done, **(mn2 or {}))}
    return {'ansible_play_batch': list(batch), 'hostvars': hostvars, 'plan': plan or PLAN}


def barrier(run_action, found, **args):
    """The barrier on mn2 with the role's arguments (its plan's group, the name it says its step under)."""
    given = dict({'group': found.pop('plan').get('group'), 'host': 'mn2', 'said': '_sglang_group_step'}, **args)
    return run_action(ActionModule, found, args=given)


def test_every_node_done_passes(run_action):
    result = barrier(run_action, task_vars(mn1={'_sglang_gpu_release': {'skipped': True}}),
                     step='stopped', results=STEPS + ['_sglang_not_run_yet'])
    assert not result.get('failed') and result['failed_nodes'] == []


@pytest.mark.parametrize('overrides, failed, msg', [
    ({'mn1': {'_sglang_gpu_release': {'failed': True, 'msg': 'GPU 0 still holds 20619 MiB'}}}, ['mn1'],
     'mn1 failed _sglang_gpu_release: GPU 0 still holds 20619 MiB; the whole server group ds rolls back'
     ' (mn2 stops here).'),
    ({'batch': ['mn2']}, ['mn1'],
     'mn1 left the play (unreachable, or failed outside any rescue); the whole server group ds rolls back'
     ' (mn2 stops here).'),
    ({'mn2': {'_sglang_stop': {'unreachable': True, 'msg': 'ssh: connection refused'}}}, ['mn2'],
     'mn2 failed _sglang_stop: ssh: connection refused; the whole server group ds rolls back (mn2 stops here).'),
], ids=['a-peer-failed-a-step', 'a-peer-left-the-play', 'this-node-unreachable'])
def test_a_failed_node_fails_this_one_saying_which_node_and_step(run_action, overrides, failed, msg):
    result = barrier(run_action, task_vars(**overrides), step='stopped', results=STEPS)
    assert result['failed'] is True and result['failed_nodes'] == failed and result['msg'] == msg


def test_only_the_named_results_count(run_action):
    result = barrier(run_action, task_vars(mn1={'_sglang_arm': {'failed': True}}), step='stopped', results=STEPS)
    assert not result.get('failed') and result['failed_nodes'] == []


def test_a_single_node_server_waits_for_itself_alone(run_action):
    result = barrier(run_action, task_vars(batch=['mn2'], plan={'group': None},
                                           mn2={'_sglang_stop': {'failed': True, 'msg': 'x'}}),
                     step='stopped', results=STEPS)
    assert result['failed_nodes'] == ['mn2'] and result['msg'] == 'mn2 failed _sglang_stop: x; the server rolls back' \
        ' (mn2 stops here).'


@pytest.mark.parametrize('said, msg', [
    # mn1 failed a step that registers nothing: it waits in its rescue and never says it got here.
    ('armed', 'mn1 did not get to the barrier "stopped" (its last one was "armed")'),
    (None, 'mn1 did not get to the barrier "stopped" (it got to none)'),
], ids=['stuck-at-an-earlier-barrier', 'never-got-to-one'])
def test_a_node_that_did_not_get_to_the_barrier_fails_this_one(run_action, said, msg):
    result = barrier(run_action, task_vars(mn1={'_sglang_group_step': said}), step='stopped')
    assert result['failed'] is True and result['failed_nodes'] == ['mn1']
    assert result['msg'] == msg + '; the whole server group ds rolls back (mn2 stops here).'


def test_with_no_results_only_getting_there_counts(run_action):
    result = barrier(run_action, task_vars(mn1={'_sglang_stop': {'failed': True, 'msg': 'x'}}), step='stopped',
                     results=[])
    assert not result.get('failed') and result['failed_nodes'] == []


def test_by_default_the_window_steps_results_of_the_step_table_are_read(run_action):
    result = barrier(run_action, task_vars(mn1={'_sglang_gpu_release': {'failed': True, 'msg': 'GPU 0 still holds'},
                                               # A tolerated step's failure (the baseline's) is no node's failure.
                                               '_sglang_perf_before': {'failed': True, 'msg': 'no baseline'}}),
                     step='stopped')
    assert result['failed_nodes'] == ['mn1'] and 'mn1 failed _sglang_gpu_release: GPU 0 still holds' in result['msg']


def test_before_the_window_the_group_stops_untouched(run_action):
    result = barrier(run_action, task_vars(mn1={'_sglang_group_step': None}, mn2={'_sglang_group_step': 'ready'}),
                     step='ready')
    assert result['failed'] is True and result['msg'] == (
        'mn1 did not get to the barrier "ready" (it got to none); the whole server group ds stops untouched'
        ' (mn2 stops here).')
