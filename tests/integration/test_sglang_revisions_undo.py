"""The undo through real Ansible (sglang_revisions state=planned and state=restored, issue 46 item 2): two confirmed
redeploys record revisions 1 to 3 of a server's files; an undo to revision 1 under an armed guard puts every file
back byte for byte with its mode, and the confirmation records it as revision 4, which can itself be undone. Check
mode writes nothing; a revision not kept and a file changed by hand are refused, naming why.

No server runs: the guard arms (its watcher exits at the confirmation) over real files, as the window does."""
import hashlib
import os

import pytest
import yaml

from helpers.ansible_run import run_task, run_tasks
from helpers.guarded_files import GuardedFiles
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture)

MODULE = 'gpuops.sglang.sglang_revisions'


class Server(GuardedFiles):
    """A launch configuration and an sglang file, and the guard's tasks of a window over them."""

    def __init__(self, tmp_path, guard_dir):
        super().__init__(tmp_path, guard_dir, launch_mode=0o640)

    def window(self, run_id, change, **meta):
        """Arm, the window's change (a task), confirm with a revision (its index saying `meta`)."""
        return [{'name': 'arm %s' % run_id, 'gpuops.sglang.sglang_guard': self.guard(state='armed', run_id=run_id,
                                                                                      deadline=600)},
                dict(change, name='change %s' % run_id),
                {'name': 'confirm %s' % run_id, 'gpuops.sglang.sglang_guard': self.guard(
                    state='confirmed', run_id=run_id, revisions={'kept': 5, 'meta': meta})}]

    def undo(self, run_id, to=None, **meta):
        args = {'state': 'restored', 'folder': str(self.guard_dir),
                'guard': {'folder': str(self.guard_dir), 'run_id': run_id}}
        if to is not None:
            args['to'] = to
        return self.window(run_id, {MODULE: args}, **meta)


@pytest.fixture
def server(tmp_path, trusted_dir):  # noqa: F811
    found = Server(tmp_path, trusted_dir / 'tiny')
    tasks = (found.window('run-2', {'ansible.builtin.copy': {'dest': str(found.worker), 'content': '# patched\n',
                                                             'mode': '0600'}})
             + found.window('run-3', {'ansible.builtin.copy': {'dest': str(found.launch), 'content': '{"other": 48}',
                                                               'mode': '0640'}}))
    results = run_tasks(tmp_path, tasks, name='history')
    assert not any(result.failed for result in results.values()), results
    assert results['confirm run-3']['revision']['numbers'] == [3]
    return found


def state(path):
    return path.read_bytes(), os.stat(str(path)).st_mode & 0o7777


@pytest.mark.slow
def test_an_undo_to_revision_1_under_the_guard_restores_every_file_and_is_recorded_as_revision_4(server, tmp_path):
    planned = run_task(tmp_path, MODULE, {'state': 'planned', 'folder': str(server.guard_dir), 'to': 1}, name='plan')
    assert not planned.failed and not planned['changed'], planned.get('msg')
    assert planned['undo']['target'] == 1 and planned['undo']['latest'] == 3 and not planned['undo']['written']
    assert sorted(planned['undo']['guard_files']) == sorted([str(server.launch), str(server.worker)])
    assert {(item['path'], item['source']) for item in planned['undo']['files']} == {
        (str(server.launch), 3), (str(server.worker), 2)}

    checked = run_task(tmp_path, MODULE, {'state': 'restored', 'folder': str(server.guard_dir), 'to': 1},
                       check=True, name='check')
    assert not checked.failed and not checked['undo']['written'] and len(checked['undo']['files']) == 2
    assert state(server.worker) == (b'# patched\n', 0o600), 'check mode wrote nothing'

    results = run_tasks(tmp_path, server.undo('run-4', to=1), name='undo')
    restored = results['change run-4']
    assert not restored.failed and restored['changed'] and restored['undo']['written'], restored.get('msg')
    assert state(server.worker) == (b'# as found\n', 0o644)
    assert state(server.launch) == (server.found_launch, 0o640)
    confirmed = results['confirm run-4']['revision']
    assert confirmed['numbers'] == [4] and {item['path'] for item in confirmed['files']} == {
        str(server.launch), str(server.worker)}

    # The undo is a revision like any: undone in turn (the default, the one before the latest), revision 3 is back.
    again = run_tasks(tmp_path, server.undo('run-5'), name='redo')
    assert not again['change run-5'].failed and again['change run-5']['undo']['target'] == 3
    assert state(server.worker) == (b'# patched\n', 0o600) and state(server.launch)[0] == b'{"other": 48}'
    listed = run_task(tmp_path, MODULE, {'folder': str(server.guard_dir)}, name='list')
    assert [entry['number'] for entry in listed['revisions']] == [1, 2, 3, 4, 5]


