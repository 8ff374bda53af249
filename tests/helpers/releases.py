"""The sglang releases the tests and the lab install, as the repository's requirements files pin them."""
import os

from helpers.ansible_run import REPO


def sglang_requirement(filename):
    """The `sglang==X` line of a requirements file, its path from the repository's root (requirements/lab.txt)."""
    with open(os.path.join(REPO, filename)) as handle:
        return [line.strip() for line in handle if line.startswith('sglang==')][0]


def sglang_version(filename):
    return sglang_requirement(filename).split('==', 1)[1]
