"""playbooks/redeploy.yml against the embedded lab, one scenario each, through ansible-runner.

Each test leaves the lab as the baseline left it (patched, dynamic speculation on, healthy).
"""
import json

GPU_HOSTS = ('gpu1', 'gpu2')
WORKER = 'srt/speculative/eagle_worker.py'


def served_state(host):
    """What a refused redeploy must leave as it was: server PID, patched file, active launch configuration."""
    return host.server_pid(), host.sha256(host.sglang_file(WORKER)), host.sha256('/etc/sglang/launch.json')


def test_the_lab_runs_the_modules_on_debian_12_and_13(lab):
    # What the README's "Tested versions" says of the lab: every lab test covers both target images.
    assert dict((name, lab[name].target()) for name in ('gpu1', 'gpu2', 'pve1')) == {
        'gpu1': ('12', '3.11'), 'gpu2': ('13', '3.13'), 'pve1': ('13', '3.13')}


def test_changed_flags_restart_the_server_and_show_in_server_info(lab, redeploy):
    pids = dict((name, lab[name].server_pid()) for name in GPU_HOSTS)
    run = redeploy({'sglang_max_running_requests': 96, 'sglang_dynamic_spec_batch_size_threshold': 16}, name='flags')
    assert run.rc == 0, run.stdout[-3000:]
    for name in GPU_HOSTS:
        info = lab[name].server_info()
        assert info['max_running_requests'] == 96
        assert info['environment']['SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE'] == '16'
        assert lab[name].server_pid() != pids[name]
    back = redeploy(name='flags-back')
    assert back.rc == 0 and lab['gpu1'].server_info()['max_running_requests'] == 64


def test_patch_that_does_not_apply_stops_in_preflight_with_the_old_server_serving(lab, redeploy, tmp_path):
    bad = tmp_path / 'for-another-version.diff'
    bad.write_text('--- a/sglang/srt/speculative/eagle_worker.py\n+++ b/sglang/srt/speculative/eagle_worker.py\n'
                   '@@ -1,2 +1,2 @@\n-import logging_v9\n+import logging_v10\n import time\n')
    before = dict((name, served_state(lab[name])) for name in GPU_HOSTS)
    run = redeploy({'sglang_patch_file': str(bad), 'sglang_max_running_requests': 80}, name='badpatch')
    assert run.rc != 0
    for name in GPU_HOSTS:
        messages = ' '.join(run.failure_messages(name))
        assert 'applies neither forwards nor backwards' in messages
        assert run.count('changed', name) <= 1  # only staging the diff file itself
        assert lab[name].healthy()
        assert served_state(lab[name]) == before[name]
        assert lab[name].server_info()['max_running_requests'] == 64


def test_server_that_never_becomes_healthy_is_rolled_back(lab, redeploy, tmp_path):
    # A second patch applied in the same run must be reverted by the rollback.
    extra_patch = tmp_path / 'version-note.diff'
    version_py = lab['gpu1'].exec_('head', '-1', lab['gpu1'].sglang_file('version.py'))
    extra_patch.write_text('--- a/sglang/version.py\n+++ b/sglang/version.py\n@@ -1 +1 @@\n-{0}\n+{0}  # note\n'
                           .format(version_py.rstrip('\n')))
    version_sha = lab['gpu1'].sha256(lab['gpu1'].sglang_file('version.py'))
    run = redeploy({'sglang_patch_file': str(extra_patch), 'sglang_health_timeout': 3,
                    'sglang_environment': {'LAB_STANDIN_WARMUP': '1000'}}, name='never-healthy')
    assert run.rc != 0
    for name in GPU_HOSTS:
        message = ' '.join(run.failure_messages(name))
        assert 'did not become healthy: /health did not answer 200 within 3.0s' in message
        assert 'rolled_back on %s' % name in message and 'the previous server serves again' in message
        assert lab[name].healthy()
        info = lab[name].server_info()
        assert 'LAB_STANDIN_WARMUP' not in info['environment'] and info['max_running_requests'] == 64
        assert info['dynamic_spec_patch_present'] is True
        assert lab[name].sha256(lab[name].sglang_file('version.py')) == version_sha


def test_unknown_flag_fails_fast_and_rolls_back(lab, redeploy):
    run = redeploy({'sglang_extra_args': ['--no-such-flag']}, name='badflag')
    assert run.rc != 0
    detached = ' '.join(run.failure_messages('gpu2'))
    # The detached server's exit is seen at once, not at the health timeout.
    assert 'did not become healthy: the server exited with status 2' in detached
    systemd = ' '.join(run.failure_messages('gpu1'))
    assert 'did not become healthy: unit sglang is failed' in systemd
    for name in GPU_HOSTS:
        assert 'rolled_back on %s' % name in ' '.join(run.failure_messages(name))
        assert 'the previous server serves again' in ' '.join(run.failure_messages(name))
    for name in GPU_HOSTS:
        assert lab[name].healthy()


def test_adaptive_mode_and_secrets_never_logged(lab, redeploy):
    secret = 'hf_lab_secret_5f1c0de'
    run = redeploy({'sglang_dynamic_spec_mode': 'adaptive', 'sglang_secret_environment': {'HF_TOKEN': secret}},
                   name='adaptive', limit='gpu2')
    assert run.rc == 0, run.stdout[-3000:]
    info = lab['gpu2'].server_info()
    assert info['speculative_adaptive'] is True
    assert info['speculative_adaptive_config'] == '/etc/sglang/adaptive_spec.json'
    assert 'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE' not in info['environment']
    # upstream's batch-size tiers: drafting from batch size 1, none from the threshold (8) on
    tiers = json.loads(lab['gpu2'].exec_('cat', '/etc/sglang/adaptive_spec.json'))
    assert tiers == {'1': {'candidate_steps': [1, 3]}, '8': {'candidate_steps': [0]}}
    assert secret not in run.stdout
    assert secret not in str(run.events)
    environ = lab['gpu2'].exec_('cat', '/proc/%d/environ' % lab['gpu2'].server_pid())
    assert 'HF_TOKEN=%s' % secret in environ
    back = redeploy(name='adaptive-back', limit='gpu2')
    assert back.rc == 0
    assert lab['gpu2'].server_info()['environment']['SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE'] == '8'
