"""gpuops.sglang for ops dashboards: `redeploy` (the Python API over ansible-runner) and a reference web app."""
import os
import sys

# The collection's own pure functions (the names of a host's report files) are imported as ansible-playbook finds
# the collection: through the link `make setup` makes under .cache/collections, the ANSIBLE_COLLECTIONS_PATH of
# every run the dashboard starts (redeploy.ansible_environment). One copy of each rule, the role's.
COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), '.cache', 'collections')
if COLLECTIONS not in sys.path:
    sys.path.append(COLLECTIONS)
