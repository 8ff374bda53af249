"""playbooks/redeploy.yml against the embedded lab, one scenario each, through ansible-runner.

Each test leaves the lab as the baseline left it (patched, dynamic speculation on, healthy).
"""
import json
import os
import subprocess
import urllib.error
import urllib.request

from helpers.lab_strays import orphan_in_container, orphans
from helpers.releases import sglang_version
from helpers import lab_instance

GPU_HOSTS = ('gpu1', 'gpu2')
# The lab image's second sglang (lab/image/build.sh), served unpatched.
NATIVE_PYTHON = '/opt/sglang-native/venv/bin/python'
NATIVE_RELEASE = sglang_version('requirements/lab-native.txt')
WORKER = 'srt/speculative/eagle_worker.py'


def served_state(host):
    """What a refused redeploy must leave as it was: server PID, patched file, active launch configuration."""
    return host.server_pid(), host.sha256(host.sglang_file(WORKER)), host.sha256('/etc/sglang/launch.json')


def http_status(base_url, path, body=None):
    """Status of one request without a key (a POST with a JSON body when given)."""
    url = base_url + path
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def server_info_with(host, api_key):
    request = urllib.request.Request(lab_instance.server_url(host) + '/server_info',
                                     headers={'Authorization': 'Bearer ' + api_key})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)


def test_the_lab_runs_the_modules_on_debian_12_and_13(lab):
    # What the README's "Tested versions" says of the lab: every lab test covers both target images.
    assert dict((name, lab[name].target()) for name in ('gpu1', 'gpu2', 'pve1')) == {
        'gpu1': ('12', '3.11'), 'gpu2': ('13', '3.13'), 'pve1': ('13', '3.13')}


def last_report(name):
    with open(os.path.join(lab_instance.reports_dir(), name + '.json')) as handle:
        return json.load(handle)


def test_the_container_kill_runs_in_the_window_only_for_strays_beside_the_server(lab, redeploy):
    # Nothing of SGLang in the container but the server: its own processes are gpu_release's to await.
    plain = redeploy({'sglang_force_restart': True}, name='no-stray', limit='gpu1')
    assert plain.rc == 0, plain.stdout[-3000:]
    written = last_report('gpu1')
    assert written['status'] == 'redeployed' and written['healthy'] is True
    assert written['phases_s']['kill'] is None and written['killed_in_container'] == []
    assert written['phases_s']['stop'] is not None, 'no step saw the old server gone'
    # An orphaned scheduler outside the unit (as a crashed SGLang leaves one): pct_exec_kill ends it.
    with orphan_in_container() as title:
        assert len(orphans()) == 1
        swept = redeploy({'sglang_force_restart': True}, name='stray', limit='gpu1')
        assert swept.rc == 0, swept.stdout[-3000:]
        written = last_report('gpu1')
        assert written['status'] == 'redeployed' and written['healthy'] is True
        assert written['phases_s']['kill'] is not None
        killed = written['killed_in_container']
        assert len(killed) == 1 and killed[0].startswith(title + ' ') and killed[0].endswith(' <- SIGTERM')
        assert orphans() == []


