"""Test set-ups built on the simulators in lab/simulators: GPUs held by real processes, and containers."""
import json
import os
import shutil
import socket
import subprocess
import sys
import time

from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import read_proc_record
from helpers.ansible_run import REPO

SIMULATORS = os.path.join(REPO, 'lab', 'simulators')
HOLDER = os.path.join(SIMULATORS, 'gpu_holder.py')


def free_port():
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def detached_server_args(root, name, launch, url, **extra):
    """sglang_server's options for a test server run detached from `launch`, its pid file and log in `root`."""
    args = dict(manager='detached', service_name=name, launch_file=str(launch), pidfile=str(root / ('%s.pid' % name)),
                log_file=str(root / ('%s.log' % name)), url=url, term_timeout=10, health_timeout=20)
    args.update(extra)
    return args


def wait_for(predicate, timeout=10.0, what='condition'):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError('timed out waiting for %s' % what)


def write_wrapper(path, env_name, env_value, script):
    """A tiny executable that runs a simulator with its state folder fixed (no user input inside)."""
    with open(path, 'w') as handle:
        handle.write('#!/bin/sh\n%s=%s exec %s %s "$@"\n' % (env_name, env_value, sys.executable, script))
    os.chmod(path, 0o755)
    return path


def gate_opened_by_first_call(folder, tool, gate, delay=0.5):
    """A wrapper of `tool` whose first call removes `gate` `delay` seconds later, in the background.

    A drain held by the gate (gpu_holder's --on-term gate=PATH) then lasts until the module under test
    has started calling the tool, and a little more: the module sees it still draining, whatever the
    machine's load made of the module's start-up.
    """
    path = os.path.join(str(folder), 'gate-opening-' + os.path.basename(tool))
    with open(path, 'w') as handle:
        handle.write('#!/bin/sh\n'
                     'if [ -e "%(gate)s" ] && mkdir "%(gate)s.opening" 2>/dev/null; then\n'
                     '  (sleep %(delay)s; rm -f "%(gate)s") </dev/null >/dev/null 2>&1 &\n'
                     'fi\n'
                     'exec "%(tool)s" "$@"\n' % {'gate': gate, 'delay': delay, 'tool': tool})
    os.chmod(path, 0o755)
    return path


def is_running(proc):
    if proc.poll() is not None:
        return False
    record = read_proc_record(proc.pid)
    return record is not None and not record.is_zombie


