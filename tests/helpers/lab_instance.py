"""The lab these tests use: what `lab/lab describe` says of the instance in LAB_INSTANCE (0 unless set).

One source for the lab's names: lab/lab computes every container name, address, port and path of an instance
(0 is the default lab of make demo; 1 to 9 run beside it, each on 127.0.N.0/24) and these tests read them
from it, never spelling an address of their own. tests/conftest.py gives each pytest-xdist worker its own
instance, so the lab files run side by side on separate labs.
"""
import contextlib
import fcntl
import functools
import json
import os
import subprocess

from helpers.ansible_run import REPO

LAB = os.path.join(REPO, 'lab', 'lab')


@functools.lru_cache(maxsize=None)
def describe():
    return json.loads(subprocess.check_output([LAB, 'describe'], universal_newlines=True))


def container(host):
    """The podman container of an inventory host: lab-gpu1 on instance 0, lab2-gpu1 on instance 2."""
    return describe()['hosts'][host]['container']


def address(host):
    return describe()['hosts'][host]['address']


def server_url(host):
    return 'http://%s:%d' % (address(host), describe()['server_port'])


def inventory():
    return describe()['inventory']


def multinode_inventory():
    return describe()['multinode_inventory']


def fleet_inventory():
    return describe()['fleet_inventory']


def router_url():
    return describe()['router_url']


def reports_dir():
    return describe()['reports_dir']


def as_written_on_this_lab(text, env):
    """A documented command block and its environment, to run as written on this instance's lab: on instance 0 as
    they are; on another, the default lab's inventory (`inventory/lab`, `'inventory', 'lab'`) becomes the instance's
    copy and LAB_INSTANCE tells lab/lab which lab it is. Nothing else of the block changes."""
    if describe()['instance'] == 0:
        return text, env
    relative = os.path.relpath(os.path.dirname(inventory()), REPO)
    changed = text.replace('inventory/lab', relative + '/lab').replace("'inventory', 'lab'", "'%s', 'lab'" % relative)
    assert changed != text, 'the block names no lab inventory to point at instance %d' % describe()['instance']
    return changed, dict(env, LAB_INSTANCE=str(describe()['instance']))


def lab(*args, env=None):
    """Run lab/lab with `args` (up, down, ...); a failure raises with the end of its output, which says which
    step failed (a seed redeploy's play recap, say), where a bare exit status would not."""
    done = subprocess.run([LAB] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, env=env)
    if done.returncode != 0:
        raise AssertionError('lab/lab %s exited %d:\n%s' % (' '.join(args), done.returncode, done.stdout[-4000:]))


@contextlib.contextmanager
def one_start_at_a_time():
    """Held while a lab comes up and takes its first redeploy. Several labs starting at once on this 2-core machine
    (containers, seed, baseline redeploy: CPU-bound, unlike the waiting that fills the tests) stretched a redeploy
    past the lab inventory's rollback deadline (80 s), so the guard rightly rolled it back (seen 2026-12-02, load
    average 21); one start at a time keeps a start what it is alone, while the labs already up run their tests."""
    os.makedirs(os.path.join(REPO, '.cache'), exist_ok=True)
    with open(os.path.join(REPO, '.cache', 'lab-start.lock'), 'w') as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
