"""A server with an API key, through the modules and real Ansible: the lab's stand-in (SGLang's --config and auth rules)
run detached from a launch.json as the role runs SGLang, and the real SGLang router, on loopback.

The key reaches the server only in a 0600 --config file; the modules read it there, send it as a bearer
token and never show it: not in a result, not in Ansible's output at -vvv, not in any event, not in the
server's /proc/PID/cmdline. The router reaches the server with the key the role hands it on readmission.
"""
import json
import os
import stat
import sys
import urllib.error
import urllib.request

import pytest

from helpers.ansible_run import run_task, run_tasks
from helpers.simulated import detached_server_args, free_port, wait_for
from helpers.standin import write_standin_module
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture; the guard refuses /tmp)

API_KEY = 'gpuops-test-key-7f3a9c'
ADMIN_KEY = 'gpuops-test-admin-key-51e0'


def request(method, url, key=None, body=None):
    """(status, JSON answer) of one request, with the key as a bearer token when given."""
    headers = {'Content-Type': 'application/json'}
    if key:
        headers['Authorization'] = 'Bearer ' + key
    data = json.dumps(body).encode() if body is not None else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method=method, headers=headers),
                                    timeout=30) as response:
            return response.status, json.loads(response.read() or b'null')
    except urllib.error.HTTPError as exc:
        return exc.code, None


class KeyedDeployment(object):
    """launch.json + the 0600 key file it names, as the role writes them, for the stand-in."""

    def __init__(self, tmp_path):
        self.root = tmp_path
        self.port = free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        module, pythonpath, _ = write_standin_module(tmp_path)
        self.keys = tmp_path / 'server.yaml'
        fd = os.open(str(self.keys), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, 'w') as handle:
            handle.write('api-key: %s\nadmin-api-key: %s\n' % (json.dumps(API_KEY), json.dumps(ADMIN_KEY)))
        self.launch = tmp_path / 'launch.json'
        self.launch.write_text(json.dumps({
            'python': sys.executable, 'module': module,
            'args': ['--model-path', '/models/m', '--host', '127.0.0.1', '--port', self.port,
                     '--max-running-requests', 64, '--config', str(self.keys)],
            'environment': {'PYTHONPATH': pythonpath, 'LAB_STANDIN_WARMUP': '0',
                            'LAB_STANDIN_DRAIN': '0'}}))

    def server_args(self, **extra):
        return detached_server_args(self.root, 'standin', self.launch, self.url, **dict(dict(health_timeout=30), **extra))


@pytest.fixture
def deployment(tmp_path):
    deployed = KeyedDeployment(tmp_path)
    yield deployed
    run_task(tmp_path, 'gpuops.sglang.sglang_server', deployed.server_args(state='stopped'), name='cleanup')


@pytest.mark.slow
def test_keyed_server_is_verified_with_its_key_which_no_output_shows(tmp_path, deployment, router):
    expected = {'max_running_requests': 64, 'model_path': '/models/m'}
    tasks = [
        {'name': 'start', 'gpuops.sglang.sglang_server': deployment.server_args(
            state='started', expected_server_info=expected, ready_checks=2, generate_probe=True)},
        {'name': 'info', 'gpuops.sglang.sglang_server_info': {
            'manager': 'detached', 'service_name': 'standin', 'launch_file': str(deployment.launch),
            'pidfile': str(deployment.root / 'standin.pid'), 'url': deployment.url, 'expected_server_info': expected,
            'configs': [{'label': 'API keys', 'path': str(deployment.keys),
                         'content': deployment.keys.read_text()}]}},
        {'name': 'readmit', 'gpuops.sglang.sglang_router_worker': {
            'router_url': router.url, 'worker_url': deployment.url, 'worker_api_key': API_KEY, 'timeout': 20}},
        {'name': 'restart', 'gpuops.sglang.sglang_server': deployment.server_args(
            state='restarted', expected_server_info=expected, drain_timeout=10, generate_probe=True)},
    ]
    results = run_tasks(tmp_path, tasks, verbosity=3)

    for name in ('start', 'info', 'readmit', 'restart'):
        assert not results[name].failed, (name, results[name].get('msg'))
    assert results['start']['healthy'] and results['start']['mismatches'] == []
    assert results['start']['server_info'] == expected and results['start']['readiness']['generate']['ok']
    assert results['info']['healthy'] and results['info']['mismatches'] == [] and results['info']['configs_changed'] == []
    assert results['readmit']['member'] and results['readmit']['healthy']
    # The drain read the protected /v1/loads with the key: idle, not "the load could not be read".
    assert results['restart']['drain']['idle'] and results['restart']['drain']['source'] == '/v1/loads'

    # The key was needed: the server refuses the same requests without it.
    assert request('GET', deployment.url + '/server_info')[0] == 401
    assert request('GET', deployment.url + '/server_info', key=API_KEY)[0] == 200
    # The router sent it: a request routed without any key from the client is served.
    assert request('POST', router.url + '/generate', body={'text': 'hi', 'sampling_params': {'max_new_tokens': 1}})[0] == 200

    # Nowhere: not in a result (cmd and invocation included), not in what Ansible printed at -vvv, not in an event.
    # (The transcript is the real one, every task of the run in it; what -vvv shows of the invocations differs
    # between ansible-core 2.19 and 2.21, so no argument is looked for.)
    assert all('"task": "%s"' % name in results.transcript for name in ('start', 'info', 'readmit', 'restart'))
    for key in (API_KEY, ADMIN_KEY):
        assert key not in results.transcript
    pid = results['restart']['pid']
    with open('/proc/%d/cmdline' % pid, 'rb') as handle:
        cmdline = handle.read()
    assert str(deployment.keys).encode() in cmdline
    assert API_KEY.encode() not in cmdline and ADMIN_KEY.encode() not in cmdline
    assert stat.S_IMODE(os.stat(str(deployment.keys)).st_mode) == 0o600


