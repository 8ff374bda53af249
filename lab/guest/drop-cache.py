"""Drops the files under the given folders from the page cache, so that the next server start reads them cold.

Run inside a lab gpu container by `lab/lab drop-cache` (python3 of the image, stdlib only). For each regular
file: its residency measured with mincore(2) over a read-only mapping (as util-linux's fincore and vmtouch do),
the file's data synced (fdatasync), posix_fadvise(POSIX_FADV_DONTNEED) over the whole file, the residency measured again.
DONTNEED drops only clean pages nobody maps or locks: a running server that mapped a file keeps its pages, which
the "after" figure shows. Prints one line: files, MiB, resident before and after (percent of the pages).
On overlayfs (the lab's podman storage) the call reaches the upper or lower file on the host's file system,
whose page cache is the one a read through the container fills: measured, lab/simulators/README.md.
"""
import ctypes
import ctypes.util
import mmap
import os
import sys

PROT_READ = 1
MAP_SHARED = 1
MAP_FAILED = ctypes.c_void_p(-1).value

libc = ctypes.CDLL(ctypes.util.find_library('c'), use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident_pages(path):
    """(resident pages, pages) of one file, by mincore over a read-only shared mapping of it."""
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    if not size:
        return 0, 0
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, PROT_READ, MAP_SHARED, fd, 0)
        if address in (None, MAP_FAILED):
            error = ctypes.get_errno()
            raise OSError(error, 'mmap of %s failed: %s' % (path, os.strerror(error)))
        try:
            vector = ctypes.create_string_buffer(pages)
            if libc.mincore(address, size, vector) != 0:
                error = ctypes.get_errno()
                raise OSError(error, 'mincore of %s failed: %s' % (path, os.strerror(error)))
            # Only the lowest bit of each byte says whether that page is resident.
            return sum(byte & 1 for byte in vector.raw), pages
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)


def drop(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        # DONTNEED skips dirty pages: written ones must reach the disk first (a folder model-folders.sh just made).
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def files_under(folders):
    found = []
    for folder in folders:
        for root, _dirs, names in os.walk(folder):
            found.extend(os.path.join(root, name) for name in sorted(names)
                         if os.path.isfile(os.path.join(root, name)) and not os.path.islink(os.path.join(root, name)))
    return found


def percent(resident, pages):
    return 100.0 * resident / pages if pages else 0.0


def main(folders):
    if not folders:
        sys.exit('usage: drop-cache.py FOLDER...')
    missing = [folder for folder in folders if not os.path.isdir(folder)]
    if missing:
        sys.exit('drop-cache: no such folder: %s (lab/lab up makes the model folders)' % ', '.join(missing))
    files = files_under(folders)
    before = [resident_pages(path) for path in files]
    for path in files:
        drop(path)
    after = [resident_pages(path) for path in files]
    pages = sum(total for _resident, total in before)
    size = sum(os.path.getsize(path) for path in files)
    print('%d files, %.1f MiB: resident %.1f%% before, %.1f%% after (fadvise DONTNEED)'
          % (len(files), size / 1048576.0, percent(sum(r for r, _t in before), pages),
             percent(sum(r for r, _t in after), pages)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
