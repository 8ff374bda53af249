#!/usr/bin/env python3
"""The prefetch's reader (plugins/module_utils/readers/_page_cache.py, what sglang_prefetch runs) on N GiB of cold files.

    python3 bench/prefetch.py --create /var/tmp/prefetch-bench --gib 8 --files 4      (made, measured, removed)
    python3 bench/prefetch.py --folder /models/Qwen3-32B --rounds 3                   (an existing model folder)
    OUT=/tmp/out python3 bench/prefetch.py --create /mnt/nvme/bench --gib 16 --plain   (also writes $OUT/prefetch.json)

Each round drops the files from the page cache (fdatasync, POSIX_FADV_DONTNEED), checks they are cold with the
reader's own mincore, runs the reader as the module does (reserve, deadline) and records residency before and after,
seconds and GB/s. --plain adds, each round, a plain sequential read of the same cold files (1 MiB reads, no fadvise)
for comparison. Prints one JSON document. Not in CI: it needs a real disk (not tmpfs) and GiBs of free memory.

Python 3 standard library only; no Ansible and nothing else of the collection: the reader is loaded from
plugins/module_utils/readers/_page_cache.py of this checkout, or from the file --page-cache names (copy that one file to a
machine without the checkout).
"""
import argparse
import importlib.util
import json
import os
import platform
import shutil
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE_CACHE = os.path.join(REPO, 'plugins', 'module_utils', 'readers', '_page_cache.py')


def load_reader(path):
    spec = importlib.util.spec_from_file_location('_page_cache', path)
    module = importlib.util.module_from_spec(spec)
    # dataclasses looks the module up in sys.modules while the file's classes are made.
    sys.modules['_page_cache'] = module
    spec.loader.exec_module(module)
    return module


def create(folder, gib, count, pc):
    """count weight files of gib GiB in all (distinct bytes: nothing on the way can deduplicate them), and a config."""
    os.makedirs(folder, exist_ok=True)
    each = int(gib * (1 << 30)) // count
    block = os.urandom(64 * pc.MIB)
    for index in range(count):
        path = os.path.join(folder, 'model-%05d-of-%05d.safetensors' % (index + 1, count))
        with open(path, 'wb') as handle:
            written = 0
            while written < each:
                piece = block[:min(len(block), each - written)]
                # A different prefix per block keeps blocks distinct at little cost.
                handle.write(('%d:%d' % (index, written)).encode().ljust(32, b'.') + piece[32:])
                written += len(piece)
            handle.flush()
            os.fdatasync(handle.fileno())
    with open(os.path.join(folder, 'config.json'), 'w') as handle:
        json.dump({'architectures': ['BenchForCausalLM']}, handle)


def plain_read(files, pc):
    buffer = bytearray(pc.MIB)
    started = time.monotonic()
    total = 0
    for item in files:
        with open(item.path, 'rb', buffering=0) as handle:
            while True:
                got = handle.readinto(buffer)
                if not got:
                    break
                total += got
    return total, time.monotonic() - started


def cold(files, pc):
    residency = pc.Residency()
    for item in files:
        pc.drop(item.path)
    return sum(residency.file_bytes(item.path)[1] for item in files)


def file_system(path):
    real, best, kind = os.path.realpath(path), '', None
    with open('/proc/self/mounts') as mounts:
        for line in mounts:
            fields = line.split()
            if (real == fields[1] or real.startswith(fields[1].rstrip('/') + '/')) and len(fields[1]) >= len(best):
                best, kind = fields[1], '%s on %s (%s)' % (fields[0], fields[1], fields[2])
    return kind


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument('--create', metavar='FOLDER', help='make GIB GiB of files in FOLDER (a new folder), removed at the end')
    where.add_argument('--folder', help='an existing model folder (its files are dropped from the page cache)')
    parser.add_argument('--gib', type=float, default=4.0)
    parser.add_argument('--files', type=int, default=4)
    parser.add_argument('--keep', action='store_true', help='keep the folder --create made')
    parser.add_argument('--rounds', type=int, default=1)
    parser.add_argument('--reserve-mib', type=int, default=4096)
    parser.add_argument('--timeout', type=float, default=600.0)
    parser.add_argument('--chunk-mib', type=int, default=64)
    parser.add_argument('--plain', action='store_true', help='also time a plain read of the cold files each round')
    parser.add_argument('--page-cache', default=PAGE_CACHE, help='the _page_cache.py to load (default: this checkout)')
    args = parser.parse_args()
    pc = load_reader(args.page_cache)
    folder = args.create or args.folder
    if args.create:
        if os.path.exists(folder):
            parser.error('%s exists: --create makes a new folder (and removes it at the end)' % folder)
        create(folder, args.gib, args.files, pc)
    try:
        files, skipped = pc.model_files([folder])
        total = sum(item.size for item in files)
        rounds = []
        for dummy in range(args.rounds):
            left = cold(files, pc)
            reader = pc.Prefetch(args.reserve_mib * pc.MIB, args.timeout, chunk=args.chunk_mib * pc.MIB)
            result = reader.run(files)
            took = result['seconds']
            entry = {key: result[key] for key in ('resident_before_pct', 'resident_after_pct', 'read_bytes', 'seconds',
                                                  'stopped_early', 'why', 'mem_available_mib_before',
                                                  'mem_available_mib_after')}
            entry.update(resident_bytes_after_drop=left, gb_per_s=round(result['read_bytes'] / took / 1e9, 3) if took else None)
            if args.plain:
                left = cold(files, pc)
                read, seconds = plain_read(files, pc)
                entry['plain'] = {'resident_bytes_after_drop': left, 'bytes': read, 'seconds': round(seconds, 3),
                                  'gb_per_s': round(read / seconds / 1e9, 3) if seconds else None}
            rounds.append(entry)
        report = {
            'folder': folder, 'file_system': file_system(folder), 'files': len(files), 'bytes': total,
            'gib': round(total / (1 << 30), 3), 'skipped_paths': skipped, 'reserve_mib': args.reserve_mib,
            'chunk_mib': args.chunk_mib, 'rounds': rounds, 'host': platform.node(), 'kernel': platform.release(),
            'cpus': os.cpu_count(), 'python': platform.python_version(),
        }
    finally:
        if args.create and not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    text = json.dumps(report, indent=2)
    print(text)
    if os.environ.get('OUT'):
        os.makedirs(os.environ['OUT'], exist_ok=True)
        with open(os.path.join(os.environ['OUT'], 'prefetch.json'), 'w') as handle:
            handle.write(text + '\n')


if __name__ == '__main__':
    main()