def test_the_model_files_are_read_into_the_page_cache_before_the_window_and_a_reserve_stops_the_read(lab, redeploy):
    # Cold, as on a machine whose old server read its weights days ago (lab/lab drop-cache: fadvise DONTNEED).
    subprocess.run([lab_instance.LAB, 'drop-cache', 'gpu1'], check=True, stdout=subprocess.DEVNULL)
    run = redeploy({'sglang_force_restart': True}, name='prefetch', limit='gpu1')
    assert run.rc == 0, run.stdout[-3000:]
    prefetch = last_report('gpu1')['prefetch']
    # The lab's model folders: the weight shards and config.json, the draft's .bin and config.json.
    assert prefetch['files'] >= 4 and prefetch['bytes'] > 0 and prefetch['skipped'] == []
    assert prefetch['resident_before_pct'] < 50 and prefetch['resident_after_pct'] == 100.0
    assert prefetch['read_bytes'] > 0 and prefetch['stopped_early'] is False and prefetch['why'] is None
    # The compile caches' folders: the server user's own (root's on the lab), 0700, and kept across restarts.
    caches = ['/var/cache/sglang/sglang/' + tool for tool in ('deep_gemm', 'flashinfer', 'torchinductor', 'triton')]
    assert lab['gpu1'].exec_('stat', '-c', '%U %a %F', *caches).split('\n')[:4] == ['root 700 directory'] * 4
    lab['gpu1'].exec_('touch', caches[3] + '/kept')
    # A reserve the machine cannot spare: nothing is read, the report says why, the redeploy goes on.
    subprocess.run([lab_instance.LAB, 'drop-cache', 'gpu1'], check=True, stdout=subprocess.DEVNULL)
    spared = redeploy({'sglang_force_restart': True, 'sglang_prefetch_reserve_mib': 10 ** 9}, name='reserve',
                      limit='gpu1')
    assert spared.rc == 0, spared.stdout[-3000:]
    written = last_report('gpu1')
    assert written['status'] == 'redeployed' and written['healthy'] is True
    prefetch = written['prefetch']
    assert prefetch['stopped_early'] is True and prefetch['read_bytes'] == 0 and 'reserve' in prefetch['why']
    assert prefetch['reserve_mib'] == 10 ** 9 and prefetch['mem_available_mib_before'] < 10 ** 9
    assert prefetch['cache_files'] >= 1 and prefetch['cache_folders_made'] == []
    assert lab['gpu1'].exec_('ls', caches[3]).split() == ['kept']
    assert lab['gpu1'].server_info()['environment']['SGLANG_DG_CACHE_DIR'] == caches[0]


def test_changed_flags_restart_the_server_and_show_in_server_info(lab, redeploy):
    pids = dict((name, lab[name].server_pid()) for name in GPU_HOSTS)
    run = redeploy({'sglang_max_running_requests': 96, 'sglang_dynamic_spec_batch_size_threshold': 16,
                    'sglang_startup_weight_load_mode': 'overlap', 'sglang_weight_loader_prefetch_checkpoints': True},
                   name='flags')
    assert run.rc == 0, run.stdout[-3000:]
    for name in GPU_HOSTS:
        info = lab[name].server_info()
        assert info['max_running_requests'] == 96
        assert info['startup_weight_load_mode'] == 'overlap' and info['weight_loader_prefetch_checkpoints'] is True
        assert info['environment']['SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE'] == '16'
        assert lab[name].server_pid() != pids[name]
    back = redeploy(name='flags-back')
    assert back.rc == 0 and lab['gpu1'].server_info()['max_running_requests'] == 64
    assert lab['gpu1'].server_info()['startup_weight_load_mode'] == 'serial'


def test_patch_that_does_not_apply_stops_in_preflight_with_the_old_server_serving(lab, redeploy, tmp_path):
    bad = tmp_path / 'for-another-version.diff'
    bad.write_text('--- a/sglang/srt/speculative/eagle_worker.py\n+++ b/sglang/srt/speculative/eagle_worker.py\n'
                   '@@ -1,2 +1,2 @@\n-import logging_v9\n+import logging_v10\n import time\n')
    before = dict((name, served_state(lab[name])) for name in GPU_HOSTS)
    # Which code reads the dynamic-speculation variable is not at stake (the env-mode rule, issue 43).
    run = redeploy({'sglang_patch_file': str(bad), 'sglang_max_running_requests': 80, 'sglang_dynamic_spec_env_read_by': 'installed'}, name='badpatch')
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
    # The guard restarts the previous server under the same health bound: 3 s was outrun by a stand-in's start
    # on a machine running the whole suite (a CI run of 2026-12-03: the restore was right, the bound too short).
    run = redeploy({'sglang_patch_file': str(extra_patch), 'sglang_health_timeout': 12, 'sglang_dynamic_spec_env_read_by': 'installed',
                    'sglang_environment': {'LAB_STANDIN_WARMUP': '1000'}}, name='never-healthy')
    assert run.rc != 0
    for name in GPU_HOSTS:
        message = ' '.join(run.failure_messages(name))
        assert 'did not become healthy: /health did not answer 200 within 12.0s' in message
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


