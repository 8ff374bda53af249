"""Revisions through real Ansible: sglang_guard records one at each confirmation (state=confirmed, revisions), keeps the
last `kept`, and sglang_revisions lists them (playbooks/revisions.yml too) and refuses a revision the disk would not
hold; a folder another user can write is refused, and a recording that cannot be made never fails the confirmation.

No server runs: the guard arms (its watcher, a detached process, exits at the confirmation) over real files that the
play changes between the arm and the confirmation, as a redeploy's window does."""
import hashlib
import json
import os
import sys

import pytest

from helpers.ansible_run import run_playbook, run_task, run_tasks
from helpers.guarded_files import GuardedFiles
from helpers.simulated import wait_for
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


class Server(GuardedFiles):
    """The files a redeploy changes (a launch configuration, an sglang file) and the guard's arguments over them."""

    def redeploy(self, run_id, worker, mode=0o644, revisions=None):
        """The tasks of one window: arm, change the sglang file, confirm with a revision."""
        return [
            {'name': 'arm %s' % run_id,
             'gpuops.sglang.sglang_guard': self.guard(state='armed', run_id=run_id, deadline=600)},
            {'name': 'patch %s' % run_id,
             'ansible.builtin.copy': {'dest': str(self.worker), 'content': worker, 'mode': '%04o' % mode}},
            {'name': 'confirm %s' % run_id,
             'gpuops.sglang.sglang_guard': self.guard(
                 state='confirmed', run_id=run_id,
                 revisions=revisions or {'kept': 2, 'meta': {'sglang_version': '0.5.23', 'patch_sha256': 'a' * 64,
                                                             'report': {'reasons': ['patch not applied']}}})},
        ]


@pytest.fixture
def server(tmp_path, trusted_dir):  # noqa: F811
    return Server(tmp_path, trusted_dir / 'tiny')


def watchers_gone(guard_dir):
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            try:
                with open('/proc/%s/cmdline' % entry, 'rb') as handle:
                    if str(guard_dir).encode() in handle.read():
                        return False
            except OSError:
                continue
    return True


@pytest.mark.slow
def test_three_confirmed_redeploys_keep_the_last_two_revisions_and_the_listing_and_playbook_show_them(server, tmp_path):
    tasks = (server.redeploy('run-1', '# patched once\n')
             + server.redeploy('run-2', '# patched twice\n', mode=0o600)
             + server.redeploy('run-3', '# patched thrice\n')
             + [{'name': 'list', 'gpuops.sglang.sglang_revisions': {'folder': str(server.guard_dir)}}])
    results = run_tasks(tmp_path, tasks, name='three')
    for task in tasks:
        assert not results[task['name']].failed, (task['name'], results[task['name']].get('msg'))
    first = results['confirm run-1']['revision']
    assert first['recorded'] and first['numbers'] == [1, 2] and first['pruned'] == [] and first['size_bytes'] > 0
    assert first['files'] == [{'path': str(server.worker), 'change': 'modified'}] and first['problem'] == ''
    assert results['confirm run-2']['revision']['numbers'] == [3]
    assert results['confirm run-2']['revision']['pruned'] == [1]
    assert results['confirm run-3']['revision']['pruned'] == [2]
    listed = results['list']
    assert not listed['changed'] and listed['count'] == 2 and listed['latest'] == 4 and listed['problems'] == []
    assert [(entry['number'], entry['run_id'], entry['origin']) for entry in listed['revisions']] == [
        (3, 'run-2', 'redeploy'), (4, 'run-3', 'redeploy')]
    assert listed['revisions'][0]['changed'] == [{'path': str(server.worker), 'change': 'modified'}]
    assert listed['total_bytes'] == sum(entry['size_bytes'] for entry in listed['revisions'])
    # What the undo reads: revision 3's before is revision 2's after, byte for byte, with its mode.
    index = json.loads((server.guard_dir / 'revisions' / '3' / 'revision.json').read_text())
    [entry] = index['files']
    assert entry['before']['sha256'] == sha256(b'# patched once\n') and entry['before']['mode'] == '0644'
    assert entry['after']['sha256'] == sha256(b'# patched twice\n') and entry['after']['mode'] == '0600'
    assert (server.guard_dir / 'revisions' / '3' / 'after' / entry['stored_as']).read_bytes() == b'# patched twice\n'
    assert index['sglang_version'] == '0.5.23' and index['report'] == {'reasons': ['patch not applied']}
    wait_for(lambda: watchers_gone(server.guard_dir), 10, 'the watchers exiting')

    inventory = tmp_path / 'hosts.yml'
    inventory.write_text(json.dumps({'gpu': {'hosts': {'tiny': {
        'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
        'sglang_guard_dir': str(server.guard_dir.parent), 'sglang_service_name': 'tiny'},
        # Sets neither: the role's defaults (roles/sglang/defaults/main.yml) name its folder.
        'plain': {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}}}}))
    shown = run_playbook(tmp_path, 'playbooks/revisions.yml', str(inventory), name='revisions', cmdline='--check')
    assert shown.rc == 0, shown.stdout[-2000:]
    read = {event['event_data']['host']: event['event_data']['res']['invocation']['module_args']['folder']
            for event in shown.events if event.get('event') == 'runner_on_ok'
            and event['event_data'].get('task') == 'Read the revisions (changes nothing)'}
    assert read == {'tiny': str(server.guard_dir), 'plain': '/var/lib/gpuops-sglang/sglang'}, read

    def said(task):
        return [event['event_data']['res'].get('msg') for event in shown.events
                if event.get('event') in ('runner_on_ok', 'runner_item_on_ok') and event['event_data'].get('task') == task
                and 'results' not in event['event_data']['res']]
    [summary] = [line for line in said('Sum it up') if line.startswith('tiny:')]
    assert summary.startswith('tiny: 2 revision(s) (3, 4), the latest 4 of ')
    assert summary.endswith('%d bytes in all' % listed['total_bytes'])
    line = said('Show each revision')[0]
    assert line.startswith('revision 3 (redeploy) ') and ' run run-2, %d bytes: modified %s' % (
        listed['revisions'][0]['size_bytes'], server.worker) in line


