"""The role reaches its plan through Ansible itself: a broken rule refuses the host before anything on it
moves, and the files the plan renders are the bytes the template lookup rendered. The rules themselves are
unit-tested, case by case, in tests/unit/plugins/plugin_utils/test_rules.py."""
import json
import os

import pytest
import yaml

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _configs
from helpers.ansible_run import REPO, TARGET_PYTHON, run_playbook, run_task

ROLE = os.path.join(REPO, 'roles', 'sglang')


def role_play(tmp_path, host_vars):
    inventory = tmp_path / 'hosts.json'
    inventory.write_text(json.dumps({'gpu': {'hosts': {'gpu-test': dict(
        {'ansible_connection': 'local', 'ansible_python_interpreter': TARGET_PYTHON}, **host_vars)}}}))
    return str(inventory)


@pytest.mark.slow
def test_a_broken_rule_refuses_the_host_with_nothing_stopped(tmp_path):
    reports = tmp_path / 'reports'
    run = run_playbook(tmp_path, 'playbooks/redeploy.yml', role_play(tmp_path, {
        'sglang_model_path': '/models/m', 'sglang_draft_model_path': '/models/d', 'sglang_kill_patterns': [], 'sglang_report_dir': str(reports),
        # Only the rule this test breaks: no patch here, so env mode would be refused too (nothing reads its variable).
        'sglang_dynamic_spec_enabled': False,
        'sglang_config_dir': str(tmp_path / 'etc'), 'sglang_run_dir': str(tmp_path / 'run'),
        'sglang_guard_dir': str(tmp_path / 'guard'), 'sglang_python': '/nonexistent/python'}))
    assert run.rc != 0
    report = json.loads((reports / 'gpu-test.json').read_text())
    assert report['status'] == 'failed'
    assert report['reason'] == (
        "nothing was stopped: Plan this host's run (the rollout gate, the variable rules, the server's flags and"
        " files): sglang_kill_patterns must list at least one pattern, and no empty one (an empty pattern matches"
        " every process).")
    assert run.failure_messages('gpu-test')[-1].startswith('failed on gpu-test: nothing was stopped: ')


@pytest.mark.parametrize('keys', [{}, {'sglang_api_key': 'k3y:"quoted"\\back#slash', 'sglang_admin_api_key': 'a'}],
                         ids=['unit-only', 'with-keys'])
def test_rendered_files_are_the_bytes_of_the_template_lookup(tmp_path, keys):
    settings = {}
    with open(os.path.join(ROLE, 'defaults', 'main.yml')) as handle:
        settings.update(yaml.safe_load(handle))
    # A model folder and a draft hub id: the unit requires the folder's mount only.
    settings.update(keys, sglang_term_timeout=45, sglang_service_name='sglang-a', sglang_model_path='/models/m',
                    sglang_draft_model_path='org/draft', sglang_user='sglang', sglang_group='ml')
    settings['sglang_kill_patterns'] = ['sglang::']
    looked_up = run_task(tmp_path, 'ansible.builtin.debug', {'msg': [
        "{{ lookup('ansible.builtin.template', '%s/templates/%s') }}" % (ROLE, name)
        for name in ('sglang.service.j2', 'server_keys.yaml.j2')]}, keywords={'vars': dict(
            settings, launcher='/etc/sglang/launcher.py', launch_file='/etc/sglang/launch.json')})
    templates = {}
    for name in ('sglang.service.j2', 'server_keys.yaml.j2'):
        with open(os.path.join(ROLE, 'templates', name)) as handle:
            templates[name] = handle.read()
    files = dict((entry['label'], entry['content']) for entry in _configs.configs(settings, [], templates))
    assert files['systemd unit'] == looked_up['msg'][0]
    assert 'ExecStart=/usr/bin/python3 /etc/sglang/launcher.py run /etc/sglang/launch.json' in files['systemd unit']
    assert 'RequiresMountsFor=/models/m\n\n[Service]' in files['systemd unit'] and 'org/draft' not in files['systemd unit']
    assert 'User=sglang\nGroup=ml\n' in files['systemd unit']
    assert files.get('API keys', '') == (looked_up['msg'][1] if keys else '')


@pytest.mark.slow
def test_system_folders_are_refused_by_the_plan_before_anything_moves(tmp_path):
    reports = tmp_path / 'reports'
    run = run_playbook(tmp_path, 'playbooks/redeploy.yml', role_play(tmp_path, {
        'sglang_model_path': '/models/m', 'sglang_draft_model_path': '/models/d', 'sglang_report_dir': str(reports),
        'sglang_config_dir': '/etc', 'sglang_run_dir': '/run', 'sglang_log_file': '/var/log/sglang.log',
        'sglang_guard_dir': str(tmp_path / 'guard'), 'sglang_python': '/nonexistent/python'}))
    assert run.rc != 0
    report = json.loads((reports / 'gpu-test.json').read_text())
    assert report['status'] == 'failed'
    assert report['reason'].startswith(
        "nothing was stopped: Plan this host's run (the rollout gate, the variable rules, the server's flags and"
        " files): sglang_config_dir /etc is the system folder /etc; sglang_run_dir /run is the system folder /run;"
        " sglang_log_file's folder /var/log is the system folder /var/log: ")