def test_adaptive_mode_is_refused_where_sglang_would_ignore_its_tiers(lab, redeploy):
    # The lab's sglang 0.5.12.post1 reads --speculative-adaptive-config as one flat list of candidate steps:
    # batch-size tiers would be ignored, so drafting would never stop at the threshold. Refused before the stop.
    before = served_state(lab['gpu2'])
    run = redeploy({'sglang_dynamic_spec_mode': 'adaptive'}, name='adaptive', limit='gpu2')
    assert run.rc != 0
    assert 'reads one flat list of candidate steps and would ignore them' in ' '.join(run.failure_messages('gpu2'))
    assert run.count('changed', 'gpu2') == 0
    assert served_state(lab['gpu2']) == before and lab['gpu2'].healthy()
    assert lab['gpu2'].server_info()['environment']['SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE'] == '8'


def test_adaptive_mode_serves_on_the_native_release_whose_own_parser_stops_drafting_at_the_threshold(lab, redeploy):
    # The lab's second release (requirements/lab-native.txt) served as it ships, unpatched: adaptive
    # mode with the role's batch-size tiers. The stand-in hands the written tiers to that release's
    # own adaptive_spec_params.py and reports what it decided per batch size.
    host = lab['gpu2']
    native = {'sglang_python': NATIVE_PYTHON, 'sglang_patch_file': '', 'sglang_dynamic_spec_mode': 'adaptive'}
    try:
        run = redeploy(native, name='native-adaptive', limit='gpu2')
        assert run.rc == 0, run.stdout[-3000:]
        info = host.server_info()
        assert info['speculative_adaptive'] is True
        assert info['speculative_adaptive_config'] == '/etc/sglang/adaptive_spec.json'
        assert 'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE' not in info['environment']
        assert host.exec_('cat', '/proc/%d/cmdline' % host.server_pid()).split('\0')[0] == NATIVE_PYTHON
        adaptive = info['internal_states'][0]['standin_adaptive']
        assert adaptive['tiers'] is True and adaptive['disabled_reason'] is None
        assert adaptive['parser'].startswith('/opt/sglang-native/venv/') and adaptive['sglang'] == NATIVE_RELEASE
        # The threshold is 8 (inventory default): drafting from 1 to 7 running requests, none from 8 on.
        candidates = adaptive['candidate_steps_by_batch_size']
        assert [candidates[str(size)] for size in (1, 7, 8, 64)] == [[1, 3], [1, 3], [0], [0]]
        assert adaptive['initial_steps_by_batch_size']['64'] == 0
        pid = host.server_pid()
        again = redeploy(native, name='native-adaptive-again', limit='gpu2')
        assert again.rc == 0 and again.count('changed', 'gpu2') == 0 and host.server_pid() == pid
    finally:
        # Back to the patched release whatever failed above: the next scenario starts from the baseline.
        back = redeploy(name='native-back', limit='gpu2')
    assert back.rc == 0, back.stdout[-3000:]
    info = host.server_info()
    assert info['environment']['SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE'] == '8'
    assert info['speculative_adaptive'] is False and 'standin_adaptive' not in info['internal_states'][0]


def test_secret_environment_reaches_the_server_and_is_never_logged(lab, redeploy):
    secret = 'hf_lab_secret_5f1c0de'
    run = redeploy({'sglang_secret_environment': {'HF_TOKEN': secret}}, name='secret', limit='gpu2')
    assert run.rc == 0, run.stdout[-3000:]
    assert secret not in run.stdout
    assert secret not in str(run.events)
    environ = lab['gpu2'].exec_('cat', '/proc/%d/environ' % lab['gpu2'].server_pid())
    assert 'HF_TOKEN=%s' % secret in environ
    back = redeploy(name='secret-back', limit='gpu2')
    assert back.rc == 0
    assert lab['gpu2'].server_info()['environment']['SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE'] == '8'


