from ansible_collections.gpuops.sglang.plugins.modules import sglang_patch

PATCH = '/usr/bin/patch'
DIFF = '--- a/sglang/mod.py\n+++ b/sglang/mod.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n'
KEYS = {'changed', 'site_packages', 'sglang_version', 'files', 'patch_sha256', 'state', 'applied',
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
