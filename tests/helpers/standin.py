"""The lab's stand-in SGLang server run as a plain process on this machine (no container), for tests.

write_standin_module puts beside the test a module that runs the stand-in as the role runs
sglang.launch_server (`python -m MODULE`), with its GPU-holding children replaced by sleepers and both
its gates kept in the test's folder, never the machine's /run, which a lab on the same machine uses.
A test that reads GPU memory passes the real gpu_holder.py and its SimulatedGpuHost's control devices.
"""
import json
import os
import urllib.error
import urllib.request

from helpers.ansible_run import REPO

STANDIN = os.path.join(REPO, 'lab', 'standin')
MODULE = 'standin_here'
SLEEPER = 'import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\ntime.sleep(3600)\n'
WRAPPER = '''import sys
from sglang_standin import launch_server as standin
standin.HOLDER = %r
standin.DRAIN_GATE = %r
standin.GENERATE_GATE = %r
standin.CONTROL_DEVICES = %r
sys.exit(standin.main())
'''


def write_standin_module(folder, holder=None, control_devices=()):
    """Write MODULE into folder, its children `holder` (default: sleepers) keeping `control_devices` open;
    returns (module name, PYTHONPATH to run it with, drain gate path)."""
    if holder is None:
        holder = os.path.join(str(folder), 'sleeper.py')
        with open(holder, 'w') as handle:
            handle.write(SLEEPER)
    gate = os.path.join(str(folder), 'drain-gate')
    with open(os.path.join(str(folder), MODULE + '.py'), 'w') as handle:
        handle.write(WRAPPER % (holder, gate, gate + '.generate', list(control_devices)))
    return MODULE, '%s:%s' % (folder, STANDIN), gate


def call(method, url, body=None):
    """(HTTP status, JSON body) of one request to a stand-in."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b'null')


def status(url):
    """The HTTP status of GET url, None when nothing answers."""
    try:
        return call('GET', url)[0]
    except OSError:
        return None
