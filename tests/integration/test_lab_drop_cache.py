"""lab/guest/drop-cache.py (what `lab/lab drop-cache` runs inside a gpu container) drops a folder's files from the page
cache and measures their residency with mincore before and after, here on this machine's own file system.

That the same calls reach the host's files through the lab's overlay storage was measured on the lab
(lab/simulators/README.md); this test holds the script to its figures: files just written and read are resident,
and after the drop they are not.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

from helpers.ansible_run import REPO

SCRIPT = os.path.join(REPO, 'lab', 'guest', 'drop-cache.py')
MIB = 1 << 20
LINE = re.compile(r'^(\d+) files, ([\d.]+) MiB: resident ([\d.]+)% before, ([\d.]+)% after \(fadvise DONTNEED\)$')


def drop_cache(*folders):
    done = subprocess.run([sys.executable, SCRIPT] + [str(folder) for folder in folders], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    match = LINE.match(done.stdout.strip())
    assert match, done.stdout
    return int(match.group(1)), float(match.group(2)), float(match.group(3)), float(match.group(4))


def test_drop_cache_drops_resident_files_and_says_so(tmp_path):
    model = tmp_path / 'model'
    (model / 'nested').mkdir(parents=True)
    for path, size in ((model / 'model-00001-of-00001.safetensors', 6 * MIB), (model / 'nested' / 'draft.bin', 2 * MIB)):
        path.write_bytes(os.urandom(size))
        os.sync()
        # Read back, so every page is in the cache and clean before the script measures it.
        assert len(path.read_bytes()) == size
    (model / 'config.json').write_text('{}')

    assert drop_cache(model) == (3, 8.0, 100.0, 0.0)
    # Nothing brought them back: a second drop finds them out of the cache already.
    assert drop_cache(model)[2:] == (0.0, 0.0)


def test_drop_cache_refuses_a_missing_folder(tmp_path):
    done = subprocess.run([sys.executable, SCRIPT, str(tmp_path / 'gone')], capture_output=True, text=True)
    assert done.returncode == 1
    assert 'no such folder: %s' % (tmp_path / 'gone') in done.stderr
