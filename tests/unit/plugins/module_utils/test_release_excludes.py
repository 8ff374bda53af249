"""gpu_release's excludes: decided on the program a holder really runs and its uid, never on a name it chose."""
import os

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.readers._nvidia import NVIDIA_DAEMON_EXCLUDES
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import compile_patterns, is_excluded_daemon
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import read_identity
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._release import classify_holders

BUILTIN = compile_patterns(NVIDIA_DAEMON_EXCLUDES)
ROOT = (0, 0, 0, 0)
DAEMON_USER = (127, 127, 127, 127)  # nvidia-persistenced's own system user on Ubuntu
PERSON = (1000, 1000, 1000, 1000)


def fake_process(proc, pid, comm, argv, executable, uids):
    """One /proc/PID entry as the kernel writes it: stat, cmdline, status and the exe link."""
    base = proc / str(pid)
    base.mkdir(parents=True)
    (base / 'stat').write_text('%d (%s) S 1 %d %d 0 -1 4194560 %s 5000 0 0\n' % (pid, comm, pid, pid, ' '.join(['0'] * 12)))
    (base / 'cmdline').write_bytes(b'\0'.join(arg.encode() for arg in argv) + b'\0')
    (base / 'status').write_text('Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t%s\nGid:\t0\t0\t0\t0\n'
                                 % (comm, '\t'.join(str(uid) for uid in uids)))
    if executable is not None:
        os.symlink(executable, str(base / 'exe'))


@pytest.mark.parametrize('executable, uids, excluded', [
    ('/usr/bin/nvidia-persistenced', DAEMON_USER, True),
    ('/usr/bin/nv-fabricmanager', ROOT, True),
    ('/usr/bin/nv-hostengine', ROOT, True),
    ('/usr/bin/dcgm-exporter', ROOT, True),
    ('/usr/lib/xorg/Xorg', ROOT, True),
    # a person's copy of a program, named like the daemon
    ('/home/mallory/nvidia-persistenced', PERSON, False),
    # setuid root run by a person: the real uid is still the person's
    ('/usr/bin/nvidia-persistenced', (1000, 0, 0, 0), False),
    # nobody (65534) is nobody's system user
    ('/usr/bin/nvidia-persistenced', (65534,) * 4, False),
    # a process that renamed itself (comm, argv[0]) still runs python
    ('/usr/bin/python3.11', ROOT, False),
    (None, ROOT, False),
    ('/usr/bin/nvidia-persistenced', None, False),
])
def test_builtin_excludes_match_the_real_program_of_root_or_a_system_user(executable, uids, excluded):
    assert is_excluded_daemon(executable, uids, BUILTIN) is excluded


def test_an_exclude_may_name_the_full_path():
    patterns = compile_patterns([r'^/usr/local/bin/my-gpu-exporter$'])
    assert is_excluded_daemon('/usr/local/bin/my-gpu-exporter', ROOT, patterns)
    assert not is_excluded_daemon('/tmp/my-gpu-exporter', ROOT, patterns)


def test_read_identity_resolves_the_program_and_reads_every_uid(tmp_path):
    fake_process(tmp_path, 88, 'nvidia-persiste', ['/usr/bin/nvidia-persistenced'],
                 '/usr/bin/nvidia-persistenced (deleted)', (127, 127, 127, 127))
    fake_process(tmp_path, 89, 'kworker/0:1', [], None, ROOT)
    # a driver upgrade replaced the file; the running daemon is still the one that path named
    assert read_identity(88, str(tmp_path)) == ('/usr/bin/nvidia-persistenced', (127, 127, 127, 127))
    assert read_identity(89, str(tmp_path)) == (None, ROOT)
    assert read_identity(90, str(tmp_path)) == (None, None)


def test_a_holder_named_like_a_daemon_is_stopped_and_the_real_daemon_left_alone(tmp_path):
    # What the review reproduced: a user's process titled nvidia-persistenced (comm and argv[0]) held the
    # GPUs through the release and failed its proof. The old match read exactly those two names.
    fake_process(tmp_path, 88, 'nvidia-persiste', ['/usr/bin/nvidia-persistenced', '--verbose'],
                 '/usr/bin/nvidia-persistenced', DAEMON_USER)
    fake_process(tmp_path, 4242, 'nvidia-persiste', ['nvidia-persistenced'], '/usr/bin/python3.11', PERSON)
    fake_process(tmp_path, 4243, 'Xorg', ['Xorg', ':0'], '/home/mallory/Xorg', PERSON)
    holders = {88: ['/dev/nvidiactl'], 4242: ['/dev/nvidia0'], 4243: ['/dev/nvidia1']}
    targets, left_alone = classify_holders(holders, BUILTIN, guarded=set(), proc_root=str(tmp_path))
    assert [record.pid for record in targets] == [4242, 4243]
    assert left_alone == [{'pid': 88, 'cmdline': '/usr/bin/nvidia-persistenced --verbose',
                           'executable': '/usr/bin/nvidia-persistenced', 'devices': ['/dev/nvidiactl'],
                           'why': 'exclude'}]
