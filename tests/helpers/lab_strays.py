"""An orphaned SGLang scheduler beside the server in a lab container (as a crashed SGLang leaves one).

The outage window runs pct_exec_kill only when the stop sees SGLang processes in the container that are
not the server's own, so every lab or dashboard test of that step first puts one there.
"""
import contextlib
import os
import subprocess

from helpers import lab_instance
from helpers.ansible_run import REPO

PODMAN_ENV = dict(os.environ, CONTAINERS_CONF=os.path.join(REPO, 'lab', 'containers.conf'))
TITLE = 'sglang::scheduler_TP7'
# The bracket keeps the pattern from matching the command line of the shell that runs pgrep or pkill.
PATTERN = 'sglang::scheduler_TP[7]'


def in_container(container, script):
    return subprocess.check_output(['podman', 'exec', container, 'sh', '-c', script], universal_newlines=True,
                                   env=PODMAN_ENV)


def orphans(host='gpu1'):
    """PIDs of the orphan in the lab host's container."""
    container = lab_instance.container(host)
    return in_container(container, 'pgrep -f "%s" || true' % PATTERN).split()


@contextlib.contextmanager
def orphan_in_container(host='gpu1'):
    """Start the orphan (outside the server's unit and session); whatever the test did, it is gone afterwards."""
    container = lab_instance.container(host)
    in_container(container, 'setsid -f /usr/bin/python3 /opt/lab/simulators/gpu_holder.py --title %s '
                            '>/dev/null 2>&1 </dev/null' % TITLE)
    try:
        yield TITLE
    finally:
        in_container(container, 'pkill -KILL -f "%s" || true' % PATTERN)
