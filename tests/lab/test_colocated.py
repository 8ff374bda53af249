"""The colocated lab (LAB_COLOCATED=1 lab/lab up, inventory/lab-colocated): two SGLang servers on each of gpu1's and
gpu2's machines, each machine with two simulated GPUs. gpu1 and gpu2 own GPU 0 and serve on port 30000, gpu1b and
gpu2b own GPU 1 and serve on port 30001; gpu1 and gpu1b are two systemd units in one LXC container, gpu1b from an
sglang environment of its own; gpu2 and gpu2b two detached servers on bare metal sharing one; all four are workers
of the lab's router. Here: that shape, read from outside (HTTP, the router, nvidia-smi and the files in the
containers). Then issue 44's "Done when" on it: a forced redeploy of gpu1 under load sent straight to the
neighbours (who never notice; a leaked holder of gpu1's GPU ended, a foreign job on GPU 1 spared), a patch of gpu2
alone refused (gpu2b shares its sglang), gpu2 and gpu2b patched together, one window at a time. In this order: the
first two leave gpu2's machine as the lab started it (old, unpatched), which the third needs.

It brings up its own lab, on the instance LAB_COLOCATED_INSTANCE (default 9), never the one the other lab files
share (that of LAB_INSTANCE): a shape of its own, started fresh and taken down after the module. It asks for none of
the session's lab, so run alone it starts no other.
"""
import collections
import datetime
import json
import os
import subprocess
import time
import urllib.request

import pytest

from helpers import lab_instance
from helpers.ansible_run import run_playbook
from helpers.load import SteadyLoad
from helpers.lab_strays import PODMAN_ENV
from helpers.simulated import wait_for

INSTANCE = os.environ.get('LAB_COLOCATED_INSTANCE', '9')
ENV = dict(os.environ, LAB_INSTANCE=INSTANCE, LAB_COLOCATED='1')
SCHEDULER_MIB = 20610
# What lab/lab up adds beside the servers on GPU 0 (add_strays): an orphaned scheduler in gpu1's container, a leaked
# CUDA job on gpu2's machine.
STRAY_MIB = {'gpu1': 4096, 'gpu2': 2048}
# (server, machine, port, the GPU it owns, its service, its interpreter)
SERVERS = (('gpu1', 'gpu1', 'server_port', 0, 'sglang', '/opt/sglang/venv/bin/python'),
           ('gpu1b', 'gpu1', 'colocated_port', 1, 'sglang-b', '/opt/sglang-b/venv/bin/python'),
           ('gpu2', 'gpu2', 'server_port', 0, 'sglang', '/opt/sglang/venv/bin/python'),
           ('gpu2b', 'gpu2', 'colocated_port', 1, 'sglang-b', '/opt/sglang/venv/bin/python'))


@pytest.fixture(scope='module', autouse=True)
def lab_as_found():
    """This file uses no lab of the session (tests/lab/conftest.py's check is about that one): nothing to check."""
    yield


def describe():
    return json.loads(subprocess.check_output([lab_instance.LAB, 'describe'], universal_newlines=True, env=ENV))


@pytest.fixture(scope='module')
def colocated():
    """The colocated lab, fresh, on its own instance; down again after the module. GPUOPS_LAB_REUSE=1 (a developer's
    shortcut, as for the session's lab) keeps a running colocated lab instead, and leaves it running."""
    reuse = os.environ.get('GPUOPS_LAB_REUSE') == '1'
    with lab_instance.one_start_at_a_time():
        if not reuse:
            subprocess.check_call([lab_instance.LAB, 'down'], stdout=subprocess.DEVNULL, env=ENV)
        begun = time.monotonic()
        lab_instance.lab('up', env=ENV)
        # How long the shape costs (make test's budget): printed with -s, and in the report of a failed test.
        print('LAB_COLOCATED=1 lab/lab up on instance %s: %.1f s' % (INSTANCE, time.monotonic() - begun))
    try:
        described = describe()
        assert described['colocated'], 'lab/lab describe says the lab on instance %s is not colocated' % INSTANCE
        yield described
    finally:
        if not reuse:
            subprocess.check_call([lab_instance.LAB, 'down'], stdout=subprocess.DEVNULL, env=ENV)


def exec_(described, machine, *argv):
    return subprocess.check_output(['podman', 'exec', described['hosts'][machine]['container']] + list(argv),
                                   universal_newlines=True, env=PODMAN_ENV)


def url(described, server):
    name, machine, port = next(entry[:3] for entry in SERVERS if entry[0] == server)
    return 'http://%s:%d' % (described['hosts'][machine]['address'], described[port])


