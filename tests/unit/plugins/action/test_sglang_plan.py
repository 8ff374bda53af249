"""sglang_plan reads the role's variables and the fleet's hostvars: the gate, the rules, the files, the peers."""
import hashlib
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'plugin_utils'))
from role_settings import NEEDED, role_defaults  # noqa: E402  pylint: disable=wrong-import-position

from ansible.template import trust_as_template  # noqa: E402

from ansible_collections.gpuops.sglang.plugins.action.sglang_plan import ActionModule  # noqa: E402
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _timing  # noqa: E402


def host_vars(**overrides):
    task_vars = dict(role_defaults(), **NEEDED)
    task_vars.update(inventory_hostname='gpu2', ansible_play_hosts_all=['gpu1', 'gpu2'], groups={'gpu': ['gpu1', 'gpu2']},
                     hostvars={'gpu1': {'ansible_host': '127.0.0.11', 'sglang_host': '0.0.0.0'},
                               'gpu2': {'ansible_host': '127.0.0.12'}})
    task_vars.update(overrides)
    return task_vars


def test_a_consistent_host_gets_its_flags_files_and_peers(run_action):
    plan = run_action(ActionModule, host_vars(sglang_port=trust_as_template('{{ 30000 + 1 }}')))
    assert not plan.get('failed') and plan['left_alone_because'] == '' and plan['problems'] == []
    # A templated variable is read rendered, as a task argument would be.
    assert plan['args'][plan['args'].index('--port') + 1] == '30001'
    assert plan['expected_server_info']['port'] == 30001
    assert plan['paths']['base_url'] == 'http://127.0.0.1:30001'
    assert [entry['label'] for entry in plan['configs']] == ['launch configuration', 'systemd unit']
    assert json.loads(plan['contents']['launch configuration'])['args'] == plan['args']
    assert all('content' not in entry for entry in plan['files'])
    assert plan['secret'] is False
    assert plan['peers'] == {'gpu1': 'http://127.0.0.11:30000', 'gpu2': 'http://127.0.0.1:30000'}
    # The role's own launcher, read once, where sglang_server_info compares it with the installed one.
    with open(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'roles', 'sglang', 'files',
                           'launcher.py')) as handle:
        assert plan['launcher'] == {'path': plan['paths']['launcher'], 'content': handle.read()}


def test_broken_rules_fail_the_plan_with_every_message_joined(run_action):
    plan = run_action(ActionModule, host_vars(sglang_model_path='', sglang_kill_patterns=[], pve_vmid=101))
    assert plan['failed'] is True
    assert plan['msg'] == ' '.join(plan['problems'])
    assert [problem.split(' ')[0] for problem in plan['problems']] == ['sglang_model_path', 'pve_node',
                                                                        'sglang_kill_patterns']
    # The report still finds the server's files (it asks the refused host whether its server serves).
    assert plan['paths']['launch_file'] == '/etc/sglang/launch.json'


@pytest.mark.parametrize('overrides, reason', [
    ({'sglang_redeploy_skip': True}, 'sglang_redeploy_skip is set for this host'),
    ({'sglang_canary': 1, 'hostvars': {'gpu1': {'sglang_redeploy_report': {'host': 'gpu1', 'status': 'failed'}},
                                       'gpu2': {}}},
     'rollout stopped: the canary gpu1 failed'),
    ({'sglang_max_fail_percentage': trust_as_template('{{ 0 }}'), 'sglang_canary': 0,
      'hostvars': {'gpu1': {'sglang_redeploy_report': {'host': 'gpu1', 'status': 'rolled_back'}}, 'gpu2': {}}},
     'rollout stopped: 1 of 1 finished host(s) failed (gpu1), above sglang_max_fail_percentage 0'),
], ids=['skip-flag', 'canary', 'failure-budget'])
def test_a_host_left_alone_is_not_checked_further(run_action, overrides, reason):
    plan = run_action(ActionModule, host_vars(sglang_model_path='', **overrides))
    assert plan['left_alone_because'] == reason and not plan.get('failed')
    assert 'configs' not in plan


