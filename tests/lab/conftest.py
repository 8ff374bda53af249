import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest

from helpers.ansible_run import run_playbook
from helpers.lab_strays import PODMAN_ENV

from helpers import lab_instance

LAB = lab_instance.LAB
# The hosts every lab test starts from; the fleet's further hosts (LAB_GPU_HOSTS=N: gpu3..gpu8) and the second
# Proxmox stand-in are there once a test brought them up (test_fleet).
HOSTS = ('gpu1', 'gpu2', 'pve1')
SGLANG_PYTHON = '/opt/sglang/venv/bin/python'


class LabHost(object):
    def __init__(self, name):
        self.name = name
        self.container, self.address = lab_instance.container(name), lab_instance.address(name)
        self._site_packages = None

    def exec_(self, *argv):
        return subprocess.check_output(['podman', 'exec', self.container] + list(argv), universal_newlines=True,
                                       env=PODMAN_ENV)

    def server_info(self):
        with urllib.request.urlopen(lab_instance.server_url(self.name) + '/server_info', timeout=5) as response:
            return json.load(response)

    def healthy(self):
        try:
            with urllib.request.urlopen(lab_instance.server_url(self.name) + '/health', timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    def server_pid(self):
        return self.server_info()['internal_states'][0]['pid']

    def sha256(self, path):
        return self.exec_('sha256sum', path).split()[0]

    @property
    def site_packages(self):
        """The server venv's site-packages: lib/python3.11/... on the Debian 12 image, lib/python3.13/... on 13."""
        if self._site_packages is None:
            self._site_packages = self.exec_(
                SGLANG_PYTHON, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])').strip()
        return self._site_packages

    def sglang_file(self, relative):
        """A file of the installed sglang package, e.g. sglang_file('version.py')."""
        return '%s/sglang/%s' % (self.site_packages, relative)

    def target(self):
        """(Debian major version, Python major.minor of /usr/bin/python3, which the inventory uses)."""
        debian = self.exec_('cat', '/etc/debian_version').split('.')[0]
        python = self.exec_('/usr/bin/python3', '-c', 'import sys; print("%d.%d" % sys.version_info[:2])').strip()
        return debian, python


class Lab(dict):
    """The lab's hosts by inventory name, and the podman verbs the fault tests need."""

    def add_host(self, name):
        self[name] = LabHost(name)

    @staticmethod
    def podman(*argv):
        subprocess.check_call(['podman'] + list(argv), env=PODMAN_ENV, stdout=subprocess.DEVNULL)

    def restart_container(self, host):
        """Start the stopped container of a lab host again and wait until its sshd accepts connections."""
        self.podman('start', lab_instance.container(host))
        address = lab_instance.address(host)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection((address, 2222), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError('sshd of %s did not come back' % host)


@pytest.fixture(scope='session')
def lab(tmp_path_factory):
    """A fresh lab, redeployed: the state every scenario starts from.

    The lab starts as a redeploy leaves it (LAB_SEED=redeployed: patched, dynamic speculation on, no stray), and
    the baseline redeploy, which must succeed, finds it so: the old-to-new redeploy of a fresh lab is what
    `make demo`, molecule and the dashboard's tests run, and here it would only repeat itself on every lab.
    GPUOPS_LAB_REUSE=1 (a developer's shortcut, never set in CI) keeps a running lab instead of
    rebuilding it; the baseline redeploy still runs and must succeed.
    """
    reuse = os.environ.get('GPUOPS_LAB_REUSE') == '1'
    with lab_instance.one_start_at_a_time():
        if not reuse:
            subprocess.check_call([LAB, 'down'], stdout=subprocess.DEVNULL)
        subprocess.check_call([LAB, 'up'], stdout=subprocess.DEVNULL, env=dict(os.environ, LAB_SEED='redeployed'))
        baseline = run_playbook(tmp_path_factory.mktemp('baseline'), 'playbooks/redeploy.yml', lab_instance.inventory())
    assert baseline.rc == 0, baseline.stdout[-3000:]
    yield Lab((name, LabHost(name)) for name in HOSTS)
    if not reuse:
        subprocess.check_call([LAB, 'down'], stdout=subprocess.DEVNULL)


@pytest.fixture
def redeploy(tmp_path):
    def run(extravars=None, name='run', limit=None, cmdline=None):
        return run_playbook(tmp_path, 'playbooks/redeploy.yml', lab_instance.inventory(), extravars, name=name,
                            limit=limit, cmdline=cmdline)
    return run
