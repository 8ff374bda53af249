"""A tool that makes redeploys safe must not open doors (issue 28): what the dashboard refuses, hides and
checks, proven without the lab. Hosts are on loopback addresses where nothing listens on ssh (port 1), so a
real run through ansible-runner goes as far as its first connection and ends; HTTP servers are a scripted
responder on 127.0.0.1.
"""
import json
import os
import re
import sqlite3
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ElementTree

import pytest
import yaml

from gpuops_dashboard import __main__ as main_module
from gpuops_dashboard import extra_vars, inventory as host_inventory, performance, redeploy, store, timeline
from gpuops_dashboard.app import RedeployRequest, host_allowed
from helpers.dashboard_http import post

# The token tests/dashboard/conftest.py gives the apps it serves.
TOKEN = 'test-token'

# The collection's files/: the patch folder of a dashboard given none.
FILES = os.path.realpath(os.path.join(redeploy.REPO, 'files'))

# A value that runs a command wherever Ansible templates it.
MARK_NAME = 'templated-and-ran'
# It reads the dynamic-speculation variable, as the role's env mode requires of a patch (issue 43).
PATCH = ('--- a/sglang/x.py\n+++ b/sglang/x.py\n@@ -1 +1 @@\n-a\n'
         '+b = os.environ.get("SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE")\n')


def lookup(mark):
    return "{{ lookup('pipe', 'touch %s; echo 0') }}" % mark


def write_inventory(folder, hosts):
    os.makedirs(folder)
    with open(os.path.join(folder, 'hosts.yml'), 'w') as handle:
        yaml.safe_dump({'all': {'children': {'gpu': {'hosts': hosts}}}}, handle)
    return folder


# gpu9 as a production inventory has it; gpu8 turns host key checking off itself, as inventory/lab does.
UNREACHABLE = {
    'gpu9': {'ansible_host': '127.0.0.1', 'ansible_port': 1, 'sglang_model_path': '/models/m',
             'sglang_draft_model_path': '/models/d'},
    'gpu8': {'ansible_host': '127.0.0.2', 'ansible_port': 1, 'sglang_model_path': '/models/m',
             'sglang_draft_model_path': '/models/d', 'ansible_host_key_checking': False,
             'ansible_ssh_common_args': '-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null'},
}


def request(url, headers=None, method='GET'):
    """(status, body text, headers) of a request with the given headers, also for 4xx answers."""
    call = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(call, timeout=30) as response:
            return response.status, response.read().decode(), response.headers
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), error.headers


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def every_file(folder):
    for root, folders, files in os.walk(folder):
        for name in folders + files:
            yield os.path.join(root, name)


@pytest.fixture(scope='module')
def real_run(tmp_path_factory):
    """One real redeploy through the dashboard's path (create_app, POST, ansible-runner, ansible-playbook),
    the token in the dashboard process's environment, extra variables that would run commands if templated,
    ansible-playbook at -vvv so that its ssh command lines are in the artifacts."""
    base = tmp_path_factory.mktemp('trust')
    inventory = write_inventory(str(base / 'inventory'), UNREACHABLE)
    state = str(base / 'state')
    patches = base / 'patches'
    patches.mkdir()
    (patches / 'threshold.diff').write_text(PATCH)
    saved, umask = dict(os.environ), os.umask(0o022)
    os.environ.update(DASHBOARD_TOKEN=TOKEN, ANSIBLE_VERBOSITY='3')
    body = {'extra_vars': {'sglang_patch_file': os.path.join(str(patches), '..', 'patches', 'threshold.diff'),
                           'sglang_model_path': lookup(base / MARK_NAME),
                           'sglang_dynamic_spec_adaptive_config': {'K': lookup(base / (MARK_NAME + '-config'))},
                           'sglang_draft_model_path': lookup(base / (MARK_NAME + '-arg')),
                           # Both hosts at once: by default a canary of one goes first and its failure (both are
                           # unreachable) stops the rollout before the other is tried.
                           'redeploy_serial': '100%', 'redeploy_canary': 0}}
    try:
        app, args, source = main_module.build(['--inventory', inventory, '--state-dir', state, '--port', '1',
                                               '--patch-dir', str(patches)])
        assert source == 'DASHBOARD_TOKEN' and 'DASHBOARD_TOKEN' not in os.environ
        dashboard = app.state.dashboard
        # What POST /api/redeploys does once the token is checked: the request model's checks, then start.
        run_id = dashboard.start(RedeployRequest(**body))
        run = dashboard.active[run_id]
        assert run.wait(180) in redeploy.FINAL_STATES
        for _ in range(600):  # _finish stores the outcome right after the run ends
            if dashboard.store.run(run_id)['status'] != 'running':
                break
            time.sleep(0.05)
        assert dashboard.store.run(run_id)['status'] in redeploy.FINAL_STATES
    finally:
        os.environ.clear()
        os.environ.update(saved)
        os.umask(umask)
    yield {'base': base, 'state': state, 'run': run, 'run_id': run_id, 'dashboard': dashboard, 'body': body,
           'patch': str(patches / 'threshold.diff')}
    dashboard.store.close()