def test_gate_only_reads_the_gate_again(run_action):
    plan = run_action(ActionModule, host_vars(sglang_redeploy_skip='yes'), args={'gate_only': True})
    assert plan['left_alone_because'] == 'sglang_redeploy_skip is set for this host' and 'paths' not in plan


def test_keys_make_the_plan_secret_and_add_the_keys_file(run_action):
    plan = run_action(ActionModule, host_vars(sglang_api_key='k3y'))
    assert plan['secret'] is True and plan['_ansible_no_log'] is True
    assert plan['contents']['API keys'].endswith('api-key: "k3y"\n')
    assert plan['args'][-2:] == ['--config', '/etc/sglang/server.yaml']


# Upstream SGLang does not report its environment: a verification the operator turned off with
# -e sglang_verify_environment=false (the string 'false') must expect nothing of it.
@pytest.mark.parametrize('verify, expected', [(False, {}), ('false', {}), ('no', {}),
                                              (True, {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': '8'}),
                                              ('true', {'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE': '8'})])
def test_the_environment_is_verified_only_when_asked(run_action, verify, expected):
    plan = run_action(ActionModule, host_vars(sglang_verify_environment=verify))
    assert not plan.get('failed') and plan['expected_environment'] == expected


def test_a_plan_without_secrets_is_shown_and_a_refused_one_always(run_action):
    assert run_action(ActionModule, host_vars())['_ansible_no_log'] is False
    refused = run_action(ActionModule, host_vars(sglang_api_key='k3y', sglang_model_path=''))
    assert refused['failed'] and 'sglang_model_path is empty' in refused['msg']
    assert not refused.get('_ansible_no_log') and 'contents' not in refused and 'k3y' not in repr(refused)


@pytest.mark.parametrize('overrides, levels', [
    ({}, [1, 16]),
    ({'sglang_dynamic_spec_batch_size_threshold': trust_as_template('{{ 2 + 2 }}')}, [1, 8]),
    ({'sglang_perf_levels': [32, 1, 4]}, [1, 4, 32]),
])
def test_the_performance_gate_levels_default_to_1_and_twice_the_threshold(run_action, overrides, levels):
    assert run_action(ActionModule, host_vars(**overrides))['perf_levels'] == levels


def group_vars(**overrides):
    """gpu1 (rank 0) and gpu2 (rank 1, this host) are the nodes of one server, ds."""
    found = host_vars(sglang_server_group='ds', sglang_node_rank=1, sglang_tp_size=2,
                      hostvars={'gpu1': {'ansible_host': '127.0.0.11', 'sglang_host': '0.0.0.0',
                                         'sglang_server_group': 'ds', 'sglang_node_rank': 0},
                                'gpu2': {'ansible_host': '127.0.0.12', 'sglang_server_group': 'ds',
                                         'sglang_node_rank': 1}})
    found.update(overrides)
    return found


def test_a_node_of_a_server_group_gets_the_group_and_its_three_flags(run_action):
    plan = run_action(ActionModule, group_vars())
    assert not plan.get('failed'), plan.get('msg')
    assert plan['group'] == {'name': 'ds', 'rank': 1, 'nnodes': 2, 'nodes': ['gpu1', 'gpu2'], 'leader': 'gpu1',
                             'dist_init_addr': '127.0.0.11:5000', 'leader_url': 'http://127.0.0.11:30000',
                             'key': 'group:ds'}
    # Rank 1 serves no HTTP; its lease covers rank 0's steps; the group's one slot is under its key.
    assert plan['paths']['base_url'] == '' and plan['slot_key'] == 'group:ds'
    assert plan['timing']['ranks_started_after'] > 0
    at = plan['args'].index('--nnodes')
    assert plan['args'][at:at + 6] == ['--nnodes', '2', '--node-rank', '1', '--dist-init-addr', '127.0.0.11:5000']
    assert dict((key, plan['expected_server_info'][key]) for key in ('tp_size', 'nnodes', 'node_rank', 'dist_init_addr')) \
        == {'tp_size': 2, 'nnodes': 2, 'node_rank': 1, 'dist_init_addr': '127.0.0.11:5000'}


def test_this_hosts_own_rank_is_read_rendered_and_a_given_address_is_used_as_it_is(run_action):
    plan = run_action(ActionModule, group_vars(sglang_node_rank=trust_as_template('{{ 0 + 1 }}'),
                                               sglang_dist_init_addr='10.9.0.1:6000'))
    assert plan['group']['rank'] == 1 and plan['group']['dist_init_addr'] == '10.9.0.1:6000'
    assert plan['args'][plan['args'].index('--dist-init-addr') + 1] == '10.9.0.1:6000'


def test_a_single_node_server_has_no_group_and_no_group_flag(run_action):
    plan = run_action(ActionModule, host_vars())
    assert plan['slot_key'] == 'gpu2' and plan['paths']['base_url'].startswith('http://')
    assert plan['group'] is None and plan['timing']['ranks_started_after'] == 0
    assert not set(plan['args']) & {'--nnodes', '--node-rank', '--dist-init-addr'}
    assert not set(plan['expected_server_info']) & {'nnodes', 'node_rank', 'dist_init_addr'}


def test_a_broken_group_is_refused_among_the_plans_problems(run_action):
    plan = run_action(ActionModule, group_vars(sglang_tp_size=3, sglang_model_path=''))
    assert plan['failed'] is True and plan['group'] is None and 'args' not in plan
    assert [problem.split(' ')[0] for problem in plan['problems']] == ['sglang_model_path', 'sglang_tp_size']
    assert 'not divisible by the 2 nodes of the server group ds' in plan['msg']


def test_a_node_left_alone_still_names_its_group(run_action):
    plan = run_action(ActionModule, group_vars(sglang_redeploy_skip=True))
    assert plan['left_alone_because'] and plan['group']['nodes'] == ['gpu1', 'gpu2']


def test_a_failed_single_node_canary_stops_the_group_play(run_action):
    # The group play's hosts are the group's nodes; the rollout (sglang_rollout_hosts) puts gpu1 first.
    plan = run_action(ActionModule, host_vars(
        inventory_hostname='big0', ansible_play_hosts_all=['big0', 'big1'], sglang_canary=1,
        sglang_fleet_hosts=['gpu1', 'big0', 'big1'], sglang_rollout_hosts=['gpu1', 'big0', 'big1'],
        hostvars={'gpu1': {'sglang_redeploy_report': {'host': 'gpu1', 'status': 'failed'}},
                  'big0': {'sglang_server_group': 'big', 'sglang_node_rank': 0},
                  'big1': {'sglang_server_group': 'big', 'sglang_node_rank': 1}}), args={'gate_only': True})
    assert plan['left_alone_because'] == 'rollout stopped: the canary gpu1 failed'


def test_the_peers_name_a_group_once(run_action):
    plan = run_action(ActionModule, host_vars(
        sglang_fleet_hosts=['gpu1', 'big0', 'big1'],
        hostvars={'gpu1': {'ansible_host': '127.0.0.11', 'sglang_host': '0.0.0.0'},
                  'big0': {'ansible_host': '127.0.0.31', 'sglang_host': '0.0.0.0', 'sglang_server_group': 'big',
                           'sglang_node_rank': 0},
                  'big1': {'ansible_host': '127.0.0.32', 'sglang_server_group': 'big', 'sglang_node_rank': 1}}))
    assert plan['peers'] == {'gpu1': 'http://127.0.0.11:30000', 'group:big': 'http://127.0.0.31:30000'}


@pytest.mark.parametrize('rank', [1, '1', 0, trust_as_template('{{ 0 + 1 }}')])
def test_a_rank_on_a_host_without_a_group_is_refused_before_anything_stops(run_action, rank):
    # It would land in the single-node play and replace that rank of a live group with a standalone server.
    plan = run_action(ActionModule, host_vars(sglang_node_rank=rank))
    assert plan['failed'] and plan['group'] is None and 'args' not in plan
    assert plan['problems'] == [
        'gpu2 has sglang_node_rank %s but no sglang_server_group: it would be redeployed as a single-node server,'
        ' replacing that rank of a running group. Set sglang_server_group (the same on every node of the group)'
        ' or remove sglang_node_rank.' % (0 if rank == 0 else 1)]


def test_the_patch_is_read_once_and_carried_with_its_digest(run_action, tmp_path):
    diff = tmp_path / 'fix.diff'
    diff.write_bytes(b'--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n\n')
    plan = run_action(ActionModule, host_vars(sglang_patch_file=str(diff)))
    # Byte for byte, trailing blank line included (lookup('file') would strip it without rstrip=false).
    assert plan['patch'] == {'file': str(diff), 'content': diff.read_text(),
                             'sha256': hashlib.sha256(diff.read_bytes()).hexdigest()}
    assert run_action(ActionModule, host_vars())['patch'] is None


@pytest.mark.parametrize('read_by, patch, reader', [
    ('patch', b'--- a/w.py\n+++ b/w.py\n@@ -1 +1,2 @@\n x\n+os.environ["SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE"]\n',
     'patch'),
    ('installed', None, 'installed'),
], ids=['the-patch-reads-it', 'the-operator-says-the-installed-sglang-reads-it'])
def test_env_mode_goes_on_when_something_reads_the_variable_and_says_who(run_action, tmp_path, read_by, patch,
                                                                         reader):
    diff = tmp_path / 'dynamic.diff'
    if patch is not None:
        diff.write_bytes(patch)
    plan = run_action(ActionModule, host_vars(sglang_dynamic_spec_env_read_by=read_by,
                                              sglang_patch_file=str(diff) if patch is not None else ''))
    assert not plan.get('failed') and plan['dynamic_spec_env_read_by'] == reader


def test_env_mode_that_nothing_reads_is_refused_before_anything_stops(run_action, tmp_path):
    diff = tmp_path / 'unrelated.diff'
    diff.write_bytes(b'--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n')
    plan = run_action(ActionModule, host_vars(sglang_dynamic_spec_env_read_by='patch', sglang_patch_file=str(diff)))
    # Refused in the plan, the role's first step: no argv, no files, nothing to stop with.
    assert plan['failed'] is True and 'args' not in plan and 'configs' not in plan
    assert plan['problems'] == [
        'sglang_dynamic_spec_mode env sets SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE on the server, but nothing is known'
        ' to read it: sglang_patch_file %s adds no line naming it, and upstream SGLang ignores it, so dynamic'
        ' speculation would be silently off while the report says healthy. Use a patch whose added lines read it,'
        " or sglang_dynamic_spec_mode: adaptive (upstream's, sglang 0.5.23 or later), or sglang_dynamic_spec_enabled:"
        ' false; set sglang_dynamic_spec_env_read_by: installed only when the installed sglang already reads it.'
        % diff]


@pytest.mark.parametrize('content', [None, b'\xff\xfe not text'], ids=['missing', 'not-utf-8'])
def test_a_patch_that_cannot_be_read_fails_the_plan_before_anything_stops(run_action, tmp_path, content):
    diff = tmp_path / 'fix.diff'
    if content is not None:
        diff.write_bytes(content)
    plan = run_action(ActionModule, host_vars(sglang_patch_file=str(diff)))
    assert plan['failed'] is True and 'patch' not in plan
    assert plan['problems'] == [plan['msg']]
    assert plan['msg'].startswith('sglang_patch_file %s cannot be read on the controller: ' % diff)


def test_a_canary_bakes_against_the_fleets_other_servers_and_every_server_exports_metrics(run_action):
    bake = dict(sglang_canary_bake=60, sglang_canary=1, sglang_router_url='http://127.0.0.1:30080',
                sglang_fleet_hosts=['gpu2', 'gpu1'], ansible_play_hosts_all=['gpu2', 'gpu1'])
    plan = run_action(ActionModule, host_vars(**bake))
    assert not plan.get('failed'), plan.get('msg')
    assert plan['bake'] == {'seconds': 60.0, 'baselines': {'gpu1': 'http://127.0.0.11:30000'}}
    assert '--enable-metrics' in plan['args'] and plan['expected_server_info']['enable_metrics'] is True
    # gpu1 is not the canary: it does not bake, and it exports its figures as the baseline.
    later = run_action(ActionModule, host_vars(inventory_hostname='gpu1', **bake))
    assert later['bake'] == {'seconds': 0, 'baselines': {}} and '--enable-metrics' in later['args']
    # Without a bake nothing changes in the server's flags.
    plain = run_action(ActionModule, host_vars())
    assert plain['bake'] == {'seconds': 0, 'baselines': {}} and '--enable-metrics' not in plain['args']
    assert 'enable_metrics' not in plain['expected_server_info']


@pytest.mark.parametrize('name, given, shown', [
    # As the inventory writes it (a number), as -e hands it over (a string), as a template renders it.
    ('sglang_rollback_idle', 1e12, '1000000000000.0'),
    ('sglang_rollback_deadline', '1e12', '1e12'),
    ('sglang_health_timeout', 'nan', 'nan'),
    ('sglang_canary_bake', trust_as_template('{{ 86400 * 2 }}'), '172800'),
], ids=['idle-inventory', 'deadline-extra-var', 'health-nan', 'bake-templated'])
def test_a_time_bound_over_its_maximum_fails_the_plan_naming_it(run_action, name, given, shown):
    plan = run_action(ActionModule, host_vars(**{name: given}))
    assert plan['failed'] is True
    said = '%s (%s) must be %s' % (name, shown, _timing.TIME_BOUNDS[name].words())
    assert any(problem.startswith(said) for problem in plan['problems']), plan['problems']


@pytest.mark.parametrize('make, levels', [(host_vars, 2000), (group_vars, 200)], ids=['single-node', 'rank-1'])
def test_perf_levels_past_their_count_fail_the_plan_though_the_deadline_is_auto(run_action, make, levels):
    """The review's runs: 2000 levels of an hour made an auto deadline of 168 days, 200 on rank 1 an arm_after of
    8 days, and the plan said nothing."""
    plan = run_action(ActionModule, make(sglang_perf_gate=True, sglang_perf_timeout=3600, sglang_rollback_deadline='auto',
                                         sglang_perf_levels=list(range(1, levels + 1)), sglang_perf_requests=levels))
    assert plan['failed'] is True and 'args' not in plan
    assert ('sglang_perf_levels has %d entries; it must have at most %d entries'
            % (levels, _timing.COUNT_BOUNDS['sglang_perf_levels'].most)) in plan['msg']


def test_a_rank_whose_wait_for_rank_0_outlasts_any_guard_fails_the_plan_naming_the_fleets_readings(run_action):
    # Each variable within its range; rank 0's bake reads 8999 other fleet servers twice.
    fleet = ['gpu1', 'gpu2'] + ['fleet%d' % n for n in range(8998)]
    plan = run_action(ActionModule, group_vars(sglang_canary_bake=86400, sglang_canary=1, sglang_health_timeout=14400,
                                               sglang_router_url='http://127.0.0.1:30080', sglang_fleet_hosts=fleet,
                                               sglang_rollback_deadline='auto'))
    assert plan['failed'] is True and 'args' not in plan
    assert [problem.split(' (')[0] for problem in plan['problems']] == [
        'What this rank waits for after its start without renewing its guard', 'The outage window']
    assert all('of 8999 other fleet servers: 266400 s' in problem for problem in plan['problems'])
