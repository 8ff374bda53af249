"""The real SGLang gateway (sglang-router 0.3 or smg, from the venv) on a free loopback port, for the tests."""
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

from helpers.simulated import free_port, wait_for


def http_json(method, url, document=None, timeout=10):
    body = json.dumps(document).encode() if document is not None else None
    request = urllib.request.Request(url, data=body, method=method, headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b'null')
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError:
        return None, None


# The two gateways the tests run, both from the venv: sglang-router 0.3 (the integration tests' default) and
# smg with the lab's flags (lab/lab): health checked every second, no retries (with them off smg forwards a
# client's body chunked, measured), no tokenizer.
GATEWAYS = {
    'sglang-router': [sys.executable, '-m', 'sglang_router.launch_router'],
    # `-m smg`: sglang-router 0.3.2 installs a `smg` script too (whichever pip installed last owns it).
    'smg': [sys.executable, '-m', 'smg', 'launch', '--disable-tokenizer-autoload',
            '--health-check-interval-secs', '1', '--health-failure-threshold', '1', '--health-success-threshold', '1',
            '--disable-retries', '--prometheus-host', '127.0.0.1'],
}


class Router(object):
    """The real router (gateway: a GATEWAYS key) on a free loopback port, started with no worker."""

    def __init__(self, tmp_path, gateway='sglang-router'):
        self.port = free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        self.log = open(str(tmp_path / ('%s.log' % gateway)), 'wb')
        self.proc = subprocess.Popen(
            GATEWAYS[gateway] + ['--host', '127.0.0.1', '--port', str(self.port), '--prometheus-port', str(free_port()),
                                 '--policy', 'round_robin'],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, HF_ENDPOINT='http://127.0.0.1:9'))
        wait_for(lambda: http_json('GET', self.url + '/workers', timeout=1)[0] == 200, timeout=60, what='router')

    def urls(self):
        return [worker['url'] for worker in http_json('GET', self.url + '/workers')[1]['workers']]

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()
