"""The blocks of the docs/ pages per use that need the lab, run as written from the repository root
(tests/helpers/doc_blocks.py). The lab fixture has redeployed the lab once: these runs change nothing."""
from helpers.doc_blocks import recap, run_block

GPU_HOSTS = ('gpu1', 'gpu2')


def test_the_terminal_check_and_run_against_a_redeployed_lab_change_nothing(lab):
    pids = dict((name, lab[name].server_pid()) for name in GPU_HOSTS)
    run = run_block('terminal-lab', lab=True)
    assert run.returncode == 0, run.stdout[-3000:]
    recaps = recap(run.stdout)
    for name in GPU_HOSTS:
        # the --check run, then the run: neither changes anything, neither fails
        assert [(r['changed'], r['failed'], r['unreachable']) for r in recaps[name]] == [(0, 0, 0), (0, 0, 0)]
        assert lab[name].server_pid() == pids[name]
        assert '== %s' % name in run.stdout  # lab/lab summary
    assert run.stdout.count('status          : unchanged, healthy True') == 2, run.stdout[-3000:]


def test_the_terminal_adhoc_check_lists_the_holders_and_signals_nothing(lab):
    pid = lab['gpu2'].server_pid()
    run = run_block('terminal-adhoc', timeout=120, lab=True)
    assert run.returncode == 0, run.stdout
    assert 'gpu2 | CHANGED' in run.stdout and 'sglang::scheduler_TP0' in run.stdout, run.stdout
    assert lab['gpu2'].server_pid() == pid and lab['gpu2'].healthy()


def test_the_dashboard_module_check_run_reports_the_host_unchanged(lab):
    run = run_block('runner-dashboard-check', lab=True)
    assert run.returncode == 0, run.stdout[-3000:]
    assert run.stdout.strip().splitlines()[-2:] == ['successful', 'gpu2 unchanged healthy'], run.stdout[-3000:]
