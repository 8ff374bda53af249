"""A server's revisions (domain/_revisions.py): the pure rules as tables, then recording, pruning, listing and the
space check on real files in a folder the guard's trust rule accepts."""
import hashlib
import json
import os
from types import SimpleNamespace

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.domain import _revisions
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._revisions import (
    RevisionError, Revisions, change_of, estimate_bytes, numbers_to_write, record_confirmed, space_problem, stored_name)
from helpers.guard_files import GuardFiles
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture)

MIB = 1024 * 1024


@pytest.mark.parametrize('path, name', [
    ('/etc/sglang/launch.json', '%2Fetc%2Fsglang%2Flaunch.json'),
    ('/opt/x/../y z', '%2Fopt%2Fx%2F..%2Fy%20z'),
    ('/' + 'a' * 300, 'sha256-' + hashlib.sha256(('/' + 'a' * 300).encode()).hexdigest()),
])
def test_a_path_is_stored_under_a_name_that_never_leads_out_of_its_folder(path, name):
    assert stored_name(path) == name
    assert '/' not in stored_name(path) and len(stored_name(path)) <= 200


def image(sha='a', mode='0644', uid=0, gid=0, kind='file', target=None):
    return {'kind': kind, 'sha256': sha, 'mode': mode, 'uid': uid, 'gid': gid, 'target': target}


@pytest.mark.parametrize('before, after, change', [
    (None, None, None),
    (None, image(), 'created'),
    (image(), None, 'removed'),
    (image(), image(), None),
    (image(sha='a'), image(sha='b'), 'modified'),
    (image(kind='symlink', sha=None, target='/x'), image(kind='symlink', sha=None, target='/y'), 'modified'),
    (image(mode='0644'), image(mode='0600'), 'mode changed'),
    (image(uid=0), image(uid=1000), 'owner changed'),
    (image(mode='0644', gid=0), image(mode='0640', gid=27), 'mode and owner changed'),
    # A guard armed by an older release kept no mode: not known is not a change.
    (image(mode=None), image(mode='0600'), None),
])
def test_what_a_run_did_to_a_file(before, after, change):
    assert change_of(before, after) == change


@pytest.mark.parametrize('existing, kept, written, pruned', [
    ([], 5, [1, 2], []),
    ([], 2, [1, 2], []),
    ([], 1, [2], []),
    ([1, 2], 5, [3], []),
    ([1, 2], 2, [3], [1]),
    ([4, 5, 6, 7, 8], 5, [9], [4]),
    ([1, 2, 3, 4, 5, 6], 2, [7], [1, 2, 3, 4, 5]),
    ([1, 2], 0, [], []),
])
def test_which_revisions_a_recording_writes_and_prunes(existing, kept, written, pruned):
    assert numbers_to_write(existing, kept) == (written, pruned)


@pytest.mark.parametrize('sizes, first, needed', [
    ([100, 50], False, 300 + _revisions.INDEX_ALLOWANCE),
    ([100, 50], True, 600 + 2 * _revisions.INDEX_ALLOWANCE),
    ([], False, _revisions.INDEX_ALLOWANCE),
])
def test_the_estimate_counts_before_and_after_and_revision_one_on_a_first_recording(sizes, first, needed):
    assert estimate_bytes(sizes, first) == needed


@pytest.mark.parametrize('needed, free, margin, fits', [
    (100, 1000, 900, True),
    (100, 1000, 901, False),
    (2000, 1000, 0, False),
])
def test_a_revision_fits_only_with_the_margin_left(needed, free, margin, fits):
    problem = space_problem(needed, free, margin, '/var/lib/gpuops-sglang')
    assert (problem == '') == fits
    if not fits:
        assert 'about %d bytes' % needed in problem and 'margin of %d bytes' % margin in problem
        assert '/var/lib/gpuops-sglang' in problem and 'sglang_revisions_kept' in problem


# --- on real files ---------------------------------------------------------------------------


@pytest.fixture
def run(trusted_dir):  # noqa: F811
    return GuardFiles(trusted_dir)


def plenty(path):
    return SimpleNamespace(f_bavail=10 ** 6, f_frsize=4096)


def record(run, names, change, run_id, kept=5, statvfs=plenty):
    entries = run.arm(names)
    change()
    return Revisions(str(run.guard), statvfs).record(entries, {'run_id': run_id, 'sglang_version': '0.5.23',
                                                              'patch_sha256': 'f' * 64}, kept, 0)


def test_a_first_recording_keeps_the_state_found_as_revision_1_and_the_run_as_revision_2(run):
    run.write('launch.json', b'{"port": 1}')
    run.write('worker.py', b'old code', 0o600)
    recorded = record(run, ['launch.json', 'worker.py', 'tiers.json'],
                      lambda: (run.write('worker.py', b'new code', 0o600), run.write('tiers.json', b'{}')), 'run-a')
    assert recorded['numbers'] == [1, 2] and recorded['number'] == 2 and recorded['problem'] == ''
    assert recorded['files'] == [{'path': run.path('tiers.json'), 'change': 'created'},
                                 {'path': run.path('worker.py'), 'change': 'modified'}]
    folder = run.guard / 'revisions'
    first = json.loads((folder / '1' / 'revision.json').read_text())
    second = json.loads((folder / '2' / 'revision.json').read_text())
    assert first['origin'] == 'found' and second['origin'] == 'redeploy' and second['run_id'] == 'run-a'
    assert second['sglang_version'] == '0.5.23' and second['patch_sha256'] == 'f' * 64 and first['patch_sha256'] is None
    worker = [entry for entry in second['files'] if entry['path'] == run.path('worker.py')][0]
    assert worker['before']['sha256'] == hashlib.sha256(b'old code').hexdigest() and worker['before']['mode'] == '0600'
    assert worker['after']['sha256'] == hashlib.sha256(b'new code').hexdigest() and worker['after']['owner'] == 'root'
    assert (folder / '2' / 'before' / worker['stored_as']).read_bytes() == b'old code'
    assert (folder / '2' / 'after' / worker['stored_as']).read_bytes() == b'new code'
    # Revision 1 is what was found: its after is revision 2's before, the file the run created absent in it.
    found = {entry['path']: entry for entry in first['files']}
    assert found[run.path('worker.py')]['after'] == worker['before'] and found[run.path('tiers.json')]['after'] is None
    assert (folder / '1' / 'after' / worker['stored_as']).read_bytes() == b'old code'
    assert run.path('launch.json') not in found, 'a file the run did not change is no part of a revision'
    for where, folders, files in os.walk(str(folder)):
        assert os.stat(where).st_mode & 0o777 == 0o700
        assert all(os.stat(os.path.join(where, name)).st_mode & 0o777 == 0o600 for name in files)


