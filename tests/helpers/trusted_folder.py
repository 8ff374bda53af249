"""A folder the rollback guard trusts, for tests that arm one.

The guard refuses a folder that another user could write, at any level from / down (_files.distrust):
pytest's tmp_path lies under /tmp (sticky, world-writable), so a guard folder cannot live there. This one
is made (0700, by mkdtemp) under the first of a few root-owned folders the check itself accepts, and
removed after the test.
"""
import os
import pathlib
import shutil
import tempfile

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import distrust

BASES = ('/run', '/var/lib', '/root')


def trusted_base():
    for base in BASES:
        if os.path.isdir(base) and distrust(base) is None:
            return base
    pytest.skip('no folder of %s passes the guard\'s trust check here' % ', '.join(BASES))


@pytest.fixture
def trusted_dir():
    made = pathlib.Path(tempfile.mkdtemp(prefix='gpuops-sglang-test-', dir=trusted_base()))
    yield made
    shutil.rmtree(str(made), ignore_errors=True)