def ssh_commands(run, address):
    text = ''.join(open(path, errors='replace').read() for path in every_file(run.private_data_dir)
                   if os.path.isfile(path) and os.path.basename(path) == 'stdout')
    return [line for line in text.splitlines() if '<%s> SSH: EXEC ssh ' % address in line]


# -- 1. host keys ----------------------------------------------------------------------------------------

def test_a_dashboard_run_checks_host_keys_unless_the_inventory_turns_it_off(real_run):
    checked = ssh_commands(real_run['run'], '127.0.0.1')
    assert checked, 'the run never tried ssh to gpu9'
    assert not [line for line in checked if 'StrictHostKeyChecking=no' in line], checked[0]
    # An inventory that turns it off for its own hosts (inventory/lab's way) still can.
    lab_like = ssh_commands(real_run['run'], '127.0.0.2')
    assert lab_like and all('StrictHostKeyChecking=no' in line for line in lab_like)


def test_the_environment_handed_to_ansible_runner_asks_for_host_key_checking():
    assert redeploy.ansible_environment()['ANSIBLE_HOST_KEY_CHECKING'] == 'True'


# -- 2. extra variables -----------------------------------------------------------------------------------

def test_extra_variables_reach_the_play_as_literal_strings_and_run_nothing(real_run):
    base = real_run['base']
    # The role validated its arguments (every variable read) before the run stopped at gpu9's ssh.
    tasks = [record.get('task') or '' for record in real_run['run'].records()]
    assert any(task.startswith('Validating arguments against arg spec') for task in tasks), tasks
    assert not [name for name in os.listdir(str(base)) if name.startswith(MARK_NAME)]