class SimulatedGpuHost(object):
    """Device files, an nvidia-smi simulator and real holder processes under tmp_path."""

    def __init__(self, tmp_path, gpus=2, total_mib=143771, release_delay=0.15):
        self.root = tmp_path / 'gpuhost'
        self.dev = self.root / 'dev'
        self.state = self.root / 'nvidia-smi-state'
        (self.dev / 'nvidia-caps').mkdir(parents=True)
        self.state.mkdir(parents=True)
        for name in ['nvidiactl', 'nvidia-uvm', 'nvidia-uvm-tools', 'nvidia-caps/nvidia-cap1',
                     'nvidia-caps/nvidia-cap2'] + ['nvidia%d' % i for i in range(gpus)]:
            (self.dev / name).write_text('')
        self.config = {'release_delay': release_delay, 'gpus': [
            {'index': i, 'uuid': 'GPU-sim-%04d' % i, 'total_mib': total_mib,
             'device': str(self.dev / ('nvidia%d' % i)), 'leak_mib': 0} for i in range(gpus)]}
        self.save()
        bin_dir = self.root / 'bin'
        bin_dir.mkdir()
        self.nvidia_smi = write_wrapper(str(bin_dir / 'nvidia-smi'), 'NVIDIA_SMI_SIM_STATE', str(self.state),
                                        os.path.join(SIMULATORS, 'nvidia_smi.py'))
        self.procs = []

    def save(self):
        (self.state / 'gpus.json').write_text(json.dumps(self.config))

    def write_driver_information(self, minors=None):
        """The driver's per-GPU information files (lab/simulators/gpu_config.py) under root/driver-info, which
        gpu_release's driver_info reads; GPU i gets device minor minors[i] (default i) and /dev/nvidiaMINOR as its
        device file. Returns the folder."""
        folder = self.root / 'driver-info'
        for gpu, minor in zip(self.config['gpus'], minors or range(len(self.config['gpus']))):
            gpu['minor'], gpu['device'] = minor, str(self.dev / ('nvidia%d' % minor))
        self.config['information_dir'] = str(folder)
        self.save()
        subprocess.check_call([sys.executable, os.path.join(SIMULATORS, 'gpu_config.py'), '--state', str(self.state)])
        return str(folder)

    def set_leak(self, index, mib):
        self.config['gpus'][index]['leak_mib'] = mib
        self.save()

    def break_driver(self):
        (self.state / 'fail').write_text("NVIDIA-SMI has failed because it couldn't communicate with the "
                                         "NVIDIA driver. Make sure that the latest NVIDIA driver is installed "
                                         "and running.\n")

    @property
    def device_globs(self):
        return [str(self.dev / 'nvidia[0-9]*'), str(self.dev / 'nvidiactl'), str(self.dev / 'nvidia-uvm*'),
                str(self.dev / 'nvidia-caps/*')]

    def program(self, name, copy=True):
        """The interpreter as a program called `name`: a copy (its own /proc/PID/exe, as a daemon's binary
        has) or a symlink (the kernel then names the process after the link, its exe stays the interpreter)."""
        path = self.root / 'programs' / name
        path.parent.mkdir(exist_ok=True)
        interpreter = os.path.realpath(sys.executable)
        if copy:
            shutil.copy2(interpreter, str(path))
        else:
            os.symlink(interpreter, str(path))
        return str(path)

    def start(self, title=None, hold=(), open_=(), on_term='exit', prefix=(), program=None):
        ready = self.root / ('ready-%d' % len(self.procs))
        argv = list(prefix) + [program or sys.executable, HOLDER, '--state', str(self.state), '--on-term', on_term,
                               '--ready', str(ready)]
        if title:
            argv += ['--title', title]
        for index, mib in hold:
            argv += ['--hold', '%d=%d' % (index, mib)]
        for name in open_:
            argv += ['--open', str(self.dev / name)]
        proc = subprocess.Popen(argv, start_new_session=True)
        self.procs.append(proc)
        wait_for(ready.exists, what='holder %r' % title)
        proc.inner_pid = int(ready.read_text())
        return proc

    def query(self, fields):
        """nvidia-smi's CSV rows for --query-FIELDS, each a list of stripped strings."""
        out = subprocess.check_output([self.nvidia_smi, '--query-%s' % fields, '--format=csv,noheader,nounits'],
                                      universal_newlines=True)
        return [[value.strip() for value in line.split(',')] for line in out.splitlines()]

    def gpus(self):
        """memory.used (MiB) of each GPU."""
        return [int(row[2]) for row in self.query('gpu=index,uuid,memory.used,memory.total')]

    def compute_apps(self):
        """[(pid, MiB)] of the processes nvidia-smi lists as using a GPU."""
        return [(int(row[0]), int(row[2])) for row in self.query('compute-apps=pid,process_name,used_memory')]

    def stop_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


class SimulatedContainer(object):
    """A real PID+mount namespace with its own init, reachable through the pct simulator as VMID."""

    def __init__(self, tmp_path, vmid=101):
        self.vmid = vmid
        self.state = tmp_path / 'pve-sim'
        self.state.mkdir(exist_ok=True)
        self.unshare = subprocess.Popen(['unshare', '--pid', '--fork', '--mount-proc', '--kill-child',
                                         sys.executable, os.path.join(SIMULATORS, 'container_init.py')],
                                        start_new_session=True)
        children = '/proc/%d/task/%d/children' % (self.unshare.pid, self.unshare.pid)
        wait_for(lambda: open(children).read().strip(), what='container init')
        self.init_pid = int(open(children).read().split()[0])
        (self.state / ('%d.pid' % vmid)).write_text(str(self.init_pid))
        bin_dir = tmp_path / 'pve-bin'
        bin_dir.mkdir(exist_ok=True)
        self.pct = write_wrapper(str(bin_dir / 'pct'), 'PCT_SIM_STATE', str(self.state),
                                 os.path.join(SIMULATORS, 'pct.py'))

    @property
    def nsenter(self):
        return ['nsenter', '--target', str(self.init_pid), '--all', '--']

    def stop(self):
        (self.state / ('%d.pid' % self.vmid)).write_text('')

    def destroy(self):
        if self.unshare.poll() is None:
            self.unshare.kill()
        self.unshare.wait()
