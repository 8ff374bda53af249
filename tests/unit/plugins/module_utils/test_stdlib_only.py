"""The base files, the policy, the /proc source, nvidia-smi and the guard's runtime import without Ansible.

A host-side helper copies these files under ansible_collections/gpuops/sglang/plugins/module_utils/LAYER/
and runs them with a bare interpreter; -S keeps site-packages (and so Ansible) out of reach.
"""
import os
import shutil
import subprocess
import sys

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._guard import RUNTIME_FILES
from helpers.ansible_run import REPO

# With the guard's runtime: its watcher runs those files with a bare interpreter at the deadline, and an
# Ansible import there would break the rollback itself.
STDLIB_ONLY = sorted(set(['base/_polling.py', 'readers/_processes.py', 'readers/_procfs.py', 'readers/_nvidia.py',
                          'base/_command.py', 'base/_http.py', 'base/_files.py', 'readers/_sockets.py'] + list(RUNTIME_FILES)))
PROBE = '''
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import (
    DEFAULT_SGLANG_PATTERNS, ProcessRecord, compile_patterns, select, terminate)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import LocalProcesses, protected_pids, read_proc_record
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia import (
    FreeMemoryProof, GpuReader, NvidiaSmiCommand, parse_gpus, proven_free)
from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandRunner, subprocess_runner
from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import FileLock, read_json, write_atomic
from ansible_collections.gpuops.sglang.plugins.module_utils.base._http import NO_ANSWER, http_get
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._guard import Guard
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._router import Router
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import Server
import os, sys
assert 'ansible' not in sys.modules and 'ansible.module_utils' not in sys.modules
me = read_proc_record(os.getpid())
assert me.pid == os.getpid() and os.getpid() in protected_pids()
assert select([me], compile_patterns(['.']), protected_pids()) == []
assert proven_free(parse_gpus('0, GPU-a, 0, 10\\n'), 0)
# The standard-library back end runs a real command; the guard's files are written and locked with it.
runner = CommandRunner.over(subprocess_runner, 10)
assert runner.run([sys.executable, '-S', '-c', 'print(6 * 7)']).stdout.strip() == '42'
with FileLock('lock', 1):
    write_atomic('state.json', b'{"armed": true}')
assert read_json('state.json') == {'armed': True}
assert http_get('http://127.0.0.1:9/', 1)[0] == NO_ANSWER
# The server's port is believed only once this process's own socket is found listening there.
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._sockets import held_sockets, read_listeners, reached
import socket
listening = socket.socket()
listening.bind(('127.0.0.1', 0))
listening.listen(1)
port = listening.getsockname()[1]
inodes = [listener.inode for listener in reached(read_listeners(port), '127.0.0.1', port)]
assert len(inodes) == 1 and held_sockets([os.getpid()], inodes) == set(inodes)
print('ok')
'''


def test_policy_procfs_and_nvidia_import_with_the_standard_library_alone(tmp_path):
    dest = tmp_path / 'ansible_collections' / 'gpuops' / 'sglang' / 'plugins' / 'module_utils'
    dest.mkdir(parents=True)
    # Each file in its layer's folder, as the guard installs them: no __init__.py, namespace packages.
    for name in STDLIB_ONLY:
        (dest / name).parent.mkdir(exist_ok=True)
        shutil.copy(os.path.join(REPO, 'plugins', 'module_utils', *name.split('/')), str(dest / name))
    out = subprocess.run([sys.executable, '-S', '-c', PROBE], cwd=str(tmp_path), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, universal_newlines=True, env={'PYTHONPATH': str(tmp_path)})
    assert out.stdout.strip() == 'ok', out.stdout
