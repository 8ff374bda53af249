"""The lab's two-node server (lab/lab up --multinode): mn1 is rank 0 (bare metal, detached, serves HTTP),
mn2 rank 1 (an LXC container on pve1 under systemd, no HTTP). Only what the single-node scenarios do not
cover: the group redeployed and verified as one, a dead rank found behind a rank 0 that still answers
/health, a failure on one node leaving both untouched or rolling both back, and both guards restoring
after the controller died. Every check from outside: rank 0's /health and a real /generate, the ranks'
processes and files read in their containers."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from helpers.ansible_run import ANSIBLE_ENV, REPO, run_playbook
from helpers.lab_strays import PODMAN_ENV
from helpers.simulated import wait_for
from helpers import lab_instance

INVENTORY = lab_instance.multinode_inventory()
NODES = ('mn1', 'mn2')
RANK0_URL = lab_instance.server_url('mn1')
ROUTER = lab_instance.router_url()
REPORTS = lab_instance.reports_dir()
SGLANG_PYTHON = '/opt/sglang/venv/bin/python'
DRAIN_GATE = '/run/lab-standin-drain-gate'
CHANGE = {'sglang_max_running_requests': 96}
# The guards' deadline fires first (window budget 1 + 2*2 + 2*2 + 5 + 10 = 24 s), as in test_outage_window.
FAST_GUARD = {'sglang_term_timeout': 2, 'sglang_gpu_release_timeout': 5, 'sglang_health_timeout': 10,
              'sglang_drain_timeout': 1, 'sglang_router_timeout': 2, 'sglang_rollback_deadline': 24}


class Node(object):
    def __init__(self, name):
        self.name = name
        self.container, self.address = lab_instance.container(name), lab_instance.address(name)
        self._site_packages = None

    def exec_(self, *argv):
        return subprocess.check_output(['podman', 'exec', self.container] + list(argv), universal_newlines=True,
                                       env=PODMAN_ENV)

    def server_pids(self):
        """The pids of this node's stand-in rank (its launch_server process), read in its container."""
        found = subprocess.run(['podman', 'exec', self.container, 'pgrep', '-f', 'sglang_standin.launch_server'],
                               stdout=subprocess.PIPE, universal_newlines=True, env=PODMAN_ENV)
        return sorted(int(pid) for pid in found.stdout.split())

    def sha256(self, path):
        return self.exec_('sha256sum', path).split()[0]

    @property
    def site_packages(self):
        if self._site_packages is None:
            self._site_packages = self.exec_(
                SGLANG_PYTHON, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])').strip()
        return self._site_packages

    def sglang_file(self, relative):
        return '%s/sglang/%s' % (self.site_packages, relative)

    def files(self):
        watched = ('/etc/sglang/launch.json', self.sglang_file('srt/speculative/eagle_worker.py'),
                   self.sglang_file('version.py'))
        return dict((path, self.sha256(path)) for path in watched)

    def launch(self):
        return json.loads(self.exec_('cat', '/etc/sglang/launch.json'))

    def fired(self):
        try:
            return json.loads(self.exec_('cat', '/var/lib/gpuops-sglang/sglang/fired.json'))
        except subprocess.CalledProcessError:
            return None