def get(address, timeout=5):
    with urllib.request.urlopen(address, timeout=timeout) as response:
        return response.status, json.load(response) if response.headers.get_content_type() == 'application/json' \
            else response.read()


def nvidia_smi(described, machine, query):
    out = exec_(described, machine, 'nvidia-smi', '--query-%s' % query, '--format=csv,noheader,nounits')
    return [[cell.strip() for cell in line.split(',')] for line in out.splitlines()]


def test_each_server_serves_on_its_own_port_holding_memory_on_its_own_gpu_only(colocated):
    for server, machine, dummy, gpu, dummy, dummy in SERVERS:
        status, info = get(url(colocated, server) + '/server_info')
        uuids = {int(index): uuid for index, uuid in nvidia_smi(colocated, machine, 'gpu=index,uuid')}
        internal = info['internal_states'][0]
        assert (status, internal['standin_gpus'], info['environment'].get('CUDA_VISIBLE_DEVICES')) == (
            200, [gpu], uuids[gpu]), server
        # Every scheduler of the server holds its GPU, as nvidia-smi lists it on that machine.
        held = {int(pid): uuid for pid, uuid in nvidia_smi(colocated, machine, 'compute-apps=pid,gpu_uuid')}
        holders = [pid for pid in internal['children'] if pid in held]
        assert holders and all(held[pid] == uuids[gpu] for pid in holders), (server, internal['children'], held)
        assert get(url(colocated, server) + '/health')[0] == 200, server


def test_each_gpu_holds_what_its_servers_and_the_labs_strays_hold(colocated):
    for machine in ('gpu1', 'gpu2'):
        used = [int(row[0]) for row in nvidia_smi(colocated, machine, 'gpu=memory.used')]
        assert used == [SCHEDULER_MIB + STRAY_MIB[machine], SCHEDULER_MIB], machine


def test_the_router_has_the_four_servers_as_healthy_workers(colocated):
    dummy, body = get(colocated['router_url'] + '/workers')
    workers = sorted((worker['url'], worker['is_healthy']) for worker in body['workers'])
    assert workers == sorted((url(colocated, server), True) for server, *dummy in SERVERS)


def test_each_server_has_its_own_service_files_and_gpu1b_its_own_sglang_environment(colocated):
    sites = {}
    for server, machine, dummy, dummy, service, python in SERVERS:
        folders = ('/etc/%s' % service, '/run/%s' % service, '/var/log/%s/server.log' % service)
        launch = json.loads(exec_(colocated, machine, 'cat', folders[0] + '/launch.json'))
        pid = get(url(colocated, server) + '/server_info')[1]['internal_states'][0]['pid']
        assert launch['python'] == python, server
        assert exec_(colocated, machine, 'cat', '/proc/%d/cmdline' % pid).split('\0')[0] == python, server
        exec_(colocated, machine, 'test', '-s', folders[2])
        if machine == 'gpu1':
            assert exec_(colocated, machine, 'systemctl', 'is-active', service).strip() == 'active', server
        else:
            assert int(exec_(colocated, machine, 'cat', '%s/%s.pid' % (folders[1], service))) == pid, server
        # Where the server's interpreter finds sglang (importing it needs torch, which the lab has not).
        sites[server] = exec_(colocated, machine, python, '-c', 'import os, sysconfig; print(os.path.realpath('
                              'sysconfig.get_paths()["purelib"]))').strip()
        exec_(colocated, machine, 'test', '-f', sites[server] + '/sglang/version.py')
    assert sites['gpu1b'] != sites['gpu1'] and sites['gpu2b'] == sites['gpu2'], sites


def test_the_driver_information_files_name_each_gpus_device_minor(colocated):
    for machine in ('gpu1', 'gpu2'):
        config = json.loads(exec_(colocated, machine, 'cat', '/var/lib/nvidia-smi-sim/gpus.json'))
        buses = {row[0]: int(row[1]) for row in nvidia_smi(colocated, machine, 'gpu=pci.bus_id,index')}
        for gpu in config['gpus']:
            folder = '%s/%s' % (config['information_dir'], gpu['bus_id'][4:].lower())
            fields = dict(line.split(':', 1) for line in exec_(colocated, machine, 'cat', folder + '/information')
                          .splitlines())
            assert int(fields['Device Minor']) == gpu['minor'] and gpu['device'] == '/dev/nvidia%d' % gpu['minor']
            assert buses[gpu['bus_id']] == gpu['index']
        assert sorted(gpu['minor'] for gpu in config['gpus']) == [0, 1], machine


