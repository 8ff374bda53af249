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

# The processes the tests start (servers, GPU holders, bystanders) must take SIGTERM's default action,
# as real ones do. SIG_IGN and a blocked SIGTERM survive exec: a pytest started by something that ignores
# or blocks it (a supervisor, `trap '' TERM`) would pass that on, and every test that stops a child with
# SIGTERM would see it outlive the signal.
signal.signal(signal.SIGTERM, signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGTERM])
