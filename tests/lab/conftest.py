import json
import os
import subprocess
import urllib.request

import pytest

from helpers.ansible_run import REPO, run_playbook

LAB = os.path.join(REPO, 'lab', 'lab')
HOSTS = {'gpu1': ('lab-gpu1', '127.0.0.12'), 'gpu2': ('lab-gpu2', '127.0.0.13')}


class LabHost(object):
    def __init__(self, name):
        self.name = name
        self.container, self.address = HOSTS[name]

    def exec_(self, *argv):
        return subprocess.check_output(['podman', 'exec', self.container] + list(argv), universal_newlines=True,
                                       env=dict(os.environ, CONTAINERS_CONF=os.path.join(REPO, 'lab', 'containers.conf')))

    def server_info(self):
        with urllib.request.urlopen('http://%s:30000/server_info' % self.address, timeout=5) as response:
            return json.load(response)

    def healthy(self):
        try:
            with urllib.request.urlopen('http://%s:30000/health' % self.address, timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    def server_pid(self):
        return self.server_info()['internal_states'][0]['pid']

    def sha256(self, path):
        return self.exec_('sha256sum', path).split()[0]


@pytest.fixture(scope='session')
def lab(tmp_path_factory):
    """A fresh lab, redeployed once: the state every scenario starts from."""
    subprocess.check_call([LAB, 'down'], stdout=subprocess.DEVNULL)
    subprocess.check_call([LAB, 'up'], stdout=subprocess.DEVNULL)
    baseline = run_playbook(tmp_path_factory.mktemp('baseline'), 'playbooks/redeploy.yml', 'inventory/lab')
    assert baseline.rc == 0, baseline.stdout[-3000:]
    yield dict((name, LabHost(name)) for name in HOSTS)
    subprocess.check_call([LAB, 'down'], stdout=subprocess.DEVNULL)


@pytest.fixture
def redeploy(tmp_path):
    def run(extravars=None, name='run', limit=None):
        return run_playbook(tmp_path, 'playbooks/redeploy.yml', 'inventory/lab', extravars, name=name, limit=limit)
    return run
