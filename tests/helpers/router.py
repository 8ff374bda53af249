"""The real SGLang router (sglang-router, from the venv) on a free loopback port, for the tests."""
import json
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


class Router(object):
    """The real router on a free loopback port, started with no worker."""

    def __init__(self, tmp_path):
        self.port = free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        self.log = open(str(tmp_path / 'router.log'), 'wb')
        self.proc = subprocess.Popen(
            [sys.executable, '-m', 'sglang_router.launch_router', '--host', '127.0.0.1', '--port', str(self.port),
             '--prometheus-port', str(free_port()), '--policy', 'round_robin'],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: http_json('GET', self.url + '/workers', timeout=1)[0] == 200, timeout=60, what='router')

    def urls(self):
        return [worker['url'] for worker in http_json('GET', self.url + '/workers')[1]['workers']]

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()
