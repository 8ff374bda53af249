"""_page_cache's pure parts, table by table: which files a model folder gives, their order, the budget decision,
MemAvailable's parsing and the stop messages; and the residency reader against util-linux's fincore."""
import os
import shutil
import subprocess

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.readers._page_cache import (
    MIB, PAGE, STOP_BUDGET, STOP_DEADLINE, STOP_NO_MEMINFO, STOP_RESERVE, Allowance, ModelFile, Residency, allowance,
    drop, mem_available, model_files, percent, read_order, stop_message, wanted_name)


@pytest.mark.parametrize('name, wanted', [
    ('model-00001-of-00004.safetensors', True), ('pytorch_model.bin', True), ('consolidated.00.pth', True),
    ('adapter.pt', True), ('config.json', True), ('tokenizer.model', True), ('qwen.tiktoken', True),
    ('merges.txt', True), ('chat_template.jinja', True), ('modeling_deepseek.py', True),
    ('README.md', False), ('.gitattributes', False), ('model.safetensors.lock', False), ('LICENSE', False),
    ('model.gguf', False), ('config.JSON', False),
])
def test_a_folder_gives_the_files_sglang_loads(name, wanted):
    assert wanted_name(name) is wanted


def small(path, size, source=0):
    return ModelFile(path=path, size=size, weight=False, source=source)


def weight(path, size, source=0):
    return ModelFile(path=path, size=size, weight=True, source=source)


@pytest.mark.parametrize('files, order', [
    # Small files smallest first (config before the tokenizer), the weights after them in shard order.
    ([weight('/m/model-00002-of-00002.safetensors', 5), small('/m/tokenizer.json', 900), small('/m/config.json', 700),
      weight('/m/model-00001-of-00002.safetensors', 9)],
     ['/m/config.json', '/m/tokenizer.json', '/m/model-00001-of-00002.safetensors', '/m/model-00002-of-00002.safetensors']),
    # A large small file still goes before the smallest weight.
    ([weight('/m/a.safetensors', 1), small('/m/tokenizer.json', 11 * MIB)], ['/m/tokenizer.json', '/m/a.safetensors']),
    # Weights keep the order of the given paths (the model before its draft), whatever their names.
    ([weight('/a-draft/model.safetensors', 1, source=1), weight('/z-model/model.safetensors', 9, source=0),
      small('/a-draft/config.json', 5, source=1), small('/z-model/config.json', 5, source=0)],
     ['/a-draft/config.json', '/z-model/config.json', '/z-model/model.safetensors', '/a-draft/model.safetensors']),
    ([], []),
])
def test_small_files_come_first_then_the_weights_of_each_path_in_turn(files, order):
    assert [item.path for item in read_order(files)] == order