# Issue 44's "Done when": the redeploy scenarios.

def redeploy(described, tmp_path, name, limit, extravars=None):
    return run_playbook(tmp_path, 'playbooks/redeploy.yml', described['colocated_inventory'], extravars, name=name,
                        limit=limit)


def report(described, server):
    with open(os.path.join(described['reports_dir'], server + '.json')) as handle:
        return json.load(handle)


def machine_of(server):
    return next(entry[1] for entry in SERVERS if entry[0] == server)


def gpu_of(server):
    return next(entry[3] for entry in SERVERS if entry[0] == server)


def as_seen(described, server):
    """What a neighbour must keep through another server's redeploy: its server's PID and schedulers, the GPU memory
    each of them holds and its GPU's memory, as nvidia-smi in its container reads them."""
    internal = get(url(described, server) + '/server_info')[1]['internal_states'][0]
    machine, gpu = machine_of(server), gpu_of(server)
    apps = {int(pid): int(used) for pid, used in nvidia_smi(described, machine, 'compute-apps=pid,used_memory')}
    used = [int(row[0]) for row in nvidia_smi(described, machine, 'gpu=memory.used')]
    return {'pid': internal['pid'], 'schedulers': {pid: apps.get(pid) for pid in internal['children']},
            'gpu_memory_used_mib': used[gpu]}


def holder_in(described, machine, tmp_name, *holder_args):
    """A simulated CUDA process started in the machine's container outside any server (as lab/lab's add_strays
    starts its strays); its PID once it holds what it was given."""
    ready = '/tmp/%s.pid' % tmp_name
    exec_(described, machine, 'rm', '-f', ready)
    exec_(described, machine, 'sh', '-c', 'setsid -f /usr/bin/python3 /opt/lab/simulators/gpu_holder.py "$@" '
          '--ready %s >/dev/null 2>&1 </dev/null' % ready, 'holder', *holder_args)
    wait_for(lambda: subprocess.call(['podman', 'exec', described['hosts'][machine]['container'], 'test', '-s', ready],
                                     env=PODMAN_ENV) == 0, 30, '%s started in %s' % (tmp_name, machine))
    return int(exec_(described, machine, 'cat', ready))


def alive(described, machine, pid):
    return subprocess.call(['podman', 'exec', described['hosts'][machine]['container'], 'kill', '-0', str(pid)],
                           env=PODMAN_ENV, stderr=subprocess.DEVNULL) == 0


def results_of(run, host, action):
    """The results (ok or failed) of every task of this module the run ran on the host."""
    return [event['event_data'] for event in run.events
            if event.get('event') in ('runner_on_ok', 'runner_on_failed')
            and event['event_data'].get('host') == host and event['event_data'].get('task_action') == action]


def releases(run, host):
    """What every GPU release of the host returned: gpu_release's own, or the one the start ran (sglang_server's
    release)."""
    found = [data['res'] for data in results_of(run, host, 'gpuops.sglang.gpu_release')]
    found += [data['res']['release'] for data in results_of(run, host, 'gpuops.sglang.sglang_server')
              if data['res'].get('release')]
    return found


def router_workers(described):
    return sorted((worker['url'], worker['is_healthy']) for worker in get(described['router_url'] + '/workers')[1]['workers'])