def test_three_revisions_at_kept_2_leave_the_last_two_and_the_listing_shows_them(run):
    run.write('launch.json', b'1')
    record(run, ['launch.json'], lambda: run.write('launch.json', b'2'), 'run-1', kept=2)
    second = record(run, ['launch.json'], lambda: run.write('launch.json', b'3'), 'run-2', kept=2)
    third = record(run, ['launch.json'], lambda: run.write('launch.json', b'4'), 'run-3', kept=2)
    assert second['numbers'] == [3] and second['pruned'] == [1]
    assert third['numbers'] == [4] and third['pruned'] == [2]
    revisions = Revisions(str(run.guard))
    assert revisions.numbers() == [3, 4]
    listed, problems = revisions.listed()
    assert problems == [] and [(entry['number'], entry['run_id']) for entry in listed] == [(3, 'run-2'), (4, 'run-3')]
    assert listed[1]['changed'] == [{'path': run.path('launch.json'), 'change': 'modified'}]
    assert listed[1]['size_bytes'] == _revisions.folder_size(str(run.guard / 'revisions' / '4')) > 2


def test_a_run_that_changed_nothing_records_nothing(run):
    run.write('launch.json', b'same')
    recorded = record(run, ['launch.json'], lambda: None, 'run-x')
    assert recorded['numbers'] == [] and recorded['problem'] == '' and not (run.guard / 'revisions').exists()


def test_a_revision_that_would_not_fit_is_not_written_and_says_the_numbers(run):
    run.write('launch.json', b'x' * 1000)
    small = lambda path: SimpleNamespace(f_bavail=10, f_frsize=4096)  # noqa: E731
    recorded = record(run, ['launch.json'], lambda: run.write('launch.json', b'y' * 1000), 'run-f', statvfs=small)
    assert recorded['numbers'] == [] and 'would leave 0 of the 40960 bytes free' in recorded['problem']
    assert Revisions(str(run.guard)).numbers() == []


def test_the_check_before_the_window_refuses_what_would_not_fit(run):
    run.write('worker.py', b'x' * 4096)
    revisions = Revisions(str(run.guard), lambda path: SimpleNamespace(f_bavail=100, f_frsize=4096))
    fits = revisions.check([run.path('worker.py'), run.path('absent')], kept=5, margin=0)
    assert fits['problem'] == '' and fits['needed_bytes'] == 4 * 4096 + 2 * _revisions.INDEX_ALLOWANCE
    assert fits['free_bytes'] == 409600 and fits['where'] == str(run.guard)
    refused = revisions.check([run.path('worker.py')], kept=5, margin=400000)
    assert 'below the margin of 400000 bytes' in refused['problem']
    assert revisions.check([run.path('worker.py')], kept=0, margin=10 ** 12)['problem'] == ''


@pytest.mark.parametrize('make_unsafe, why', [
    (lambda folder: os.chmod(str(folder), 0o777), 'writable by its group and others'),
    (lambda folder: os.chown(str(folder), 65534, 65534), 'belongs to uid 65534'),
])
def test_a_revisions_folder_another_user_could_write_is_refused(run, make_unsafe, why):
    (run.guard / 'revisions').mkdir(mode=0o700)
    make_unsafe(run.guard / 'revisions')
    for action in (lambda revisions: revisions.listed(), lambda revisions: revisions.check([], 5, 0)):
        with pytest.raises(RevisionError, match='is not safe: .*%s' % why):
            action(Revisions(str(run.guard)))


def test_an_index_another_user_could_write_is_not_believed_and_the_others_are_listed(run):
    run.write('a', b'1')
    record(run, ['a'], lambda: run.write('a', b'2'), 'run-1')
    os.chmod(str(run.guard / 'revisions' / '2' / 'revision.json'), 0o666)
    listed, problems = Revisions(str(run.guard)).listed()
    assert [entry['number'] for entry in listed] == [1]
    assert len(problems) == 1 and problems[0].startswith('revision 2: ') and 'writable' in problems[0]


def test_a_failed_recording_at_the_confirmation_never_raises_and_says_why(run):
    run.write('a', b'1')
    entries = run.arm(['a'])
    run.write('a', b'2')
    open(entries[0]['backup'], 'wb').write(b'damaged')
    outcome = record_confirmed(str(run.guard), {'run_id': 'run-d', 'files': entries}, 5, 0, {}, statvfs=plenty)
    assert outcome['recorded'] is False and outcome['numbers'] == []
    assert outcome['problem'].startswith('no revision was recorded of run run-d: the bytes the guard kept of ')
    assert 'damaged' in outcome['problem'] and 'stands confirmed' in outcome['problem']