def lay_out(root, layout):
    """Make files (name: size), symlinks (name: '-> target') and folders (name ending in /) under root."""
    for name, what in layout.items():
        path = os.path.join(str(root), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if name.endswith('/'):
            os.makedirs(path, exist_ok=True)
        elif isinstance(what, str):
            os.symlink(what[3:], path)
        else:
            with open(path, 'wb') as handle:
                handle.write(b'w' * what)


@pytest.mark.parametrize('layout, given, files, skipped', [
    # Top-level loaded files only: not README.md, not original/ (a second copy of the weights), not .cache/.
    ({'m/config.json': 3, 'm/model.safetensors': 8, 'm/README.md': 5, 'm/original/consolidated.00.pth': 8,
      'm/.cache/huggingface/download/model.safetensors.metadata': 1},
     ['m'], [('m/config.json', 3, False), ('m/model.safetensors', 8, True)], []),
    # The HF cache: snapshot links to blobs, two names of one blob read once (under the first name), a broken link.
    ({'blobs/a': 4, 'blobs/b': 16, 's/config.json': '-> ../blobs/a', 's/generation_config.json': '-> ../blobs/a',
      's/model.safetensors': '-> ../blobs/b', 's/tokenizer.json': '-> ../blobs/gone'},
     ['s'], [('s/config.json', 4, False), ('s/model.safetensors', 16, True)],
     [('{root}/s/tokenizer.json', 'a broken symlink (to {root}/blobs/gone): an unfinished download?')]),
    # A file given by its path is read whatever its name; one reached twice is read once.
    ({'m/model.gguf': 7, 'm/config.json': 2}, ['m/model.gguf', 'm', 'm/config.json'],
     [('m/config.json', 2, False), ('m/model.gguf', 7, True)], []),
    # A hub id, a missing path, a folder named like a loaded file, an empty file.
    ({'m/weights.bin/': None, 'm/added_tokens.json': 0}, ['org/model', 'gone', 'm'], [('m/added_tokens.json', 0, False)],
     [('org/model', 'not an absolute path: a hub id (the server downloads it at its start) or a relative path is not read ahead'),
      ('{root}/gone', 'it does not exist')]),
    # A path that is neither a folder nor a regular file.
    ({}, ['/dev/null'], [], [('/dev/null', 'not a regular file')]),
])
def test_which_files_a_model_path_gives(tmp_path, layout, given, files, skipped):
    lay_out(tmp_path, layout)
    root = str(tmp_path)
    paths = [path if path.startswith('/') or path == 'org/model' else os.path.join(root, path) for path in given]
    found, left = model_files(paths)
    assert [(os.path.relpath(item.path, root), item.size, item.weight) for item in found] == files
    assert [(entry['path'], entry['why']) for entry in left] == [(path.format(root=root), why.format(root=root))
                                                                  for path, why in skipped]


CHUNK = 64 * MIB


@pytest.mark.parametrize('missing, budget_left, available, reserve, decided', [
    # Fits: the whole chunk is read.
    (CHUNK, 10 * CHUNK, 8192 * MIB, 4096 * MIB, Allowance(CHUNK, None)),
    # Nothing missing costs nothing: not read, the read goes on, even at the reserve and with no budget left.
    (0, 0, 4096 * MIB, 4096 * MIB, Allowance(0, None)),
    # A partly resident chunk costs its missing bytes only: it fits a budget smaller than the chunk.
    (MIB, MIB, 8192 * MIB, 4096 * MIB, Allowance(CHUNK, None)),
    # The budget ends inside the chunk: read as far as it goes (whole pages), then stop.
    (CHUNK, 8 * MIB + 100, 8192 * MIB, 4096 * MIB, Allowance(8 * MIB + 100 - (8 * MIB + 100) % PAGE, STOP_BUDGET)),
    (CHUNK, 0, 8192 * MIB, 4096 * MIB, Allowance(0, STOP_BUDGET)),
    # MemAvailable at or below the reserve: nothing more is read.
    (CHUNK, 10 * CHUNK, 4096 * MIB, 4096 * MIB, Allowance(0, STOP_RESERVE)),
    (CHUNK, 10 * CHUNK, 1024 * MIB, 4096 * MIB, Allowance(0, STOP_RESERVE)),
    # MemAvailable just above the reserve binds before the budget does.
    (CHUNK, 10 * CHUNK, 4096 * MIB + 3 * MIB, 4096 * MIB, Allowance(3 * MIB, STOP_RESERVE)),
    # No reserve: all of MemAvailable may be used.
    (CHUNK, 10 * CHUNK, CHUNK, 0, Allowance(CHUNK, None)),
])
def test_the_budget_decision_for_a_chunk(missing, budget_left, available, reserve, decided):
    assert allowance(CHUNK, missing, budget_left, available, reserve) == decided


@pytest.mark.parametrize('text, available', [
    ('MemTotal:       24731408 kB\nMemFree:         1000 kB\nMemAvailable:   23437712 kB\nBuffers: 1 kB\n', 23437712 * 1024),
    ('MemTotal:       24731408 kB\nMemFree:         1000 kB\n', None),  # Linux before 3.14
    ('MemAvailable: 0 kB\n', 0),
    ('', None),
])
def test_mem_available_is_read_from_meminfo(text, available):
    assert mem_available(text) == available


@pytest.mark.parametrize('part, whole, shown', [
    (0, 0, 100.0),  # an empty file is all there
    (4095, 4096, 99.9),  # never 100.0 while a byte is missing
    (1, 3, 33.3), (2, 3, 66.6), (5, 5, 100.0), (0, 7, 0.0),
])
def test_a_percentage_is_rounded_down(part, whole, shown):
    assert percent(part, whole) == shown


@pytest.mark.parametrize('stop, start, words', [
    (STOP_BUDGET, 5120 * MIB, ['10.0 MiB of the files stay unread', 'budget of 1024 MiB', 'MemAvailable 5120 MiB',
                               'reserve of 4096 MiB', 'lower the reserve']),
    (STOP_RESERVE, 5120 * MIB, ['MemAvailable reached the reserve of 4096 MiB', '5120 MiB at the start']),
    (STOP_RESERVE, 4000 * MIB, ['MemAvailable was 4000 MiB at the start, at or below the reserve of 4096 MiB', 'lower the']),
    (STOP_DEADLINE, 5120 * MIB, ['the deadline of 600 s passed', 'raise the timeout']),
    (STOP_NO_MEMINFO, None, ['/proc/meminfo has no MemAvailable']),
])
def test_a_stop_says_why_and_what_would_read_the_rest(stop, start, words):
    message = stop_message(stop, start, 4096 * MIB, 600.0, 10 * MIB)
    assert [word for word in words if word not in message] == [], message


@pytest.mark.skipif(shutil.which('fincore') is None, reason='util-linux fincore is not installed')
def test_residency_agrees_with_fincore(tmp_path):
    # Pages 0-2 and the partial last page read without readahead, the rest dropped; windows of 256 pages, so the
    # count spans several mappings. On tmpfs every page stays: both then say all of them.
    path = str(tmp_path / 'weights.bin')
    with open(path, 'wb') as handle:
        handle.write(b'r' * (1024 * PAGE + 100))
    drop(path)
    with open(path, 'rb', buffering=0) as handle:
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_RANDOM)
        handle.read(3 * PAGE)
        handle.seek(1024 * PAGE)
        handle.read()
    size, held = Residency(window=256 * PAGE).file_bytes(path)
    pages = int(subprocess.check_output(['fincore', '--noheadings', '--raw', '--output', 'PAGES', path],
                                        universal_newlines=True).split()[0])
    assert size == 1024 * PAGE + 100 and pages in (4, 1025)
    # The last page counts for its 100 bytes inside the file.
    assert held == (pages - 1) * PAGE + 100
