"""The undo over a server's revisions (domain/_revisions.py, issue 46 item 2): which files an undo to revision N writes
and from which revision's bytes, the refusals (a revision not kept, files changed by hand), and the all-or-nothing
restore on real files in a folder the guard's trust rule accepts."""
import json
import os
from types import SimpleNamespace

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _revisions
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._revisions import (
    RevisionError, Revisions, changed_by_hand, undo_files, undo_target_problem)
from helpers.guard_files import GuardFiles
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture)


def image(sha, mode='0644', uid=0, gid=0):
    return {'kind': 'file', 'sha256': sha, 'mode': mode, 'uid': uid, 'gid': gid, 'target': None}


def entry(path, before, after):
    return {'path': path, 'stored_as': path.replace('/', '%2F'), 'before': before, 'after': after}


# Revision 1 found a and w; 2 patched w; 3 changed the launch configuration a and created t; 4 removed t, patched w.
INDEXES = {
    1: {'files': [entry('/a', image('a1'), image('a1')), entry('/w', image('w1'), image('w1'))]},
    2: {'files': [entry('/w', image('w1'), image('w2'))]},
    3: {'files': [entry('/a', image('a1'), image('a3')), entry('/t', None, image('t3'))]},
    4: {'files': [entry('/t', image('t3'), None), entry('/w', image('w2'), image('w4', mode='0600'))]},
}


@pytest.mark.parametrize('target, wanted', [
    # Each file as the first revision after the target found it, from that revision's before-image.
    (1, {'/a': ('a1', 3), '/t': (None, 3), '/w': ('w1', 2)}),
    (2, {'/a': ('a1', 3), '/t': (None, 3), '/w': ('w2', 4)}),
    (3, {'/t': ('t3', 4), '/w': ('w2', 4)}),
])
def test_an_undo_puts_back_each_file_the_later_revisions_changed_as_the_first_of_them_found_it(target, wanted):
    files = undo_files(INDEXES, target)
    assert {item['path']: ((item['want'] or {}).get('sha256'), item['source']) for item in files} == wanted


def test_the_state_expected_live_is_the_after_image_of_the_last_revision_that_changed_each_file():
    current = {item['path']: item['current'] for item in undo_files(INDEXES, 1)}
    assert current == {'/a': image('a3'), '/t': None, '/w': image('w4', mode='0600')}


@pytest.mark.parametrize('numbers, target, wanted, problem', [
    ([1, 2, 3, 4], None, 3, ''),
    ([1, 2, 3, 4], 1, 1, ''),
    ([3, 4, 5], 2, 2, 'revision 2 is not kept (pruned'),
    ([1, 2], 7, 7, 'revision 7 is not kept (beyond the latest)'),
    ([1, 2], 2, 2, 'revision 2 is the current one'),
    ([1, 2, 4], 1, 1, 'revisions [3] between 1 and the latest 4 are missing'),
    ([], None, None, 'this server has no revision'),
])
def test_which_revision_an_undo_goes_to_and_when_it_is_refused(numbers, target, wanted, problem):
    found, why = undo_target_problem(numbers, target)
    assert found == wanted
    assert why == '' if not problem else problem in why


def test_files_whose_live_state_is_not_the_latest_after_image_are_named():
    files = undo_files(INDEXES, 1)
    live = {'/a': image('a3'), '/t': None, '/w': image('w4', mode='0600')}
    assert changed_by_hand(files, live) == []
    assert changed_by_hand(files, dict(live, **{'/a': image('edited')})) == ['/a']
    assert changed_by_hand(files, dict(live, **{'/w': image('w4', mode='0644')})) == ['/w']
    assert changed_by_hand(files, dict(live, **{'/t': image('t3')})) == ['/t']


# --- on real files ---------------------------------------------------------------------------

class Server(GuardFiles):
    """A guard folder and live files, and revisions recorded as the guard's confirmation does."""

    def redeploy(self, names, change, run_id, **meta):
        entries = self.arm(names)
        change()
        plenty = lambda path: SimpleNamespace(f_bavail=10 ** 6, f_frsize=4096)  # noqa: E731
        return Revisions(str(self.guard), plenty).record(entries, dict(meta, run_id=run_id), 5, 0)

    def undo(self, target):
        """An undo run as the role makes it: planned, restored under the guard's arm, confirmed with its target."""
        revisions = Revisions(str(self.guard))
        plan = revisions.plan_undo(target)
        return self.redeploy(['launch.json', 'worker.py', 'tiers.json'], lambda: revisions.restore(plan),
                             'undo-%d' % plan['target'], undo_to=plan['target'])


@pytest.fixture
def server(trusted_dir):  # noqa: F811
    found = Server(trusted_dir)
    found.write('launch.json', b'{"max_running_requests": 64}')
    found.write('worker.py', b'found code\n', 0o640)
    # revision 2: the patch; revision 3: another launch setting and a new tiers file
    found.redeploy(['launch.json', 'worker.py', 'tiers.json'], lambda: found.write('worker.py', b'patched\n', 0o644), 'run-2')
    found.redeploy(['launch.json', 'worker.py', 'tiers.json'],
                   lambda: (found.write('launch.json', b'{"max_running_requests": 48}'), found.write('tiers.json', b'{}')), 'run-3')
    return found


