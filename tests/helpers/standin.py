"""The lab's stand-in SGLang server run as a plain process on this machine (no container), for tests.

write_standin_module puts beside the test a module that runs the stand-in as the role runs
sglang.launch_server (`python -m MODULE`), with its GPU-holding children replaced by sleepers and both
its gates kept in the test's folder, never the machine's /run, which a lab on the same machine uses.
"""
import os

from helpers.ansible_run import REPO

STANDIN = os.path.join(REPO, 'lab', 'standin')
MODULE = 'standin_here'
SLEEPER = 'import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\ntime.sleep(3600)\n'
WRAPPER = '''import sys
from sglang_standin import launch_server as standin
standin.HOLDER = %r
standin.DRAIN_GATE = %r
standin.GENERATE_GATE = %r
sys.exit(standin.main())
'''


def write_standin_module(folder):
    """Write MODULE into folder; returns (module name, PYTHONPATH to run it with, drain gate path)."""
    sleeper = os.path.join(str(folder), 'sleeper.py')
    gate = os.path.join(str(folder), 'drain-gate')
    with open(sleeper, 'w') as handle:
        handle.write(SLEEPER)
    with open(os.path.join(str(folder), MODULE + '.py'), 'w') as handle:
        handle.write(WRAPPER % (sleeper, gate, gate + '.generate'))
    return MODULE, '%s:%s' % (folder, STANDIN), gate
