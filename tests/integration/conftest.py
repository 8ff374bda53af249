import os
import shutil
import subprocess
import sys

import pytest

from helpers.ansible_run import REPO

SGLANG_REQUIREMENT = open(os.path.join(REPO, 'requirements-lab.txt')).read().split('\n')
SGLANG_REQUIREMENT = [line for line in SGLANG_REQUIREMENT if line.startswith('sglang==')][0]
WHEELS = os.path.join(REPO, '.cache', 'wheels')


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
                           SGLANG_REQUIREMENT])
    return venv, site


@pytest.fixture
def sglang_venv(pristine_sglang, tmp_path):
    """A private copy of the pristine install, free to patch. Returns (python, site-packages)."""
    venv, site = pristine_sglang
    copy = tmp_path / 'venv'
    shutil.copytree(str(venv), str(copy), symlinks=True)
    return str(copy / 'bin' / 'python'), site.replace(str(venv), str(copy))
