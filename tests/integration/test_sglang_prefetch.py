"""sglang_prefetch on real files on a real disk, made cold (fdatasync, POSIX_FADV_DONTNEED) and checked cold first.

The files live under /var/tmp or the checkout's .cache, never on tmpfs: a tmpfs file's pages are its storage, so
they cannot leave the page cache and a cold start cannot be made there.
"""
import os
import shutil
import tempfile

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.readers._page_cache import (
    MIB, STOP_DEADLINE, STOP_RESERVE, Prefetch, Residency, drop, model_files)
from helpers.ansible_run import REPO, run_task

KEYS = {'changed', 'files', 'bytes', 'read_bytes', 'would_read_bytes', 'resident_before_pct', 'resident_after_pct',
        'seconds', 'skipped_paths', 'stopped_early', 'why', 'mem_available_mib_before', 'mem_available_mib_after',
        'reserve_mib'}
HUB_ID = 'meta-llama/Llama-3.1-8B'
NO_PAGE_CACHE = ('tmpfs', 'ramfs')


def file_system_type(path):
    """The type of the file system path is on (the longest mount point of /proc/self/mounts above it)."""
    real = os.path.realpath(path)
    best, kind = '', None
    with open('/proc/self/mounts') as mounts:
        for line in mounts:
            fields = line.split()
            point = fields[1].replace('\\040', ' ')
            if (real == point or real.startswith(point.rstrip('/') + '/')) and len(point) >= len(best):
                best, kind = point, fields[2]
    return kind


@pytest.fixture
def disk(tmp_path):
    """A new folder on a file system with a page cache of its own, removed afterwards."""
    for parent in ('/var/tmp', os.path.join(REPO, '.cache')):
        if os.path.isdir(parent) and file_system_type(parent) not in NO_PAGE_CACHE:
            folder = tempfile.mkdtemp(prefix='prefetch-test-', dir=parent)
            yield folder
            shutil.rmtree(folder, ignore_errors=True)
            return
    pytest.skip('neither /var/tmp nor .cache is on a disk (both tmpfs): no cold file can be made')


def write(path, size):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    block = bytes(range(256)) * 4096
    with open(path, 'wb') as handle:
        for offset in range(0, size, len(block)):
            handle.write(block[:min(len(block), size - offset)])


def resident(path):
    size, held = Residency().file_bytes(path)
    return held, size


def mem_total():
    """The machine's memory in bytes (/proc/meminfo MemTotal)."""
    with open('/proc/meminfo') as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith('MemTotal:'))


def make_cold(*paths):
    """Drop each file from the page cache, and prove it is out (not one resident byte)."""
    for path in paths:
        drop(path)
        assert resident(path)[0] == 0, '%s still has pages in the page cache after POSIX_FADV_DONTNEED' % path


def model_folder(disk):
    """A model folder as the Hugging Face cache lays one out (snapshot links to blobs), with a second copy of the
    weights under original/ and a README, neither of which the server loads."""
    blobs = os.path.join(disk, 'blobs')
    model = os.path.join(disk, 'snapshots', 'abc123')
    sizes = {'config.json': 700, 'tokenizer.json': 300 * 1024, 'model-00001-of-00002.safetensors': 3 * MIB + 11,
             'model-00002-of-00002.safetensors': 2 * MIB}
    for index, (name, size) in enumerate(sizes.items()):
        write(os.path.join(blobs, 'blob%d' % index), size)
        os.makedirs(model, exist_ok=True)
        os.symlink(os.path.join('..', '..', 'blobs', 'blob%d' % index), os.path.join(model, name))
    # The same blob under a second name: one real file, read once.
    os.symlink(os.path.join('..', '..', 'blobs', 'blob0'), os.path.join(model, 'tokenizer_config.json'))
    write(os.path.join(model, 'original', 'consolidated.00.pth'), 2 * MIB)
    write(os.path.join(model, 'README.md'), 64 * 1024)
    not_loaded = [os.path.join(model, 'original', 'consolidated.00.pth'), os.path.join(model, 'README.md')]
    make_cold(*[os.path.join(blobs, name) for name in os.listdir(blobs)] + not_loaded)
    return model, sizes, not_loaded


def test_prefetch_reads_a_cold_model_folder_into_the_page_cache_and_skips_what_it_cannot_read(tmp_path, disk):
    model, sizes, not_loaded = model_folder(disk)
    missing = os.path.join(disk, 'no-such-draft-model')
    result = run_task(tmp_path, 'gpuops.sglang.sglang_prefetch', {'paths': [model, HUB_ID, missing]})
    assert not result.failed, result.get('msg')
    assert set(result) >= KEYS and result['changed'] is False
    # Small files first (smallest first), then the weights in shard order; the second name of a blob is not read again.
    assert [(os.path.basename(item['path']), item['bytes']) for item in result['files']] == [
        ('config.json', 700), ('tokenizer.json', 300 * 1024), ('model-00001-of-00002.safetensors', 3 * MIB + 11),
        ('model-00002-of-00002.safetensors', 2 * MIB)]
    assert [(item['resident_before_pct'], item['resident_after_pct']) for item in result['files']] == [(0.0, 100.0)] * 4
    assert (result['resident_before_pct'], result['resident_after_pct']) == (0.0, 100.0)
    assert result['bytes'] == result['read_bytes'] == result['would_read_bytes'] == sum(sizes.values())
    assert result['stopped_early'] is False and result['why'] is None
    # What this test measures itself: every loaded file is whole in the page cache, the rest still cold.
    for name in sizes:
        held, size = resident(os.path.join(model, name))
        assert held == size, name
    assert [resident(path)[0] for path in not_loaded] == [0, 0]
    assert [(entry['path'], entry['why']) for entry in result['skipped_paths']] == [
        (HUB_ID, 'not an absolute path: a hub id (the server downloads it at its start) or a relative path is not read ahead'),
        (missing, 'it does not exist')]
    assert result['reserve_mib'] == 4096 and result['mem_available_mib_before'] > 0