def test_api_keys_reach_the_server_in_a_0600_file_and_no_output_or_process_list_shows_them(lab, redeploy):
    keys = {'sglang_api_key': 'lab-api-key-3e9d41f0', 'sglang_admin_api_key': 'lab-admin-key-c07b22aa'}
    host = lab['gpu1']
    # -v and --diff: the most an operator's run shows (results, and the rendered files' diffs).
    run = redeploy(keys, name='api-key', limit='gpu1', cmdline='-v --diff')
    assert run.rc == 0, run.stdout[-3000:]
    with open(os.path.join(lab_instance.reports_dir(), 'gpu1.json')) as handle:
        report_text = handle.read()
    report = json.loads(report_text)
    # Verified with the key: health, /server_info's flags, /health_generate, a real generation, the router back.
    assert report['status'] == 'redeployed' and report['healthy'], report['reason']
    assert 'API keys changed' in report['reasons'] and report['router']['readmitted'] is True

    # The server wants the key now, on every endpoint but /health.
    assert http_status(lab_instance.server_url(host.name), '/server_info') == 401
    assert http_status(lab_instance.server_url(host.name), '/health') == 200
    info = server_info_with(host.name, keys['sglang_api_key'])
    assert info['api_key'] == keys['sglang_api_key'] and info['admin_api_key'] == keys['sglang_admin_api_key']
    # Handed over in a root-only file, named on the command line; the candidate beside it is as closed.
    assert host.exec_('stat', '-c', '%a %U', '/etc/sglang/server.yaml', '/etc/sglang/server.next.yaml').split('\n')[:2] \
        == ['600 root', '600 root']
    cmdline = host.exec_('cat', '/proc/%d/cmdline' % info['internal_states'][0]['pid'])
    assert '--config\0/etc/sglang/server.yaml' in cmdline
    every_cmdline = host.exec_('sh', '-c', 'cat /proc/[0-9]*/cmdline 2>/dev/null; true')
    for secret in keys.values():
        assert secret not in every_cmdline
        assert secret not in run.stdout and secret not in json.dumps(run.events) and secret not in report_text
    # The router reaches it with its key (the role handed it over on readmission): requests routed through
    # it, round robin over both servers, are all served.
    assert [http_status(lab_instance.router_url(), '/generate',
                        {'text': 'hi', 'sampling_params': {'max_new_tokens': 1}}) for _ in range(4)] == [200] * 4

    back = redeploy(name='api-key-back', limit='gpu1')
    assert back.rc == 0, back.stdout[-3000:]
    assert http_status(lab_instance.server_url(host.name), '/server_info') == 200


def folder_modes(host):
    return host.exec_('stat', '-c', '%n %a', '/run', '/etc', '/var/log').split('\n')


def test_system_folders_are_refused_untouched_and_a_moved_run_dir_still_stops_the_server_gracefully(lab, redeploy):
    # The review's runs with these settings left /run, /etc and /var/log 0750 on both hosts.
    before = dict((name, folder_modes(lab[name])) for name in GPU_HOSTS)
    pids = dict((name, lab[name].server_pid()) for name in GPU_HOSTS)
    refused = redeploy({'sglang_run_dir': '/run', 'sglang_config_dir': '/etc',
                        'sglang_log_file': '/var/log/sglang.log'}, name='system-folders')
    assert refused.rc != 0
    for name in GPU_HOSTS:
        written = last_report(name)
        assert written['status'] == 'failed' and 'sglang_run_dir /run is the system folder /run' in written['reason']
        assert folder_modes(lab[name]) == before[name]
        assert lab[name].server_pid() == pids[name] and lab[name].healthy()
    # gpu2 runs detached: its pid file is in sglang_run_dir. The server a run with another run folder finds
    # must be stopped by the stop (SIGTERM, drain), not left to the GPU release's signals.
    marked = redeploy({'sglang_force_restart': True}, name='marked', limit='gpu2')
    assert marked.rc == 0, marked.stdout[-3000:]
    try:
        moved = redeploy({'sglang_force_restart': True, 'sglang_run_dir': '/run/sglang-moved'}, name='moved',
                         limit='gpu2')
        assert moved.rc == 0, moved.stdout[-3000:]
        written = last_report('gpu2')
        assert written['status'] == 'redeployed' and written['healthy'] is True
        assert written['killed_gpu_holders'] == [] and written['phases_s']['stop'] is not None
    finally:
        back = redeploy({'sglang_force_restart': True}, name='back', limit='gpu2')
        lab['gpu2'].exec_('rm', '-rf', '/run/sglang-moved')
    assert back.rc == 0, back.stdout[-3000:]
    written = last_report('gpu2')
    assert written['killed_gpu_holders'] == [] and written['phases_s']['stop'] is not None
    assert folder_modes(lab['gpu2']) == before['gpu2']