def test_an_undo_to_revision_1_puts_every_file_back_byte_for_byte_with_its_mode(server):
    revisions = Revisions(str(server.guard))
    plan = revisions.plan_undo(1)
    assert (plan['target'], plan['latest'], plan['kept']) == (1, 3, [1, 2, 3])
    # What the first recorded run found is revision 1, recorded by that run: what a group's nodes are compared by.
    assert plan['run_id'] == 'run-2' and revisions.plan_undo(2)['run_id'] == 'run-2'
    assert revisions.plan_undo(None)['run_id'] == 'run-2' and revisions.plan_undo(None)['target'] == 2
    assert {item['path']: (item['action'], item['source']) for item in plan['files']} == {
        server.path('launch.json'): ('write', 3), server.path('tiers.json'): ('remove', 3),
        server.path('worker.py'): ('write', 2)}
    done = revisions.restore(plan)
    assert server.read('launch.json') == (b'{"max_running_requests": 64}', 0o644)
    assert server.read('worker.py') == (b'found code\n', 0o640)
    assert not os.path.exists(server.path('tiers.json'))
    assert sorted(item['action'] for item in done) == ['remove', 'write', 'write']
    assert sorted(os.listdir(str(server.live))) == ['launch.json', 'worker.py'], 'no staged or kept copy is left'


def test_the_default_undo_goes_to_the_revision_before_the_latest(server):
    revisions = Revisions(str(server.guard))
    revisions.restore(revisions.plan_undo(None))
    assert server.read('launch.json')[0] == b'{"max_running_requests": 64}'
    assert server.read('worker.py') == (b'patched\n', 0o644)


def test_an_undo_over_a_file_changed_by_hand_is_refused_naming_it_and_writes_nothing(server):
    server.write('launch.json', b'{"edited": "by hand"}')
    with pytest.raises(RevisionError) as refused:
        Revisions(str(server.guard)).plan_undo(1)
    assert server.path('launch.json') in str(refused.value) and 'by hand' in str(refused.value)
    assert server.path('worker.py') not in str(refused.value)
    assert server.read('launch.json')[0] == b'{"edited": "by hand"}' and server.read('worker.py')[0] == b'patched\n'


def test_an_undo_to_a_pruned_revision_is_refused(server):
    import shutil
    shutil.rmtree(str(server.guard / 'revisions' / '1'))
    with pytest.raises(RevisionError, match='revision 1 is not kept'):
        Revisions(str(server.guard)).plan_undo(1)


def test_a_damaged_copy_is_refused_before_any_file_is_written(server):
    revisions = Revisions(str(server.guard))
    plan = revisions.plan_undo(1)
    worker = [item for item in plan['files'] if item['path'] == server.path('worker.py')][0]
    with open(str(server.guard / 'revisions' / '2' / 'before' / worker['stored_as']), 'wb') as handle:
        handle.write(b'tampered\n')
    with pytest.raises(RevisionError, match='damaged'):
        revisions.restore(plan)
    assert server.read('launch.json')[0] == b'{"max_running_requests": 48}' and os.path.exists(server.path('tiers.json'))


def test_a_rename_that_fails_midway_puts_back_the_files_already_replaced(server, monkeypatch):
    revisions = Revisions(str(server.guard))
    plan = revisions.plan_undo(1)
    real_rename = os.rename

    def rename(source, destination):
        if destination == server.path('worker.py'):
            raise OSError(28, 'No space left on device')
        return real_rename(source, destination)
    monkeypatch.setattr(_revisions.os, 'rename', rename)
    with pytest.raises(OSError):
        revisions.restore(plan)
    monkeypatch.setattr(_revisions.os, 'rename', real_rename)
    assert server.read('launch.json')[0] == b'{"max_running_requests": 48}'
    assert server.read('tiers.json')[0] == b'{}' and server.read('worker.py')[0] == b'patched\n'
    assert sorted(os.listdir(str(server.live))) == ['launch.json', 'tiers.json', 'worker.py']


# --- an undo is recorded as one, and an alert never undoes it (issue 46 review, item 1) ------------------------

def test_an_undo_is_recorded_with_origin_undo_and_its_target_and_listed_so(server):
    recorded = server.undo(1)
    assert recorded['number'] == 4
    index = json.loads((server.guard / 'revisions' / '4' / 'revision.json').read_text())
    assert (index['origin'], index['undo_to']) == ('undo', 1)
    listed, problems = Revisions(str(server.guard)).listed()
    assert problems == []
    assert [(entry['number'], entry['origin'], entry['undo_to']) for entry in listed] == [
        (1, 'found', None), (2, 'redeploy', None), (3, 'redeploy', None), (4, 'undo', 1)]


