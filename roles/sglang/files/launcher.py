#!/usr/bin/python3
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""systemd's ExecStart for the SGLang server: exec the server a launch.json describes, without a shell.

Installed by the gpuops.sglang.sglang role.  ``launcher.py run LAUNCH_JSON``
launch.json: {"python": ..., "module": ..., "args": [...], "environment": {...}}
The server is exec'd as ``PYTHON -m MODULE ARGS`` (so its command line is what SGLang's own
tooling and the kill patterns match), with the environment merged over systemd's.
Starting, stopping and the kill policy live in the collection's module_utils (sglang_server).
"""
import json
import os
import sys


def main(argv):
    if len(argv) != 2 or argv[0] != 'run':
        sys.stderr.write('usage: launcher.py run LAUNCH_JSON\n')
        return 2
    with open(argv[1]) as handle:
        spec = json.load(handle)
    command = [spec['python'], '-m', spec['module']] + [str(arg) for arg in spec.get('args', [])]
    env = dict(os.environ)
    env.update(dict((key, str(value)) for key, value in spec.get('environment', {}).items()))
    os.execve(command[0], command, env)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
