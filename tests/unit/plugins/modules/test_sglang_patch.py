from ansible_collections.gpuops.sglang.plugins.modules import sglang_patch

PATCH = '/usr/bin/patch'
DIFF = '--- a/sglang/mod.py\n+++ b/sglang/mod.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n'
KEYS = {'changed', 'site_packages', 'sglang_version', 'files', 'patch_sha256', 'state', 'applied', 'recovered',
        'backup_files', 'cmd'}


def site(tmp_path):
    (tmp_path / 'sglang').mkdir()
    (tmp_path / 'sglang' / 'mod.py').write_text('x = 1\n')
    return str(tmp_path)


def patch_answers(forward_rc, reverse_rc):
    def respond(argv):
        if argv[0] == PATCH and '--dry-run' in argv:
            return (reverse_rc if '--reverse' in argv else forward_rc), '', 'Hunk #1 FAILED at 1.\n'
        raise AssertionError('unexpected command %r' % argv)
    return respond


def test_already_applied_patch_is_not_a_change_and_writes_nothing(run_module, tmp_path):
    result, calls = run_module(sglang_patch.main, {'content': DIFF, 'site_packages': site(tmp_path), 'patch': PATCH},
                               patch_answers(forward_rc=1, reverse_rc=0), bin_paths={'python3': '/usr/bin/python3'})
    assert not result['failed'] and result['changed'] is False and result['applied'] is True
    assert [call[-1] for call in calls] == ['--dry-run', '--dry-run']
    assert (tmp_path / 'sglang' / 'mod.py').read_text() == 'x = 1\n'
    assert set(result) >= KEYS


def test_patch_applying_neither_way_is_refused_with_both_outputs(run_module, tmp_path):
    result, _ = run_module(sglang_patch.main, {'content': DIFF, 'site_packages': site(tmp_path), 'patch': PATCH},
                           patch_answers(forward_rc=1, reverse_rc=1), bin_paths={'python3': '/usr/bin/python3'})
    assert result['failed'] and 'applies neither forwards nor backwards' in result['msg']
    assert result['msg'].count('Hunk #1 FAILED') == 2


def test_absent_state_dry_runs_the_reverse_first(run_module, tmp_path):
    result, calls = run_module(sglang_patch.main, {'content': DIFF, 'site_packages': site(tmp_path), 'patch': PATCH,
                                                   'state': 'absent'},
                               patch_answers(forward_rc=0, reverse_rc=1), bin_paths={'python3': '/usr/bin/python3'})
    assert not result['failed'] and result['changed'] is False and result['applied'] is False
    assert '--reverse' in calls[0] and '--reverse' not in calls[1]


def test_site_packages_without_sglang_is_refused_before_patch_runs(run_module, tmp_path):
    result, calls = run_module(sglang_patch.main, {'content': DIFF, 'site_packages': str(tmp_path), 'patch': PATCH},
                               patch_answers(0, 0), bin_paths={'python3': '/usr/bin/python3'})
    assert result['failed'] and 'holds no sglang package' in result['msg'] and calls == []


def test_python_that_prints_no_path_is_a_clear_failure_with_every_key(run_module, tmp_path):
    def respond(argv):
        assert argv[:2] == ['/bin/true', '-I']
        return 0, '', ''
    result, calls = run_module(sglang_patch.main, {'content': DIFF, 'python': '/bin/true', 'patch': PATCH}, respond)
    assert result['failed'] and set(result) >= KEYS | {'recovered'}
    assert "/bin/true exited 0 but printed no site-packages path (output: '')" in result['msg']


def test_sglang_is_located_with_an_isolated_interpreter_from_an_empty_folder(run_module, tmp_path):
    found = site(tmp_path)

    def respond(argv):
        if argv[0] == '/usr/bin/python3':
            return 0, 'noise from a sitecustomize\nSGLANG_SITE_PACKAGES=%s\n' % found, ''
        return patch_answers(forward_rc=1, reverse_rc=0)(argv)
    result, calls = run_module(sglang_patch.main, {'content': DIFF, 'patch': PATCH}, respond,
                               bin_paths={'python3': '/usr/bin/python3'})
    assert not result['failed'], result['msg']
    assert calls[0][:3] == ['/usr/bin/python3', '-I', '-c'] and result['site_packages'] == found


def test_content_without_final_newline_is_the_same_patch(run_module, tmp_path):
    first, _ = run_module(sglang_patch.main, {'content': DIFF, 'site_packages': site(tmp_path), 'patch': PATCH},
                          patch_answers(forward_rc=1, reverse_rc=0), bin_paths={'python3': '/usr/bin/python3'})
    stripped, _ = run_module(sglang_patch.main, {'content': DIFF.rstrip('\n'), 'site_packages': str(tmp_path),
                                                 'patch': PATCH}, patch_answers(forward_rc=1, reverse_rc=0),
                             bin_paths={'python3': '/usr/bin/python3'})
    assert not first['failed'] and not stripped['failed']
    assert first['patch_sha256'] == stripped['patch_sha256']


def test_hung_patch_fails_naming_the_command(run_module, tmp_path):
    def respond(argv):
        return 124, '', ''
    result, _ = run_module(sglang_patch.main, {'content': DIFF, 'site_packages': site(tmp_path), 'patch': PATCH,
                                               'command_timeout': 5}, respond,
                           bin_paths={'python3': '/usr/bin/python3'})
    assert result['failed'] and 'timed out after 5s' in result['msg'] and PATCH in result['msg']
    assert 'nothing was changed' in result['msg'] and set(result) >= KEYS | {'recovered'}


def test_mode_change_is_refused_not_dropped(run_module, tmp_path):
    diff = 'diff --git a/sglang/mod.py b/sglang/mod.py\nold mode 100644\nnew mode 100755\n' + DIFF
    result, calls = run_module(sglang_patch.main, {'content': diff, 'site_packages': site(tmp_path), 'patch': PATCH},
                               patch_answers(0, 0))
    assert result['failed'] and 'changes a file mode' in result['msg'] and calls == []
    assert set(result) >= KEYS | {'recovered'}


def test_a_patch_whose_guard_restored_changes_nothing(run_module, tmp_path):
    guard = tmp_path / 'guard'
    guard.mkdir()
    result, calls = run_module(sglang_patch.main, {'content': DIFF, 'site_packages': site(tmp_path), 'patch': PATCH,
                                                   'guard': {'folder': str(guard), 'run_id': 'run-1'}},
                               patch_answers(forward_rc=0, reverse_rc=1), bin_paths={'python3': '/usr/bin/python3'})
    assert result['failed'] and 'the rollback guard of run run-1 is not armed' in result['msg']
    assert calls == [] and (tmp_path / 'sglang' / 'mod.py').read_text() == 'x = 1\n'
