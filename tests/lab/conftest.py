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

    def remove_hosts(self, *names):
        """Take hosts a module's fixture added (gpu3.., mn1, mn2) out again: out of the router, their containers
        and reports gone (lab/lab remove), so the next test file starts from the lab the session fixture made."""
        subprocess.check_call([LAB, 'remove'] + list(names), stdout=subprocess.DEVNULL)
        for name in names:
            self.pop(name, None)

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
        lab_instance.lab('up', env=dict(os.environ, LAB_SEED='redeployed'))
        baseline = run_playbook(tmp_path_factory.mktemp('baseline'), 'playbooks/redeploy.yml', lab_instance.inventory())
    assert baseline.rc == 0, baseline.stdout[-3000:]
    yield Lab((name, LabHost(name)) for name in HOSTS)
    if not reuse:
        subprocess.check_call([LAB, 'down'], stdout=subprocess.DEVNULL)


# What a lab file may leave behind: the lab as the session fixture made it, so that the next file in the same
# session (make matrix runs every lab file on one lab) starts from it. Each was once left by a file and failed
# later ones (issue 47): a changed setting or environment on a server, a server down or out of the router, a host
# a module's fixture added still running.
BASE_SETTINGS = {'max_running_requests': 64}


def lab_leftovers(lab):
    """What differs from the session fixture's lab, one line each (none: as it was)."""
    found = []
    running = set(subprocess.run(['podman', 'ps', '--format', '{{.Names}}'], stdout=subprocess.PIPE,
                                 universal_newlines=True, env=PODMAN_ENV, check=True).stdout.split())
    added = [name for name in lab_instance.describe()['hosts']
             if name not in HOSTS + ('pve2',) and lab_instance.container(name) in running]
    if added:
        found.append('hosts added to the lab still run: %s (lab/lab remove them)' % ', '.join(added))
    with urllib.request.urlopen(lab_instance.router_url() + '/workers', timeout=10) as response:
        workers = sorted(worker['url'] for worker in json.load(response)['workers'])
    wanted = sorted(lab_instance.server_url(name) for name in ('gpu1', 'gpu2'))
    if workers != wanted:
        found.append('the router lists %s, not %s' % (workers, wanted))
    for name in ('gpu1', 'gpu2'):
        if not lab[name].healthy():
            found.append('%s does not serve (/health)' % name)
            continue
        try:
            info = lab[name].server_info()
        except OSError as exc:
            found.append('%s: /server_info answered %s (an API key left on?)' % (name, exc))
            continue
        changed = {key: info.get(key) for key, value in BASE_SETTINGS.items() if info.get(key) != value}
        # The stand-in's own knobs (warm-up, slowdown, errors) are not SGLANG_*: /server_info does not show them.
        launched = json.loads(lab[name].exec_('cat', '/etc/sglang/launch.json')).get('environment') or {}
        lab_environment = sorted(key for key in launched if key.startswith('LAB_STANDIN_'))
        if changed or lab_environment:
            found.append('%s serves other settings than the lab\'s: %s%s' % (
                name, changed or '', (' environment ' + ', '.join(lab_environment)) if lab_environment else ''))
    return found


@pytest.fixture(scope='module', autouse=True)
def lab_as_found(request, lab):
    """After each lab file (every one uses the lab): the lab is as the session fixture made it, or this file is named
    as the one that left something, instead of a later file failing for it (make matrix before issue 47). Torn
    down after the file's own module fixtures (test_fleet's gpu3, test_multinode's two-node server)."""
    yield
    leftovers = lab_leftovers(lab)
    assert not leftovers, '%s left the lab changed for the files after it: %s' % (
        request.module.__name__, '; '.join(leftovers))


@pytest.fixture
def redeploy(tmp_path):
    def run(extravars=None, name='run', limit=None, cmdline=None):
        return run_playbook(tmp_path, 'playbooks/redeploy.yml', lab_instance.inventory(), extravars, name=name,
                            limit=limit, cmdline=cmdline)
    return run
