"""Makes gpuops.sglang importable as ansible_collections.gpuops.sglang from this checkout."""
import os
import signal
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(REPO, '.cache', 'collections')
LINK = os.path.join(COLLECTIONS, 'ansible_collections', 'gpuops', 'sglang')

if not os.path.lexists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    try:
        os.symlink(REPO, LINK)
    except FileExistsError:
        pass  # another test session made it at the same moment
if COLLECTIONS not in sys.path:
    sys.path.insert(0, COLLECTIONS)

# Each pytest-xdist worker (gw0, gw1, ...) brings up and uses its own lab (LAB_INSTANCE 1, 2, ...: lab/lab), so
# the lab's test files run side by side; a plain pytest run uses the lab LAB_INSTANCE names (0, make demo's,
# unless set). Set before any test helper asks lab/lab what its instance is.
_WORKER = os.environ.get('PYTEST_XDIST_WORKER', '')
if _WORKER.startswith('gw'):
    os.environ['LAB_INSTANCE'] = str(int(_WORKER[2:]) + 1)

# The processes the tests start (servers, GPU holders, bystanders) must take SIGTERM's default action,
# as real ones do. SIG_IGN and a blocked SIGTERM survive exec: a pytest started by something that ignores
# or blocks it (a supervisor, `trap '' TERM`) would pass that on, and every test that stops a child with
# SIGTERM would see it outlive the signal.
signal.signal(signal.SIGTERM, signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
