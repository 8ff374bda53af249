import os
import shutil
import subprocess
import sys

import pytest

from helpers.ansible_run import REPO
from helpers.router import Router

SGLANG_REQUIREMENT = open(os.path.join(REPO, 'requirements-lab.txt')).read().split('\n')
SGLANG_REQUIREMENT = [line for line in SGLANG_REQUIREMENT if line.startswith('sglang==')][0]
WHEELS = os.path.join(REPO, '.cache', 'wheels')


def wheel_tags_of_the_cached_wheel():
    """pip options that accept the cached CPython 3.11 sglang wheel on another controller Python.

    `make setup` fetches the wheel for the host's Python 3.11; the 2.21 controller of `make matrix`
    runs Python 3.13. The tests patch sglang's Python source, which is the same in either wheel.
    """
    if sys.version_info[:2] == (3, 11):
        return []
    return ['--python-version', '3.11', '--only-binary=:all:']


@pytest.fixture(scope='session')
def pristine_sglang(tmp_path_factory):
    """A real sglang release installed with pip --no-deps into a venv (made once per session)."""
    root = tmp_path_factory.mktemp('sglang-pristine')
    venv = root / 'venv'
    subprocess.check_call([sys.executable, '-m', 'venv', '--without-pip', str(venv)])
    site = subprocess.check_output([str(venv / 'bin' / 'python'), '-c',
                                    'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                                   universal_newlines=True).strip()
    subprocess.check_call([sys.executable, '-m', 'pip', 'install', '-q', '--disable-pip-version-check',
                           '--no-deps', '--no-index', '--find-links', WHEELS, '--target', site,
                           SGLANG_REQUIREMENT] + wheel_tags_of_the_cached_wheel())
    return venv, site


@pytest.fixture
def sglang_venv(pristine_sglang, tmp_path):
    """A private copy of the pristine install, free to patch. Returns (python, site-packages)."""
    venv, site = pristine_sglang
    copy = tmp_path / 'venv'
    shutil.copytree(str(venv), str(copy), symlinks=True)
    return str(copy / 'bin' / 'python'), site.replace(str(venv), str(copy))


@pytest.fixture
def router(tmp_path):
    """The real SGLang router on a free loopback port, with no worker."""
    started = Router(tmp_path)
    yield started
    started.stop()
