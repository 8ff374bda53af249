"""The files a redeploy changes, for the revision tests through real Ansible that run no server: a launch
configuration (a tiny server's, never started) and an sglang file, and sglang_guard's arguments over them."""
from __future__ import annotations

import json
import os
import pathlib
import sys

from helpers.simulated import free_port


class GuardedFiles:
    """<tmp_path>/launch.json (mode launch_mode) and <tmp_path>/worker.py (0644), guarded from guard_dir."""

    def __init__(self, tmp_path: pathlib.Path, guard_dir: pathlib.Path, launch_mode: int = 0o644):
        self.root = tmp_path
        self.guard_dir = guard_dir
        self.launch = tmp_path / 'launch.json'
        self.found_launch = json.dumps({'python': sys.executable, 'module': 'tiny_server',
                                        'args': ['--port', free_port()]}).encode()
        self.launch.write_bytes(self.found_launch)
        os.chmod(str(self.launch), launch_mode)
        self.worker = tmp_path / 'worker.py'
        self.worker.write_bytes(b'# as found\n')
        os.chmod(str(self.worker), 0o644)

    def guard(self, **extra) -> dict:
        """sglang_guard's arguments for this server, with `extra` (state, run_id, ...)."""
        args = dict(folder=str(self.guard_dir), host='tiny-host', files=[str(self.launch), str(self.worker)],
                    server={'manager': 'detached', 'service_name': 'tiny', 'launch_file': str(self.launch),
                            'pidfile': str(self.root / 'tiny.pid'), 'log_file': str(self.root / 'tiny.log'),
                            'url': 'http://127.0.0.1:1', 'term_timeout': 5})
        args.update(extra)
        return args