def test_a_forced_redeploy_of_gpu1_leaves_its_neighbours_serving_untouched_and_ends_only_its_gpus_holders(
        colocated, tmp_path):
    # A leaked CUDA job on gpu1's GPU 0 (/dev/nvidia0), and a foreign job (not an SGLang server) on GPU 1, gpu1b's.
    leaked = holder_in(colocated, 'gpu1', 'leaked', '--title', 'python3 leaked_cuda_job.py', '--hold', '0=1024')
    foreign = holder_in(colocated, 'gpu1', 'foreign', '--title', 'python3 train_other_model.py', '--hold', '1=3072',
                        '--open', '/dev/nvidiactl', '--open', '/dev/nvidia-uvm')
    try:
        neighbours = ('gpu1b', 'gpu2b')
        before = {server: as_seen(colocated, server) for server in neighbours}
        gpu1_before = get(url(colocated, 'gpu1') + '/server_info')[1]['internal_states'][0]['pid']
        with SteadyLoad([url(colocated, server) for server in neighbours]) as load:
            answered_before = dict(load.answered)
            run = redeploy(colocated, tmp_path, 'gpu1', 'gpu1', {'sglang_force_restart': True})
            answered_during = load.answered - collections.Counter(answered_before)
        assert run.rc == 0, run.stdout[-4000:]
        # Every request the neighbours got was answered, many of them while gpu1 was redeployed.
        assert not load.failed and all(answered_during[url(colocated, server)] for server in neighbours), (
            dict(load.failed), load.failures, answered_during)
        after = {server: as_seen(colocated, server) for server in neighbours}
        assert after == before
        written = report(colocated, 'gpu1')
        assert (written['status'], written['healthy']) == ('redeployed', True), written
        assert get(url(colocated, 'gpu1') + '/server_info')[1]['internal_states'][0]['pid'] != gpu1_before
        # The leaked holder of gpu1's GPU was ended by gpu1's release; the foreign job on GPU 1 lives, listed as spared.
        released = releases(run, 'gpu1')
        assert not alive(colocated, 'gpu1', leaked)
        assert leaked in [entry['pid'] for result in released for entry in result['killed']], released
        assert alive(colocated, 'gpu1', foreign)
        spared = [entry for result in released for entry in result['spared'] if entry['pid'] == foreign]
        assert spared and spared[0]['why'] == 'other GPUs' and 'train_other_model' in spared[0]['cmdline'], released
        assert router_workers(colocated) == sorted((url(colocated, server), True) for server, *dummy in SERVERS)
    finally:
        for pid in (leaked, foreign):
            subprocess.call(['podman', 'exec', colocated['hosts']['gpu1']['container'], 'kill', '-KILL', str(pid)],
                            env=PODMAN_ENV, stderr=subprocess.DEVNULL)


def test_a_patch_of_gpu2_alone_is_refused_before_anything_stops_naming_gpu2b_and_their_shared_environment(
        colocated, tmp_path):
    before = {server: as_seen(colocated, server) for server in ('gpu2', 'gpu2b')}
    run = redeploy(colocated, tmp_path, 'gpu2-alone', 'gpu2')
    assert run.rc != 0
    message = ' '.join(run.failure_messages('gpu2'))
    site_packages = exec_(colocated, 'gpu2', '/opt/sglang/venv/bin/python', '-c', 'import sysconfig; print('
                          'sysconfig.get_paths()["purelib"])').strip()
    assert 'gpu2b' in message and site_packages in message and 'own environment' in message, message
    written = report(colocated, 'gpu2')
    assert written['status'] == 'failed' and written['reason'].startswith('nothing was stopped'), written
    assert results_of(run, 'gpu2', 'gpuops.sglang.sglang_server') == []
    assert {server: as_seen(colocated, server) for server in ('gpu2', 'gpu2b')} == before


def test_gpu2_and_gpu2b_redeployed_together_take_one_window_at_a_time_and_both_serve_patched_in_the_router(
        colocated, tmp_path):
    servers = ('gpu2', 'gpu2b')
    before = {server: as_seen(colocated, server)['pid'] for server in servers}
    run = redeploy(colocated, tmp_path, 'gpu2-and-gpu2b', 'gpu2,gpu2b')
    assert run.rc == 0, run.stdout[-4000:]
    written = {server: report(colocated, server) for server in servers}
    for server in servers:
        assert (written[server]['status'], written[server]['healthy']) == ('redeployed', True), written[server]
        assert as_seen(colocated, server)['pid'] != before[server]
    # Their one sglang patched once, in the first window; the second server's window found it applied.
    assert sorted(written[server]['patch'] for server in servers) == ['already applied', 'applied now'], written
    # One window at a time on the machine: each server's stop began after the other's confirmation, or before its arm.
    windows = {}
    for server in servers:
        stop = [data for data in results_of(run, server, 'gpuops.sglang.sglang_server')
                if data['task'] == 'Stop the server gracefully (the outage starts here)']
        confirm = [data for data in results_of(run, server, 'gpuops.sglang.sglang_guard')
                   if data['task'] == 'Confirm the new server (the guard is dropped)']
        assert len(stop) == 1 and len(confirm) == 1, (server, stop, confirm, [
            (event.get('event'), event['event_data'].get('task')) for event in run.events
            if event.get('event_data', {}).get('host') == server])
        windows[server] = (datetime.datetime.fromisoformat(stop[0]['start']),
                           datetime.datetime.fromisoformat(confirm[0]['end']))
    first, second = sorted(windows.values())
    assert first[1] < second[0], windows
    assert router_workers(colocated) == sorted((url(colocated, server), True) for server, *dummy in SERVERS)