@pytest.mark.slow
def test_an_undo_to_a_revision_not_kept_or_over_a_file_changed_by_hand_is_refused_naming_why(server, tmp_path):
    beyond = run_task(tmp_path, MODULE, {'state': 'restored', 'folder': str(server.guard_dir), 'to': 7}, name='beyond')
    assert beyond.failed and 'revision 7 is not kept (beyond the latest): the revisions kept are 1, 2, 3' in beyond['msg']
    server.worker.write_bytes(b'# hot fix by hand\n')
    by_hand = run_task(tmp_path, MODULE, {'state': 'restored', 'folder': str(server.guard_dir), 'to': 1}, name='hand')
    assert by_hand.failed and str(server.worker) in by_hand['msg'] and str(server.launch) not in by_hand['msg']
    assert server.worker.read_bytes() == b'# hot fix by hand\n' and server.launch.read_bytes() == b'{"other": 48}'
    assert hashlib.sha256(server.launch.read_bytes()).hexdigest() != hashlib.sha256(server.found_launch).hexdigest()


def preflight_plan_task(guard_dir, **variables):
    """The role's own "Plan the undo" task of preflight.yml, as written there, with the variables the role sets."""
    with open(os.path.join(os.path.dirname(__file__), '..', '..', 'roles', 'sglang', 'tasks', 'preflight.yml')) as handle:
        tasks = yaml.safe_load(handle)
    task = [task for task in tasks if task.get('name') == 'Plan the undo (the revision put back, and its files)'][0]
    return dict(task, vars=dict(variables, _sglang_guard_dir=str(guard_dir), sglang_undo_to=None))


@pytest.mark.slow
def test_an_undo_is_recorded_as_one_and_the_preflight_refuses_an_alerts_undo_of_it(server, tmp_path):
    """Issue 46 review, item 1: an alert that keeps firing must not flip the server between two releases."""
    results = run_tasks(tmp_path, server.undo('run-4', undo_to=2), name='undo')
    assert results['confirm run-4']['revision']['numbers'] == [4], results['confirm run-4'].get('msg')
    listed = run_task(tmp_path, MODULE, {'folder': str(server.guard_dir)}, name='list')
    assert [(entry['number'], entry['origin'], entry['undo_to']) for entry in listed['revisions']] == [
        (1, 'found', None), (2, 'redeploy', None), (3, 'redeploy', None), (4, 'undo', 2)]

    alert = run_tasks(tmp_path, [preflight_plan_task(server.guard_dir, gpuops_undo_trigger='alertmanager')], name='alert')
    refused = list(alert.values())[0]
    assert refused.failed
    assert ('an alert undoes a redeploy, never an undo: the latest revision 4 is the undo to 2 (run run-4); undo by '
            'hand with playbooks/undo.yml --limit HOST -e sglang_undo_to=N (N one of the revisions kept: 1, 2, 3, 4)'
            in refused['msg']), refused['msg']
    by_hand = list(run_tasks(tmp_path, [preflight_plan_task(server.guard_dir)], name='by-hand').values())[0]
    assert not by_hand.failed and by_hand['undo']['target'] == 3, by_hand.get('msg')


@pytest.mark.slow
def test_a_missing_kept_copy_is_refused_by_the_plan_naming_the_file_and_its_revision(server, tmp_path):
    """Item 2: found before the window, not inside it."""
    copies = server.guard_dir / 'revisions' / '2' / 'before'
    [copy] = list(copies.iterdir())
    copy.unlink()
    planned = run_task(tmp_path, MODULE, {'state': 'planned', 'folder': str(server.guard_dir), 'to': 1}, name='plan')
    assert planned.failed
    assert "%s (revision 2's copy of %s) cannot be read" % (copy, server.worker) in planned['msg'], planned['msg']
    listed = run_task(tmp_path, MODULE, {'folder': str(server.guard_dir)}, name='list')
    assert [entry['number'] for entry in listed['revisions']] == [1, 3]
    assert len(listed['problems']) == 1 and listed['problems'][0].startswith('revision 2: kept copies missing')