def request(method, path, body=None, timeout=10):
    """(status, parsed JSON or None) from rank 0, from outside; status None when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(RANK0_URL + path, data=data, method=method,
                                 headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            text = response.read()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except OSError:
        return None, None


def health():
    return request('GET', '/health')[0]


def generates():
    status, answer = request('POST', '/generate', {'text': 'ping', 'sampling_params': {'max_new_tokens': 2}})
    return status == 200 and isinstance((answer or {}).get('text'), str)


def router_workers():
    with urllib.request.urlopen(ROUTER + '/workers', timeout=5) as response:
        return json.load(response)['workers']


def report(name):
    with open(os.path.join(REPORTS, name + '.json')) as handle:
        return json.load(handle)


def state(nodes):
    return dict((node.name, (node.server_pids(), node.files())) for node in nodes.values())


@pytest.fixture(scope='module')
def group(lab, tmp_path_factory):
    """The two-node server beside the lab's hosts, redeployed once (the patch on both ranks); taken down again
    after the module (rank 0 out of the lab's router, both containers gone), so the lab files run after this one
    on the same lab (make matrix) find the router's workers and the machine as the session fixture left them."""
    try:
        with lab_instance.one_start_at_a_time():
            lab_instance.lab('up', '--multinode')
            nodes = dict((name, Node(name)) for name in NODES)
            seeded = state(nodes)
            baseline = run_playbook(tmp_path_factory.mktemp('multinode'), 'playbooks/redeploy.yml', INVENTORY,
                                    name='multinode-baseline')
        assert baseline.rc == 0, baseline.stdout[-3000:]
        nodes['seeded'] = seeded
        yield nodes
    finally:
        lab.remove_hosts(*NODES)


@pytest.fixture
def redeploy_group(tmp_path):
    def run(extravars=None, name='run', cmdline=None):
        return run_playbook(tmp_path, 'playbooks/redeploy.yml', INVENTORY, extravars, name=name, cmdline=cmdline)
    return run


def nodes_of(group):
    return dict((name, group[name]) for name in NODES)


def test_a_group_redeploy_patches_and_restarts_every_rank_and_a_rerun_is_a_noop(group, redeploy_group):
    nodes = nodes_of(group)
    seeded = group['seeded']
    for name, node in nodes.items():
        written = report(name)
        assert written['status'] == 'redeployed', written
        assert written['group']['name'] == 'mn' and written['group']['nnodes'] == 2
        assert written['group']['rank'] == (0 if name == 'mn1' else 1)
        assert written['group']['outcome'] == 'redeployed' and written['group']['failed_nodes'] == []
        # Both ranks are new processes, and both run the patched sglang.
        assert node.server_pids() and set(node.server_pids()).isdisjoint(seeded[name][0])
        patched = node.sha256(node.sglang_file('srt/speculative/eagle_worker.py'))
        assert patched != seeded[name][1][node.sglang_file('srt/speculative/eagle_worker.py')]
        args = node.launch()['args']
        assert args[args.index('--nnodes') + 1] == '2'
        assert args[args.index('--node-rank') + 1] == ('0' if name == 'mn1' else '1')
        assert args[args.index('--dist-init-addr') + 1] == lab_instance.address('mn1') + ':5000'
    assert nodes['mn1'].sha256(nodes['mn1'].sglang_file('srt/speculative/eagle_worker.py')) == \
        nodes['mn2'].sha256(nodes['mn2'].sglang_file('srt/speculative/eagle_worker.py'))
    # The server went out of the lab's router once (rank 0's URL) and back in once verified.
    assert report('mn1')['router']['removed'] is True and report('mn1')['router']['readmitted'] is True
    assert report('mn2')['router']['removed'] is False and report('mn2')['router']['member_before'] is None
    assert RANK0_URL in [worker['url'] for worker in router_workers() if worker['is_healthy']]
    # Rank 0 serves for the group, rank 1 serves no HTTP at all.
    info = request('GET', '/server_info')[1]
    assert info['nnodes'] == 2 and info['node_rank'] == 0 and info['dynamic_spec_patch_present'] is True
    assert generates()
    assert subprocess.run(['curl', '-s', '-o', '/dev/null', lab_instance.server_url('mn2') + '/health']).returncode != 0

    before = state(nodes)
    again = redeploy_group(name='noop')
    assert again.rc == 0, again.stdout[-3000:]
    for name in NODES:
        assert report(name)['status'] == 'unchanged' and report(name)['group']['outcome'] == 'unchanged'
    assert state(nodes) == before

    # Check mode with a change to make: the group says it would redeploy, and nothing moves on either node.
    checked = redeploy_group(CHANGE, name='check', cmdline='--check')
    assert checked.rc == 0, checked.stdout[-3000:]
    assert state(nodes) == before and generates()


def test_a_dead_rank_behind_a_healthy_rank_0_is_found_and_the_group_restarted(group, redeploy_group):
    nodes = nodes_of(group)
    rank1 = nodes['mn2']
    rank1.exec_('systemctl', 'kill', '--signal=SIGKILL', 'sglang.service')
    wait_for(lambda: not rank1.server_pids(), 30, 'rank 1 gone')
    # Upstream's failure (sglang issue 4780): rank 0 still answers /health, its generation fails.
    wait_for(lambda: not generates(), 30, 'rank 0 failing to generate')
    assert health() == 200
    run = redeploy_group(name='dead-rank')
    assert run.rc == 0, run.stdout[-3000:]
    for name in NODES:
        written = report(name)
        assert written['status'] == 'redeployed', written
        assert any(reason.startswith('mn2: ') for reason in written['reasons']), written['reasons']
        assert any(reason.startswith('mn1: generation fails') for reason in written['reasons']), written['reasons']
    assert generates() and rank1.server_pids()


def test_a_patch_that_does_not_apply_on_rank_1_only_leaves_both_nodes_untouched(group, redeploy_group, tmp_path):
    nodes = nodes_of(group)
    rank1 = nodes['mn2']
    version_py = rank1.sglang_file('version.py')
    first_line = nodes['mn1'].exec_('head', '-1', nodes['mn1'].sglang_file('version.py')).rstrip('\n')
    note = tmp_path / 'version-note.diff'
    note.write_text('--- a/sglang/version.py\n+++ b/sglang/version.py\n@@ -1 +1 @@\n-{0}\n+{0}  # note\n'
                    .format(first_line))
    original = rank1.exec_('cat', version_py)
    # Rank 1's sglang differs where the patch applies: the patch applies on mn1, not on mn2.
    rank1.exec_('sed', '-i', '1s/$/  # changed by hand/', version_py)
    try:
        before = state(nodes)
        # Which code reads the dynamic-speculation variable is not at stake (the env-mode rule, issue 43).
        run = redeploy_group({'sglang_patch_file': str(note), 'sglang_dynamic_spec_env_read_by': 'installed'}, name='patch-rank1')
        assert run.rc != 0
        assert 'applies neither forwards nor backwards' in ' '.join(run.failure_messages('mn2'))
        assert 'mn2' in ' '.join(run.failure_messages('mn1'))
        assert state(nodes) == before
        assert health() == 200 and generates()
        for name in NODES:
            written = report(name)
            assert written['status'] == 'failed' and written['group']['outcome'] == 'failed', written
    finally:
        subprocess.run(['podman', 'exec', '-i', rank1.container, 'tee', version_py], input=original,
                       universal_newlines=True, stdout=subprocess.DEVNULL, env=PODMAN_ENV, check=True)


def test_a_rank_1_that_fails_to_start_rolls_both_nodes_back(group, redeploy_group):
    nodes = nodes_of(group)
    files_before = dict((name, node.files()) for name, node in nodes.items())
    pids_before = dict((name, node.server_pids()) for name, node in nodes.items())
    run = redeploy_group({'sglang_extra_args': ['--no-such-flag']}, name='rank1-start')
    assert run.rc != 0
    # Where rank 1 is caught depends on how fast it exits: within its start's settle time (the start fails), or
    # after it (the check once rank 0 was verified); either way the message names what happened to mn2.
    said = ' '.join(run.failure_messages('mn2'))
    assert 'did not become healthy' in said or ('rank 1 of server group' in said and 'no longer runs on mn2' in said)
    assert 'mn2' in ' '.join(run.failure_messages('mn1'))
    for name, node in nodes.items():
        written = report(name)
        assert written['status'] == 'rolled_back', written
        assert written['group']['outcome'] == 'rolled_back' and 'mn2' in written['group']['failed_nodes']
        # The previous group: the previous files, every rank started again (new processes).
        assert node.files() == files_before[name]
        assert node.server_pids() and set(node.server_pids()).isdisjoint(pids_before[name])
        assert '--no-such-flag' not in node.launch()['args']
    assert health() == 200 and generates()


def test_a_controller_killed_mid_window_is_restored_on_both_nodes_by_their_guards(group):
    nodes = nodes_of(group)
    files_before = dict((name, node.files()) for name, node in nodes.items())
    fired_before = dict((name, node.fired()) for name, node in nodes.items())
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', INVENTORY,
            os.path.join(REPO, 'playbooks/redeploy.yml'), '-e', json.dumps(dict(CHANGE, **FAST_GUARD))]
    rank0 = nodes['mn1']
    rank0.exec_('touch', DRAIN_GATE)
    try:
        proc = subprocess.Popen(argv, env=dict(os.environ, **ANSIBLE_ENV), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        # Rank 0's stop began (its drain is held): every guard is armed, the window is open.
        # The run's preflight and preparation on both nodes come first: over 60 s seen with the whole suite beside
        # it (as lab_window.wait_outage_started); the bound only matters when the run never gets there.
        wait_for(lambda: health() != 200, 180, 'rank 0 stopping')
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        killed = time.monotonic()
    finally:
        rank0.exec_('rm', '-f', DRAIN_GATE)
    wait_for(generates, FAST_GUARD['sglang_rollback_deadline'] + 40, 'the previous group generating again')
    print('the group generated again %.1f s after the SIGKILL' % (time.monotonic() - killed))
    for name, node in nodes.items():
        wait_for(lambda: node.fired() not in (None, fired_before[name]), 30, '%s: the guard report' % name)
        assert node.fired()['status'] == 'rolled_back'
        assert node.files() == files_before[name]
        assert node.server_pids()
        assert report(name)['status'] == 'failed'
    assert request('GET', '/server_info')[1]['max_running_requests'] == 64
    # Rank 0's guard put the restored server back into the router it was in.
    wait_for(lambda: RANK0_URL in [worker['url'] for worker in router_workers()], 30, 'rank 0 back in the router')
