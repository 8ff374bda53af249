import os
import shutil
import subprocess
import sys

import pytest

from helpers.ansible_run import REPO, run_task
from helpers.releases import sglang_requirement
from helpers.router import Router
from helpers.tiny import TinyServer


# The release the patch is for, and the one the lab serves natively (batch-size tiers for adaptive mode).
SGLANG_REQUIREMENT = sglang_requirement('requirements/lab.txt')
NATIVE_SGLANG_REQUIREMENT = sglang_requirement('requirements/lab-native.txt')
WHEELS = os.path.join(REPO, '.cache', 'wheels')


def wheel_tags_of_the_cached_wheel():
    """pip options that accept the cached CPython 3.11 sglang wheel on another controller Python.

    `make setup` fetches the wheel for the host's Python 3.11; the 2.21 controller of `make matrix`
    runs Python 3.13. The tests patch sglang's Python source, which is the same in either wheel.
    """
    if sys.version_info[:2] == (3, 11):
        return []
    return ['--python-version', '3.11', '--only-binary=:all:']


# The folder the collection's patch changes (files/): the only one whose bytecode the tests look at.
PATCHED_FOLDER = os.path.join('sglang', 'srt', 'speculative')


def install_release(root, requirement):
    """A real sglang release installed with pip --no-deps into a new venv under root: (venv, site-packages).

    pip's byte-compiling of every module is most of an install's CPU (measured: 13.6 s of 15.4 s for the native
    release's 6396 files, 5.0 of 6.1 s for the patched one's), and it doubles what each sglang_venv copies; only
    the patched folder is compiled, so a patch still meets the stale bytecode that a real install has there.
    """
    venv = root / 'venv'
    subprocess.check_call([sys.executable, '-m', 'venv', '--without-pip', str(venv)])
    site = subprocess.check_output([str(venv / 'bin' / 'python'), '-c',
                                    'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
                                   universal_newlines=True).strip()
    subprocess.check_call([sys.executable, '-m', 'pip', 'install', '-q', '--disable-pip-version-check',
                           '--no-deps', '--no-index', '--no-compile', '--find-links', WHEELS, '--target', site,
                           requirement] + wheel_tags_of_the_cached_wheel())
    subprocess.check_call([str(venv / 'bin' / 'python'), '-m', 'compileall', '-q',
                           os.path.join(site, PATCHED_FOLDER)])
    return venv, site


@pytest.fixture(scope='session')
def pristine_sglang(tmp_path_factory):
    """The patched release installed once per session (never patched: see sglang_venv)."""
    return install_release(tmp_path_factory.mktemp('sglang-pristine'), SGLANG_REQUIREMENT)


@pytest.fixture(scope='session')
def native_sglang(tmp_path_factory):
    """The native release installed once per session, for reading only."""
    return install_release(tmp_path_factory.mktemp('sglang-native'), NATIVE_SGLANG_REQUIREMENT)


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


@pytest.fixture
def servers(tmp_path):
    """Make TinyServers by name (with tiny_server.py's options); each is stopped through sglang_server at the end."""
    made = []

    def make(name, *extra):
        server = TinyServer(tmp_path, name, *extra)
        made.append(server)
        return server
    yield make
    for server in made:
        run_task(tmp_path, 'gpuops.sglang.sglang_server', server.args(state='stopped'), name='cleanup')
