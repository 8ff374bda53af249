"""Stand-ins for the faults issue 11 is about: a hung nvidia-smi or pct, a GPU read as [N/A],
a container without procps, and processes that fork or retitle themselves on SIGTERM.

Each is a small real program; the simulators in lab/simulators stay untouched.
"""
import os
import sys

FAULTY_PROCESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'faulty_process.py')


def write_script(path, text):
    with open(str(path), 'w') as handle:
        handle.write(text)
    os.chmod(str(path), 0o755)
    return str(path)


def hanging_command(path, pid_file):
    """An executable that records its PID and then hangs, as nvidia-smi does on a wedged driver."""
    return write_script(path, '#!/bin/sh\necho $$ > %s\nexec sleep 3600\n' % pid_file)


def nvidia_smi_with_sick_gpu(path, real_nvidia_smi, sick_line, times=None, counter=None):
    """nvidia-smi whose --query-gpu prints GPU 0 from the simulator and sick_line for GPU 1.

    With times=N, only the first N readings are sick (counted in the counter file); later
    ones come from the simulator unchanged.
    """
    gate = ''
    if times is not None:
        gate = ('n=$(cat %s 2>/dev/null || echo 0); echo $((n + 1)) > %s\n'
                'if [ "$n" -ge %d ]; then exec %s "$@"; fi\n' % (counter, counter, times, real_nvidia_smi))
    return write_script(path, '#!/bin/sh\ncase "$1" in --query-gpu=*) ;; *) exec %s "$@";; esac\n%s'
                              '%s "$@" | head -n 1\necho "%s"\n' % (real_nvidia_smi, gate, real_nvidia_smi, sick_line))


def minimal_path(folder, tools=('sh', 'tr', 'nsenter')):
    """A PATH folder holding only the given tools: no ps, no procps at all."""
    os.makedirs(str(folder), exist_ok=True)
    for tool in tools:
        for base in ('/usr/bin', '/bin', '/usr/sbin', '/sbin'):
            if os.path.exists(os.path.join(base, tool)):
                os.symlink(os.path.join(base, tool), os.path.join(str(folder), tool))
                break
    return str(folder)


def pct_wrapper(path, real_pct, path_dirs=None, hang_exec_pid_file=None):
    """A pct in front of the simulator: with a restricted PATH, or one whose `exec` hangs."""
    lines = ['#!/bin/sh']
    if path_dirs:
        lines.append('export PATH=%s' % path_dirs)
    if hang_exec_pid_file:
        lines.append('if [ "$1" = exec ]; then echo $$ > %s; exec sleep 3600; fi' % hang_exec_pid_file)
    lines.append('exec %s "$@"' % real_pct)
    return write_script(path, '\n'.join(lines) + '\n')


def faulty_argv(title, on_term, ready, child_title=None, child_ready=None):
    argv = [sys.executable, FAULTY_PROCESS, '--title', title, '--on-term', on_term, '--ready', str(ready)]
    if child_title:
        argv += ['--child-title', child_title, '--child-ready', str(child_ready)]
    return argv