@pytest.mark.slow
def test_a_wrong_key_fails_verification_saying_401_without_showing_either_key(tmp_path, deployment):
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(state='started'), name='start')
    assert not started.failed, started.get('msg')
    # The launch configuration now names another key than the one the running server holds.
    deployment.keys.write_text('api-key: "not-the-running-key"\n')
    results = run_tasks(tmp_path, [{'name': 'verify', 'gpuops.sglang.sglang_server': deployment.server_args(
        state='started', expected_server_info={'max_running_requests': 64}), 'ignore_errors': True}], name='wrong')
    verify = results['verify']
    assert verify.failed and '/server_info answered 401' in verify['msg'] and 'API key' in verify['msg']
    assert 'not-the-running-key' not in results.transcript and API_KEY not in results.transcript
    wait_for(lambda: request('GET', deployment.url + '/health')[0] == 200, what='the server to keep serving')


@pytest.mark.slow
def test_guard_readmits_the_restored_server_with_its_own_key_not_the_runs(tmp_path, trusted_dir, deployment, router):
    started = run_task(tmp_path, 'gpuops.sglang.sglang_server', deployment.server_args(state='started'), name='start')
    assert not started.failed, started.get('msg')
    membership = dict(router_url=router.url, worker_url=deployment.url, worker_api_key=API_KEY, timeout=20)
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', membership, name='in').failed
    server = {'manager': 'detached', 'service_name': 'standin', 'launch_file': str(deployment.launch),
              'pidfile': str(deployment.root / 'standin.pid'), 'log_file': str(deployment.root / 'standin.log'),
              'url': deployment.url, 'term_timeout': 10}
    guard = dict(folder=str(trusted_dir / 'guard'), server=server, host='keyed-host', health_timeout=30,
                 files=[str(deployment.launch), str(deployment.keys)])
    armed = run_task(tmp_path, 'gpuops.sglang.sglang_guard', dict(guard, state='armed', run_id='run-k', deadline=600,
                                                                  router={'url': router.url,
                                                                          'worker_url': deployment.url,
                                                                          'timeout': 20}), name='arm')
    assert not armed.failed, armed.get('msg')
    # The run rotates the key and takes the server out; then it fails, and the guard restores.
    deployment.keys.write_text('api-key: "the-runs-new-key"\n')
    assert not run_task(tmp_path, 'gpuops.sglang.sglang_router_worker', dict(membership, state='absent'),
                        name='out').failed
    restored = run_task(tmp_path, 'gpuops.sglang.sglang_guard',
                        dict(guard, state='restored', run_id='run-k', reason='the new server failed'), name='restore')
    assert not restored.failed, restored.get('msg')
    assert restored['fired']['healthy'] and restored['fired']['router_readmitted'] and not restored['fired']['problems']
    assert API_KEY in deployment.keys.read_text()
    # The router holds the previous server's key: requests routed without a client key are served.
    assert request('POST', router.url + '/generate', body={'text': 'hi', 'sampling_params': {'max_new_tokens': 1}})[0] == 200
    # Its report names no key.
    assert API_KEY not in (trusted_dir / 'guard' / 'fired.json').read_text()