def test_an_undo_an_alert_starts_is_refused_after_an_undo_before_anything_is_read_further(server):
    server.undo(None)  # revision 4: the undo to 2
    with pytest.raises(RevisionError) as refused:
        Revisions(str(server.guard)).plan_undo(None, not_after_undo=True)
    assert str(refused.value).startswith('an alert undoes a redeploy, never an undo: the latest revision 4 is the undo '
                                         'to 2 (run undo-2); undo by hand with playbooks/undo.yml --limit HOST '
                                         '-e sglang_undo_to=N (N one of the revisions kept: 1, 2, 3, 4)')
    # By hand the undo of an undo stands (it can be undone), and an alert's undo of a redeploy too.
    assert Revisions(str(server.guard)).plan_undo(None)['target'] == 3
    server.redeploy(['launch.json'], lambda: server.write('launch.json', b'{"max_running_requests": 32}'), 'run-5')
    assert Revisions(str(server.guard)).plan_undo(None, not_after_undo=True)['target'] == 4


# --- the plan reads every kept copy it will write (item 2) --------------------------------------------------------

def copy_of(server, number, name, side='before'):
    return server.guard / 'revisions' / str(number) / side / server.path(name).replace('/', '%2F')


@pytest.mark.parametrize('spoil, why', [
    (lambda copy: copy.write_bytes(b'tampered\n'), 'is damaged: its SHA-256 differs from the index'),
    (lambda copy: copy.unlink(), 'cannot be read: No such file or directory'),
])
def test_a_missing_or_damaged_copy_refuses_the_plan_naming_the_file_and_its_revision(server, spoil, why):
    spoil(copy_of(server, 2, 'worker.py'))
    with pytest.raises(RevisionError) as refused:
        Revisions(str(server.guard)).plan_undo(1)
    assert str(refused.value).startswith("%s (revision 2's copy of %s) " % (copy_of(server, 2, 'worker.py'),
                                                                            server.path('worker.py')))
    assert why in str(refused.value) and 'undo to revision 2 or a later one' in str(refused.value)
    # An undo that needs no copy of revision 2 is planned.
    assert Revisions(str(server.guard)).plan_undo(2)['target'] == 2
    listed, problems = Revisions(str(server.guard)).listed()
    assert [entry['number'] for entry in listed] == [1, 3]
    assert len(problems) == 1 and problems[0].startswith('revision 2: kept copies missing or damaged: the before-image '
                                                         'of %s (%s' % (server.path('worker.py'), copy_of(server, 2, 'worker.py')))


def test_a_damaged_after_image_is_reported_by_the_listing(server):
    copy_of(server, 3, 'launch.json', 'after').write_bytes(b'{}')
    listed, problems = Revisions(str(server.guard)).listed()
    assert [entry['number'] for entry in listed] == [1, 2]
    assert problems == ['revision 3: kept copies missing or damaged: the after-image of %s (%s is damaged: its SHA-256 '
                        'differs from the index); an undo that needs them is refused'
                        % (server.path('launch.json'), copy_of(server, 3, 'launch.json', 'after'))]


# --- an index this collection did not write (item 7) ---------------------------------------------------------------

def rewrite_index(server, number, change):
    path = server.guard / 'revisions' / str(number) / 'revision.json'
    index = json.loads(path.read_text())
    change(index)
    path.write_text(json.dumps(index))


@pytest.mark.parametrize('change, why', [
    (lambda index: index.pop('files'), 'it has no list of files'),
    (lambda index: index['files'].append('/etc/passwd'), 'a file entry is str, not an object'),
    (lambda index: index['files'][0].pop('path'), 'a file path None is not absolute and normalised'),
    (lambda index: index['files'][0].update(path='etc/shadow'), "a file path 'etc/shadow' is not absolute"),
    (lambda index: index['files'][0].update(path='/srv/../etc/shadow'), "a file path '/srv/../etc/shadow' is not absolute"),
    (lambda index: index['files'][0].update(path='//etc/shadow'), "a file path '//etc/shadow' is not absolute"),
    (lambda index: index['files'][0].update(stored_as='../1/before/x'), "not a file name of its folder"),
    (lambda index: index['files'][0].update(before={'kind': 'file'}), 'a file image has no SHA-256 (None)'),
    (lambda index: index['files'][0].update(before='x'), 'an image is str, not an object'),
    (lambda index: index['files'][0]['before'].update(mode='rwx'), "an image has mode 'rwx'"),
    (lambda index: index['files'][0]['before'].update(kind='fifo'), "an image has kind 'fifo'"),
    (lambda index: index.update(number=9), 'it says it is revision 9'),
    (lambda index: index.update(origin='manual'), "its origin is 'manual'"),
])
def test_a_malformed_index_is_that_revisions_problem_in_the_listing_and_a_refusal_naming_it_in_the_plan(server, change, why):
    rewrite_index(server, 3, change)
    index = str(server.guard / 'revisions' / '3' / 'revision.json')
    listed, problems = Revisions(str(server.guard)).listed()
    assert [entry['number'] for entry in listed] == [1, 2]
    assert len(problems) == 1 and problems[0].startswith('revision 3: %s is not an index this collection wrote: ' % index)
    assert why in problems[0]
    with pytest.raises(RevisionError) as refused:
        Revisions(str(server.guard)).plan_undo(1)
    assert str(refused.value).startswith('%s is not an index this collection wrote: ' % index) and why in str(refused.value)