@pytest.mark.slow
def test_a_revision_the_disk_would_not_hold_is_refused_before_the_window_and_never_fails_the_confirmation(server,
                                                                                                        tmp_path):
    # A margin above any free space there: the disk cannot hold the revision, without filling it.
    huge = 1024 * 1024 * 1024
    refused = run_task(tmp_path, 'gpuops.sglang.sglang_revisions',
                       {'state': 'checked', 'folder': str(server.guard_dir), 'files': [str(server.worker)],
                        'margin_mib': huge}, name='check')
    assert refused.failed and 'below the margin of %d bytes' % (huge * 1024 * 1024) in refused['msg']
    assert refused['msg'].endswith('nothing was stopped or changed') and refused['space']['free_bytes'] > 0
    fits = run_task(tmp_path, 'gpuops.sglang.sglang_revisions',
                    {'state': 'checked', 'folder': str(server.guard_dir), 'files': [str(server.worker)]}, name='fits')
    assert not fits.failed and fits['space']['problem'] == '' and fits['space']['needed_bytes'] > 0
    results = run_tasks(tmp_path, server.redeploy('run-f', '# new\n', revisions={'kept': 5, 'margin_mib': huge}),
                        name='full')
    confirmed = results['confirm run-f']
    assert not confirmed.failed and confirmed['changed'] and not confirmed['armed']
    assert confirmed['revision']['recorded'] is False and 'below the margin' in confirmed['revision']['problem']
    assert any('no revision was recorded of run run-f' in warning for warning in confirmed.get('warnings', []))
    assert not (server.guard_dir / 'revisions').exists()


@pytest.mark.slow
def test_a_revisions_folder_another_user_can_write_is_refused_and_the_run_stays_confirmed(server, tmp_path):
    run_tasks(tmp_path, server.redeploy('run-a', '# first\n'), name='first')
    os.chmod(str(server.guard_dir / 'revisions'), 0o777)
    listed = run_task(tmp_path, 'gpuops.sglang.sglang_revisions', {'folder': str(server.guard_dir)}, name='list')
    assert listed.failed and 'the revisions folder %s is not safe' % (server.guard_dir / 'revisions') in listed['msg']
    assert 'writable by its group and others (mode 0777)' in listed['msg'] and listed['revisions'] == []
    results = run_tasks(tmp_path, server.redeploy('run-b', '# second\n'), name='second')
    confirmed = results['confirm run-b']
    assert not confirmed.failed and not confirmed['armed'] and confirmed['revision']['recorded'] is False
    assert 'is not safe' in confirmed['revision']['problem']
    assert sorted(os.listdir(str(server.guard_dir / 'revisions'))) == ['1', '2'], 'nothing written to an unsafe folder'


CONFIRM = 'Confirm the new server (the guard is dropped)'


@pytest.mark.slow
def test_the_roles_confirm_step_records_the_run_with_its_version_patch_and_reasons(server, tmp_path):
    """roles/sglang/tasks/confirm.yml as the window runs it, with what the earlier steps registered (the patch step
    skipped, as when the stamp proved the patch applied already)."""
    from helpers.ansible_run import REPO
    role_vars = {
        '_sglang_guard_dir': str(server.guard_dir), '_sglang_run_id': 'run-r', 'sglang_revisions_kept': 5,
        '_sglang_patch': {'skipped': True, 'changed': False},
        '_sglang_decision': {'patch_state': {'sglang_version': '0.5.12.post1'}},
        '_sglang_state': {'sglang_version': '0.5.12'}, '_sglang_plan': {'patch': {'sha256': 'b' * 64}},
        '_sglang_reasons': ['launch configuration changed'], '_sglang_changed_configs': ['launch configuration'],
        '_sglang_patch_due': False}
    tasks = server.redeploy('run-r', '# new\n')[:2] + [
        # Named as its one task, whose result run_tasks finds under that name.
        {'name': CONFIRM, 'ansible.builtin.import_tasks': os.path.join(REPO, 'roles', 'sglang', 'tasks', 'confirm.yml'),
         'vars': role_vars},
        {'name': 'list', 'gpuops.sglang.sglang_revisions': {'folder': str(server.guard_dir)}}]
    results = run_tasks(tmp_path, tasks, name='role')
    assert not results[CONFIRM].failed and results[CONFIRM]['revision']['numbers'] == [1, 2]
    assert not results['list'].failed and results['list']['count'] == 2
    found, run = [json.loads((server.guard_dir / 'revisions' / str(number) / 'revision.json').read_text())
                  for number in (1, 2)]
    assert (found['sglang_version'], run['sglang_version']) == ('0.5.12', '0.5.12.post1')
    assert run['patch_sha256'] == 'b' * 64 and run['run_id'] == 'run-r'
    assert run['report'] == {'reasons': ['launch configuration changed'], 'changed_configs': ['launch configuration'],
                             'patch_due': False, 'host': 'localhost'}
