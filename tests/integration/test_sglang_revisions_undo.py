"""The undo through real Ansible (sglang_revisions state=planned and state=restored, issue 46 item 2): two confirmed
redeploys record revisions 1 to 3 of a server's files; an undo to revision 1 under an armed guard puts every file
back byte for byte with its mode, and the confirmation records it as revision 4, which can itself be undone. Check
mode writes nothing; a revision not kept and a file changed by hand are refused, naming why.

No server runs: the guard arms (its watcher exits at the confirmation) over real files, as the window does."""
import hashlib
import os

import pytest

from helpers.ansible_run import run_task, run_tasks
from helpers.guarded_files import GuardedFiles
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture)

MODULE = 'gpuops.sglang.sglang_revisions'


class Server(GuardedFiles):
    """A launch configuration and an sglang file, and the guard's tasks of a window over them."""

    def __init__(self, tmp_path, guard_dir):
        super().__init__(tmp_path, guard_dir, launch_mode=0o640)

    def window(self, run_id, change):
        """Arm, the window's change (a task), confirm with a revision."""
        return [{'name': 'arm %s' % run_id, 'gpuops.sglang.sglang_guard': self.guard(state='armed', run_id=run_id,
                                                                                      deadline=600)},
                dict(change, name='change %s' % run_id),
                {'name': 'confirm %s' % run_id, 'gpuops.sglang.sglang_guard': self.guard(
                    state='confirmed', run_id=run_id, revisions={'kept': 5, 'meta': {}})}]

    def undo(self, run_id, to=None):
        args = {'state': 'restored', 'folder': str(self.guard_dir),
                'guard': {'folder': str(self.guard_dir), 'run_id': run_id}}
        if to is not None:
            args['to'] = to
        return self.window(run_id, {MODULE: args})


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