def test_the_extra_vars_file_tags_every_string_unsafe_and_ansible_keeps_it_literal(tmp_path):
    mark = tmp_path / MARK_NAME
    values = {'sglang_model_path': lookup(mark), 'sglang_dynamic_spec_adaptive_config': {'K{{ 1 }}': lookup(mark)},
              'sglang_extra_args': [lookup(mark)], 'redeploy_canary': 1, 'sglang_force_restart': True}
    path = extra_vars.write_unsafe(str(tmp_path / 'env' / 'extravars'), values)
    assert mode(path) == 0o600 and mode(str(tmp_path / 'env')) == 0o700
    shown_path = tmp_path / 'shown.json'
    playbook = tmp_path / 'show.yml'
    playbook.write_text('- hosts: localhost\n  gather_facts: false\n  tasks:\n'
                        '    - ansible.builtin.copy:\n        dest: %s\n        content: "{{ {\'model\': sglang_model_path, '
                        '\'config\': sglang_dynamic_spec_adaptive_config, \'args\': sglang_extra_args, \'canary\': redeploy_canary + 1, '
                        '\'force\': sglang_force_restart} | to_json }}"\n' % shown_path)
    (tmp_path / 'ansible.cfg').write_text('[defaults]\n')
    env = dict(os.environ, ANSIBLE_CONFIG=str(tmp_path / 'ansible.cfg'), ANSIBLE_PYTHON_INTERPRETER=sys.executable,
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ['PATH'])
    run = subprocess.run(['ansible-playbook', '-i', 'localhost,', '-c', 'local', str(playbook), '-e', '@' + path],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout[-2000:]
    shown = json.loads(shown_path.read_text())
    assert shown == {'model': lookup(mark), 'config': {'K{{ 1 }}': lookup(mark)}, 'args': [lookup(mark)],
                     'canary': 2, 'force': True}
    assert not mark.exists()


@pytest.mark.parametrize('extra, key', [
    ({'redeploy_canary': lookup('/tmp/x')}, 'redeploy_canary'),
    ({'redeploy_canary': 'x'}, 'redeploy_canary'),
    ({'ansible_connection': 'local'}, 'ansible_connection'),
    ({'ansible_ssh_common_args': '-o ProxyCommand=id'}, 'ansible_ssh_common_args'),
    ({'ansible_python_interpreter': '/bin/sh'}, 'ansible_python_interpreter'),
    ({'sglang_froce_restart': True}, 'sglang_froce_restart'),
    ({'sglang_force_restart': 'yes'}, 'sglang_force_restart'),
    ({'sglang_port': True}, 'sglang_port'),
    ({'sglang_dynamic_spec_mode': 'sometimes'}, 'sglang_dynamic_spec_mode'),
    ({'sglang_perf_levels': [1, 'x']}, 'sglang_perf_levels[1]'),
    ({'sglang_dynamic_spec_adaptive_config': {'A': {'b': {'c': {'d': [1]}}}}},
     'sglang_dynamic_spec_adaptive_config.A.b.c.d'),
    ({'sglang_dynamic_spec_adaptive_config': {'1': {'candidate_steps': [float('nan')]}}},
     'sglang_dynamic_spec_adaptive_config.1.candidate_steps[0]'),
    # NaN and infinity compare false with every bound: they would pass a maximum and turn a gate off.
    ({'redeploy_max_fail_percentage': float('nan')}, 'redeploy_max_fail_percentage'),
    ({'sglang_perf_throughput_tolerance': float('inf')}, 'sglang_perf_throughput_tolerance'),
    ({'sglang_report_dir': '/etc/cron.d'}, 'sglang_report_dir'),
    ({'sglang_router_url': 'http://elsewhere:1'}, 'sglang_router_url'),
    ({'redeploy_serial': '0'}, 'redeploy_serial'),
    ({'redeploy_max_fail_percentage': 101}, 'redeploy_max_fail_percentage'),
    # Seconds or auto, nothing else (its argument spec's type is raw).
    ({'sglang_rollback_deadline': 'soon'}, 'sglang_rollback_deadline'),
    ({'sglang_rollback_deadline': 0}, 'sglang_rollback_deadline'),
    ({'sglang_rollback_deadline': float('nan')}, 'sglang_rollback_deadline'),
    ({'sglang_rollback_deadline': [1]}, 'sglang_rollback_deadline'),
    # The hosts' history is the inventory's: a request setting 2 would prune every older revision at its confirmation.
    ({'sglang_revisions_kept': 2}, 'sglang_revisions_kept'),
])
def test_an_extra_variable_that_is_not_documented_or_of_the_wrong_type_is_refused_by_name(extra, key):
    with pytest.raises(extra_vars.InvalidExtraVars) as refused:
        extra_vars.validate(extra)
    assert refused.value.key == key and str(refused.value).startswith('extra_vars.%s: ' % key)


def test_every_variable_a_request_may_set_has_a_type_the_dashboard_checks():
    # A new variable of the role of type raw (or any type the dashboard does not know) needs its kind in
    # extra_vars.RAW_VARIABLES: otherwise every request naming it is refused.
    kinds = dict((name, spec.get('type', 'str')) for name, spec in extra_vars.allowed_variables().items())
    assert dict((name, kind) for name, kind in kinds.items() if kind not in extra_vars._KINDS) == {}


def test_documented_variables_of_the_role_and_the_playbook_are_taken():
    given = {'sglang_force_restart': True, 'sglang_rollback_deadline': 25, 'sglang_term_timeout': 2.5,
             'sglang_max_running_requests': 96, 'sglang_patch_file': '/srv/p.diff',
             'sglang_dynamic_spec_adaptive_config': {'1': {'candidate_steps': [1, 3]}, '8': {'candidate_steps': [0]}}, 'redeploy_serial': '50%', 'redeploy_canary': 1,
             'redeploy_max_fail_percentage': 0, 'redeploy_max_unavailable': 2, 'sglang_dynamic_spec_mode': 'env'}
    assert extra_vars.validate(given) == given
    assert extra_vars.validate({'sglang_rollback_deadline': 'auto'}) == {'sglang_rollback_deadline': 'auto'}
    # The allow-list is the role's argument_specs.yml: a variable documented there is known here.
    assert set(extra_vars.role_variables()) - set(extra_vars.PINNED) <= set(extra_vars.allowed_variables())


@pytest.mark.parametrize('extra, key', [
    ({'redeploy_canary': lookup('/tmp/x')}, 'redeploy_canary'),
    ({'ansible_connection': 'local'}, 'ansible_connection'),
    ({'redeploy_canary': 'x'}, 'redeploy_canary'),
    ({'sglang_python': '/bin/sh'}, 'sglang_python'),
    ({'sglang_environment': {'LD_PRELOAD': '/tmp/evil.so'}}, 'sglang_environment'),
    ({'sglang_kill_patterns': ['sshd']}, 'sglang_kill_patterns'),
    ({'sglang_patch_file': '/root/.ssh/id_ed25519'}, 'sglang_patch_file'),
])
def test_the_api_answers_422_naming_the_refused_key_and_starts_nothing(dashboard_offline, extra, key):
    status, body, _ = post(dashboard_offline.url + '/api/redeploys', TOKEN, {'extra_vars': extra})
    assert status == 422
    assert any(('extra_vars.%s: ' % key) in problem['msg'] for problem in body['detail']), body
    # The refusal does not echo the values back.
    assert 'input' not in json.dumps(body)
    assert json.loads(request(dashboard_offline.url + '/api/redeploys')[1])['redeploys'] == []


# The plan's own table: the dashboard holds no copy of a number (_timing.TIME_BOUNDS).
TIME_BOUNDS = extra_vars.TIME_BOUNDS
COUNT_BOUNDS = extra_vars.COUNT_BOUNDS


@pytest.mark.parametrize('name', sorted(TIME_BOUNDS))
def test_a_time_bound_out_of_its_range_is_refused_naming_the_range(name):
    bound = TIME_BOUNDS[name]
    for given in (1e12, bound.most + 1, bound.least - 1):
        with pytest.raises(extra_vars.InvalidExtraVars) as refused:
            extra_vars.validate({name: given})
        assert str(refused.value).startswith('extra_vars.%s: must be %s' % (name, bound.words())), refused.value
        assert refused.value.key == name and bound.why in str(refused.value)
    assert extra_vars.validate({name: bound.most}) == {name: bound.most}
    if not bound.least_allowed:
        with pytest.raises(extra_vars.InvalidExtraVars):
            extra_vars.validate({name: bound.least})


@pytest.mark.parametrize('extra', [{'sglang_rollback_idle': 1e12}, {'sglang_rollback_deadline': 1e12},
                                   {'sglang_rollback_deadline': 10 ** 12}, {'sglang_canary_bake': 86401}],
                         ids=['idle', 'deadline', 'deadline-int', 'bake'])
def test_the_api_answers_422_for_a_time_bound_out_of_its_range_and_starts_nothing(dashboard_offline, extra):
    name = next(iter(extra))
    status, body, _ = post(dashboard_offline.url + '/api/redeploys', TOKEN, {'extra_vars': extra})
    assert status == 422
    assert any('extra_vars.%s: must be %s' % (name, TIME_BOUNDS[name].words()) in problem['msg']
               for problem in body['detail']), body
    assert json.loads(request(dashboard_offline.url + '/api/redeploys')[1])['redeploys'] == []


def test_a_list_that_multiplies_time_is_held_to_its_count_from_the_plans_table(dashboard_offline):
    count = COUNT_BOUNDS['sglang_perf_levels']
    assert extra_vars.validate({'sglang_perf_levels': list(range(1, count.most + 1))})
    status, body, _ = post(dashboard_offline.url + '/api/redeploys', TOKEN,
                           {'extra_vars': {'sglang_perf_levels': [1] * 2000}})
    assert status == 422
    assert any('extra_vars.sglang_perf_levels: must have %s, not 2000' % count.words() in problem['msg']
               for problem in body['detail']), body
    assert json.loads(request(dashboard_offline.url + '/api/redeploys')[1])['redeploys'] == []


@pytest.mark.parametrize('patch', ['/root/.ssh/id_ed25519', os.path.join(FILES, '..', 'README.md'),
                                   'eagle_dynamic_spec_threshold.diff', FILES])
def test_a_patch_outside_the_patch_folders_is_refused_naming_them_and_starts_nothing(dashboard_offline, patch):
    status, body, _ = post(dashboard_offline.url + '/api/redeploys', TOKEN, {'extra_vars': {'sglang_patch_file': patch}})
    assert status == 422
    assert any(problem['msg'].startswith('extra_vars.sglang_patch_file: ') and FILES in problem['msg']
               for problem in body['detail']), body
    assert json.loads(request(dashboard_offline.url + '/api/redeploys')[1])['redeploys'] == []


def test_the_patch_folders_come_from_patch_dir_and_dashboard_patch_dirs(tmp_path, monkeypatch):
    monkeypatch.setattr(os, 'umask', lambda mask: 0o022)  # the test process keeps its own umask
    monkeypatch.delenv('DASHBOARD_PATCH_DIRS', raising=False)
    folders = [tmp_path / name for name in ('a', 'b', 'c')]
    for folder in folders:
        folder.mkdir()
    (tmp_path / 'link').symlink_to(folders[2])
    cases = [([], None, (FILES,)),
             ([], '%s:%s' % tuple(folders[:2]), tuple(str(folder) for folder in folders[:2])),
             (['--patch-dir', str(tmp_path / 'link')], str(folders[0]), (str(folders[0]), str(folders[2])))]
    for index, (options, environment, wanted) in enumerate(cases):
        monkeypatch.setenv('DASHBOARD_TOKEN', TOKEN)
        if environment is not None:
            monkeypatch.setenv('DASHBOARD_PATCH_DIRS', environment)
        app, _, _ = main_module.build(['--state-dir', str(tmp_path / ('state%d' % index)), '--port', '1'] + options)
        assert app.state.dashboard.patch_dirs == wanted
        app.state.dashboard.store.close()


def test_a_patch_dir_that_is_not_a_folder_stops_the_dashboard_before_it_makes_anything(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        main_module.build(['--state-dir', str(tmp_path / 'state'), '--patch-dir', str(tmp_path / 'missing')])
    assert stopped.value.code == 2
    assert 'patch folder %s is not a folder' % (tmp_path / 'missing') in capsys.readouterr().err
    assert not (tmp_path / 'state').exists()


# -- 3. secrets -------------------------------------------------------------------------------------------

def test_a_runs_description_shows_its_values_as_ansible_got_them(real_run, serve):
    served = serve(state_dir=real_run['state'], inventory='inventory/lab')
    status, text, _ = request('%s/api/redeploys/%s' % (served.url, real_run['run_id']))
    assert status == 200
    shown = json.loads(text)['extra_vars']
    given = real_run['body']['extra_vars']
    # The patch as the run read it: resolved (the request's ".." gone), inside the --patch-dir folder.
    assert shown == dict(given, sglang_patch_file=real_run['patch'])
    assert given['sglang_patch_file'] != real_run['patch']


@pytest.mark.parametrize('key', ['sglang_api_key', 'sglang_admin_api_key', 'sglang_router_api_key',
                                 'sglang_secret_environment'])
def test_keys_and_secrets_cannot_be_sent_so_no_history_holds_one(dashboard_offline, key):
    value = {'HF_TOKEN': 'the-hf-token'} if key == 'sglang_secret_environment' else 'the-key'
    status, body, _ = post(dashboard_offline.url + '/api/redeploys', TOKEN, {'extra_vars': {key: value}})
    assert status == 422
    assert any(('extra_vars.%s: is set by the inventory only' % key) in problem['msg']
               for problem in body['detail']), body
    assert 'the-hf-token' not in json.dumps(body) and 'the-key' not in json.dumps(body)
    assert json.loads(request(dashboard_offline.url + '/api/redeploys')[1])['redeploys'] == []


def test_the_state_is_0600_files_in_0700_folders_and_never_holds_the_token(real_run):
    state = real_run['state']
    paths = [state] + list(every_file(state))
    assert os.path.exists(os.path.join(state, 'dashboard.sqlite3-wal'))
    for path in paths:
        if os.path.islink(path):
            continue
        wanted = 0o700 if os.path.isdir(path) else 0o600
        # The folders ansible-runner makes and the files it writes inherit the process's umask (077).
        assert mode(path) & 0o077 == 0, '%s is %o' % (path, mode(path))
        if os.path.basename(path) in ('dashboard.sqlite3', 'dashboard.sqlite3-wal', 'request.json', 'runs'):
            assert mode(path) == wanted, '%s is %o' % (path, mode(path))
    # The extra variables file is gone once the run ended; nothing left holds the token.
    assert not os.path.exists(os.path.join(real_run['run'].private_data_dir, 'env', 'extravars'))
    for path in paths:
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, 'rb') as handle:
                content = handle.read()
            assert TOKEN.encode() not in content, '%s holds the token' % path


def test_the_run_was_handed_neither_the_token_nor_the_extra_variables_on_its_command_line(real_run):
    commands = [path for path in every_file(real_run['run'].private_data_dir) if os.path.basename(path) == 'command']
    assert commands
    with open(commands[0]) as handle:
        command = json.load(handle)
    assert TOKEN not in json.dumps(command) and 'DASHBOARD_TOKEN' not in command['env']
    assert command['env']['ANSIBLE_HOST_KEY_CHECKING'] == 'True'
    assert '@%s' % os.path.join(real_run['run'].private_data_dir, 'env', 'extravars') in command['command']
    assert 'sglang_model_path' not in json.dumps(command['command'])


def test_a_generated_token_goes_to_a_0600_file_and_is_never_printed(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv('DASHBOARD_TOKEN', raising=False)
    monkeypatch.setattr(os, 'umask', lambda mask: 0o022)  # the test process keeps its own umask
    app, args, source = main_module.build(['--state-dir', str(tmp_path / 'state'), '--port', '1'])
    assert source == str(tmp_path / 'state' / 'token') and mode(source) == 0o600
    token = open(source).read().strip()
    assert len(token) >= 24 and app.state.dashboard.token == token
    assert mode(str(tmp_path / 'state')) == 0o700 and mode(str(tmp_path / 'state' / 'runs')) == 0o700
    assert token not in capsys.readouterr().out
    app.state.dashboard.store.close()


def test_an_older_dashboards_history_is_closed_and_redacted(tmp_path):
    path = str(tmp_path / 'dashboard.sqlite3')
    old = sqlite3.connect(path)
    old.executescript(store._SCHEMA)
    old.execute("INSERT INTO runs (id, created_at, status, inventory, extra_vars) VALUES ('r', 1, 'successful', "
                "'inventory/lab', ?)", (json.dumps({'sglang_api_key': 'clear', 'sglang_port': 1}),))
    old.commit()
    old.close()
    os.chmod(path, 0o644)
    reopened = store.Store(path)
    assert mode(path) == 0o600
    assert reopened.run('r')['extra_vars'] == {'sglang_api_key': extra_vars.REDACTED, 'sglang_port': 1}
    reopened.close()


def test_redaction_covers_key_password_and_token_names_but_not_a_token_count():
    shown = extra_vars.redact({'sglang_api_key': 'a', 'sglang_router_api_key': 'b', 'sglang_admin_api_key': '',
                               'sglang_environment': {'HF_TOKEN': 'c', 'DB_PASSWORD': 'd', 'LOG': 'info'},
                               'sglang_perf_max_new_tokens': 64})
    assert shown == {'sglang_api_key': '<redacted>', 'sglang_router_api_key': '<redacted>',
                     'sglang_admin_api_key': '', 'sglang_environment': {'HF_TOKEN': '<redacted>',
                                                                        'DB_PASSWORD': '<redacted>', 'LOG': 'info'},
                     'sglang_perf_max_new_tokens': 64}


# -- 4. Host header ---------------------------------------------------------------------------------------

def test_a_request_for_another_host_name_is_refused(dashboard_offline):
    port = dashboard_offline.url.rsplit(':', 1)[1]
    for host in ('evil.example:%s' % port, 'evil.example', '127.0.0.1.evil.example:%s' % port):
        status, text, _ = request(dashboard_offline.url + '/api/redeploys', {'Host': host})
        assert status == 400 and 'does not answer to Host' in text, host
    for host in ('127.0.0.1:%s' % port, 'localhost:%s' % port, 'LOCALHOST:%s' % port):
        assert request(dashboard_offline.url + '/api/redeploys', {'Host': host})[0] == 200, host


def test_the_allowed_host_names_are_configurable_and_pin_the_port(serve):
    served = serve(allowed_hosts=['dash.internal', '127.0.0.1'])
    assert request(served.url + '/api/redeploys', {'Host': 'dash.internal'})[0] == 200
    assert request(served.url + '/api/redeploys', {'Host': 'localhost'})[0] == 400
    allowed = main_module.allowed_hosts(8765, ['dash.internal:443, other'])
    assert host_allowed('127.0.0.1:8765', allowed) and host_allowed('[::1]:8765', allowed)
    assert host_allowed('dash.internal:443', allowed) and host_allowed('other:1', allowed)
    assert not host_allowed('127.0.0.1:8766', allowed) and not host_allowed('dash.internal', allowed)
    assert not host_allowed('', allowed) and not host_allowed(None, allowed)


# -- 5. markup --------------------------------------------------------------------------------------------

EVIL = 'evil" onmouseover="alert(1)" x="'


def test_a_host_name_cannot_add_attributes_to_the_timeline():
    records = [{'seq': 1, 'kind': 'task', 'host': EVIL, 'task': 'Apply the patch', 'phase': 'patch',
                'state': 'started', 'at': '2026-12-01T10:00:00'},
               {'seq': 2, 'kind': 'task', 'host': EVIL, 'task': 'Apply the patch', 'phase': 'patch',
                'state': 'failed', 'at': '2026-12-01T10:00:01', 'msg': '"><script>alert(2)</script>'}]
    svg = timeline.render(records, {EVIL: {'status': 'failed" onclick="x', 'reason': '<b>'}}, title=EVIL)
    root = ElementTree.fromstring(svg)
    groups = [node for node in root.iter() if node.get('class') == 'host']
    assert [group.get('data-host') for group in groups] == [EVIL]
    assert not [node for node in root.iter() if any(name.startswith('on') for name in node.attrib)]
    assert '<script' not in svg


def test_a_host_name_cannot_add_attributes_to_the_performance_chart():
    block = {'verdict': 'fail" onload="x', 'reason': 'r', 'levels': [{'concurrency': 1, 'before': {}, 'after': {}}]}
    root = ElementTree.fromstring(performance.render({EVIL: {'performance': block}}, title=EVIL))
    panels = [node for node in root.iter() if node.get('class') == 'host-performance']
    assert [(panel.get('data-host'), panel.get('data-verdict')) for panel in panels] == [(EVIL, block['verdict'])]
    assert not [node for node in root.iter() if any(name.startswith('on') for name in node.attrib)]


def test_the_page_runs_no_inline_script_and_says_so_in_its_policy(dashboard_offline):
    status, page, headers = request(dashboard_offline.url + '/')
    assert status == 200 and "script-src 'self'" in headers['Content-Security-Policy']
    assert headers['X-Content-Type-Options'] == 'nosniff'
    assert re.findall(r'<script[^>]*>[^<]*', page) == ['<script src="/static/app.js">']
    assert not re.search(r'\son[a-z]+=', page)
    script = request(dashboard_offline.url + '/static/app.js')[1]
    assert 'innerHTML' not in script and 'svgNode(' in script


# -- 6. addresses and keys --------------------------------------------------------------------------------

def test_hosts_that_listen_on_every_address_are_asked_at_their_inventory_address():
    hosts = host_inventory.resolve_hosts('inventory/example')
    assert sorted(hosts) == ['gpu-metal-01.example.internal', 'sglang-01.example.internal',
                             'sglang-02.example.internal']
    assert [hosts[name]['address'] for name in sorted(hosts)] == sorted(hosts)
    # inventory/example's key comes from a vault variable the dashboard has no password for: still a key.
    assert [variables['has_api_key'] for variables in hosts.values()] == [True] * 3


def test_the_dashboard_resolves_whether_a_server_has_a_key_never_the_key(tmp_path):
    folder = write_inventory(str(tmp_path / 'inventory'), {
        'keyed': {'ansible_host': '127.0.0.1', 'sglang_api_key': 'k1-secret'},
        'empty': {'ansible_host': '127.0.0.1', 'sglang_api_key': ''},
        'none': {'ansible_host': '127.0.0.1'},
        'vaulted': {'ansible_host': '127.0.0.1', 'sglang_api_key': '{{ vault_missing }}'}})
    hosts = host_inventory.resolve_hosts(folder)
    assert {name: variables['has_api_key'] for name, variables in hosts.items()} == {
        'empty': False, 'keyed': True, 'none': False, 'vaulted': True}
    assert 'k1-secret' not in json.dumps(hosts) and not [name for variables in hosts.values()
                                                         for name in variables if 'key' in name and name != 'has_api_key']


# -- 7. smaller doors -------------------------------------------------------------------------------------

@pytest.mark.parametrize('limit', ['', '   ', '@/etc/shadow', 'gpu1\n'])
def test_an_empty_or_file_limit_is_refused(dashboard_offline, limit):
    status, body, _ = post(dashboard_offline.url + '/api/redeploys', TOKEN, {'limit': limit})
    assert status == 422 and 'limit' in json.dumps(body)
    assert json.loads(request(dashboard_offline.url + '/api/redeploys')[1])['redeploys'] == []


@pytest.mark.parametrize('limit', ['gpu2,@/etc/hostname', 'gpu2:@/etc/hostname', ' gpu1 , @x', 'gpu2:&@x'])
def test_a_file_anywhere_in_the_limit_is_refused_naming_the_rule(dashboard_offline, limit):
    # ansible-playbook reads an @FILE item wherever it stands and prints the file's first line in its warning.
    status, body, _ = post(dashboard_offline.url + '/api/redeploys', TOKEN, {'limit': limit})
    assert status == 422
    assert any(problem['loc'] == ['body', 'limit'] and 'no "@" anywhere in it' in problem['msg']
               for problem in body['detail']), body
    assert json.loads(request(dashboard_offline.url + '/api/redeploys')[1])['redeploys'] == []


@pytest.mark.parametrize('query', ['limit=99999999999999999999', 'limit=-1', 'limit=0', 'limit=abc',
                                   'limit=100000'])
def test_the_history_limit_is_bounded(dashboard_offline, query):
    status, text, _ = request(dashboard_offline.url + '/api/redeploys?' + query)
    assert status == 400 and 'limit must be a whole number from 1 to 200' in text


def test_a_bad_last_event_id_is_a_400_not_a_500(serve):
    served = serve()
    stored = store.Store(os.path.join(served.state_dir, 'dashboard.sqlite3'))
    stored.add_run('done', 'inventory/lab', None, {}, 1.0)
    stored.add_record('done', {'seq': 1, 'kind': 'play'})
    stored.finish_run('done', 'successful', 2.0, {})
    stored.close()
    url = served.url + '/api/redeploys/done/events'
    for headers, query in (({'Last-Event-ID': 'abc'}, ''), ({'Last-Event-ID': '99999999999999999999'}, ''),
                           ({}, '?after=-5'), ({}, '?after=x')):
        status, text, _ = request(url + query, headers)
        assert status == 400, (headers, query, status, text)
    status, text, _ = request(url, {'Last-Event-ID': '0'})
    assert status == 200 and 'event: end' in text


def test_rereading_the_inventory_needs_the_token(dashboard_offline):
    status, _, headers = request(dashboard_offline.url + '/api/hosts?refresh=true')
    assert status == 401 and headers['WWW-Authenticate'] == 'Bearer'
    status, _, _ = request(dashboard_offline.url + '/api/hosts?refresh=true', {'Authorization': 'Bearer wrong'})
    assert status == 401


def test_extra_variables_a_killed_dashboard_left_are_removed_at_the_next_start(serve, tmp_path):
    state = str(tmp_path / 'state')
    leftover = os.path.join(state, 'runs', 'cut-short', 'env', 'extravars')
    extra_vars.write_unsafe(leftover, {'sglang_api_key': 'the-api-key'})
    serve(state_dir=state)
    assert not os.path.exists(leftover)
