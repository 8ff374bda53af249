"""Makes gpuops.sglang importable as ansible_collections.gpuops.sglang from this checkout."""
import os
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