def test_check_mode_measures_and_reads_nothing(tmp_path, disk):
    model, sizes, dummy = model_folder(disk)
    result = run_task(tmp_path, 'gpuops.sglang.sglang_prefetch', {'paths': [model]}, check=True)
    assert not result.failed, result.get('msg')
    assert set(result) >= KEYS and result['changed'] is False
    assert result['read_bytes'] == 0 and result['would_read_bytes'] == sum(sizes.values())
    assert [(item['resident_before_pct'], item['resident_after_pct']) for item in result['files']] == [(0.0, 0.0)] * 4
    assert [resident(os.path.join(model, name))[0] for name in sizes] == [0] * 4


def test_a_reserve_the_machine_cannot_spare_stops_the_prefetch_before_it_reads_and_says_so(tmp_path, disk):
    names = [os.path.join(disk, 'model-%d.safetensors' % index) for index in range(4)]
    for name in names:
        write(name, 16 * MIB)
    make_cold(*names)
    # Above all the machine's memory: whatever else runs, MemAvailable is under it when the module starts (a reserve
    # just under MemAvailable, read here, was outrun by the memory other tests freed meanwhile). How much a budget
    # lets through is the reader tests' below, with a MemAvailable of their own.
    reserve_mib = mem_total() // MIB + 1024
    result = run_task(tmp_path, 'gpuops.sglang.sglang_prefetch', {'paths': [disk], 'reserve_mib': reserve_mib})
    assert not result.failed, result.get('msg')
    assert result['stopped_early'] is True and result['reserve_mib'] == reserve_mib
    assert 'stay unread' in result['why'] and 'reserve of %d MiB' % reserve_mib in result['why']
    assert result['read_bytes'] == 0 and sum(resident(name)[0] for name in names) == 0
    assert result['resident_after_pct'] == 0.0


def test_the_budget_reads_exactly_what_fits_and_the_rest_stays_cold(disk):
    names = [os.path.join(disk, 'model-%d.safetensors' % index) for index in range(2)]
    for name in names:
        write(name, 16 * MIB)
    make_cold(*names)
    files, dummy = model_files([disk])
    # MemAvailable held at reserve + 10 MiB: 10 MiB of the 32 may be read, in chunks of 4 MiB.
    result = Prefetch(1024 * MIB, 60, available=lambda: 1034 * MIB, chunk=4 * MIB).run(files)
    assert result['stopped_early'] is True and result['read_bytes'] == 10 * MIB
    assert 'do not fit the budget of 10 MiB' in result['why'] and '22.0 MiB of the files stay unread' in result['why']
    assert [resident(name)[0] for name in names] == [10 * MIB, 0]
    # Again: the resident 10 MiB cost nothing, the next 10 MiB fit (a chunk partly resident is read whole).
    again = Prefetch(1024 * MIB, 60, available=lambda: 1034 * MIB, chunk=4 * MIB).run(files)
    assert again['stopped_early'] is True and again['read_bytes'] == 12 * MIB
    assert again['resident_before_pct'] == round(100.0 * 10 / 32, 1) and again['resident_after_pct'] == 62.5
    assert [resident(name)[0] for name in names] == [16 * MIB, 4 * MIB]


def test_mem_available_falling_to_the_reserve_stops_the_read_before_the_next_chunk(disk):
    name = os.path.join(disk, 'model.safetensors')
    write(name, 16 * MIB)
    make_cold(name)
    readings = iter([2048 * MIB, 2048 * MIB, 2048 * MIB, 1024 * MIB])
    result = Prefetch(1024 * MIB, 60, available=lambda: next(readings, 1024 * MIB), chunk=4 * MIB).run(model_files([name])[0])
    assert result['stopped_early'] is True and result['read_bytes'] == 8 * MIB
    assert 'MemAvailable reached the reserve of 1024 MiB' in result['why']
    assert resident(name)[0] == 8 * MIB


def test_the_deadline_stops_the_read(disk):
    name = os.path.join(disk, 'model.safetensors')
    write(name, 16 * MIB)
    make_cold(name)
    ticks = iter(range(100))
    result = Prefetch(0, 2.5, clock=lambda: float(next(ticks)), chunk=4 * MIB).run(model_files([name])[0])
    assert result['stopped_early'] is True and result['why'].endswith('the deadline of 2.5 s passed; raise the timeout to read them')
    # Clock readings 1 and 2 are before the deadline (a chunk each), 3 is past it.
    assert result['read_bytes'] == 8 * MIB and resident(name)[0] == 8 * MIB
