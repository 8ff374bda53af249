"""tests/integration/files/tiny_server.py run detached from a launch.json, as the role runs SGLang."""
import json
import os
import sys

from helpers.ansible_run import REPO
from helpers.simulated import detached_server_args, free_port

TINY_SERVER = os.path.join(REPO, 'tests', 'integration', 'files', 'tiny_server.py')


class TinyServer(object):
    """One tiny server: its launch.json, pid file and log under tmp_path/name, on a free loopback port."""

    def __init__(self, tmp_path, name, *extra):
        self.root = tmp_path / name
        self.root.mkdir()
        self.port = free_port()
        self.url = 'http://127.0.0.1:%d' % self.port
        self.launch = self.root / 'launch.json'
        self.launch.write_text(json.dumps({
            'python': sys.executable, 'module': 'tiny_server', 'args': ['--port', self.port] + list(extra),
            'environment': {'PYTHONPATH': os.path.dirname(TINY_SERVER)}}))

    def args(self, **extra):
        return detached_server_args(self.root, 'tiny', self.launch, self.url, **extra)


def alive(pid):
    """Whether PID runs (a zombie does not)."""
    try:
        with open('/proc/%d/stat' % pid) as handle:
            return handle.read().rsplit(')', 1)[1].split()[0] not in ('Z', 'X')
    except OSError:
        return False


def session_members(leader):
    """PIDs of the live processes whose session is leader's, the leader itself left out."""
    members = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit() or int(entry) == leader:
            continue
        try:
            with open('/proc/%s/stat' % entry) as handle:
                fields = handle.read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == leader and fields[0] not in ('Z', 'X'):
            members.append(int(entry))
    return sorted(members)
