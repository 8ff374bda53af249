# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The page cache: which of a file's bytes it holds, and a bounded read of a model's files into it (issue 45).

Readers layer, standard library only (ctypes for mmap, mincore and munmap), and no import of another project
file: bench/prefetch.py loads this file alone on a GPU machine that has nothing else of the collection.

A new SGLang server's outage is mostly its model load, and the load is slow when the weights are no longer in the
page cache (the old server read them days ago): DeepSeek-R1 (350 GiB) was measured loading in 154 s cold against
69 s warm. Reading the files while the old server still serves moves that cold read out of the outage. The read
is bounded: it never spends more than MemAvailable (/proc/meminfo, the kernel's estimate of what can be had
without swapping) less a reserve, re-reads MemAvailable as it goes, and stops at a deadline.

Residency is measured as fincore and vmtouch do: mincore(2) over a read-only shared mapping of the file, in
windows, so a file of hundreds of GiB needs no vector of its size. Since Linux 5.0 the kernel answers mincore on a
file mapping only for root, the file's owner or a user who may write the file (otherwise a page counts as
resident only when this process has it mapped, which it never has): such a file's residency is unknown (None).

    wanted_name(name)                    -> is a file of this name in a model folder one the server loads
    model_files(paths)                   -> ([ModelFile] in read order, [{path, why}] skipped)
    read_order(files)                    -> small files (config, tokenizer) first, then the weights as given
    Residency().resident_bytes(fd, ...)  -> bytes of a range of an open file that the page cache holds
    mem_available(text)                  -> MemAvailable in bytes from /proc/meminfo's text, None without it
    allowance(length, missing, ...)      -> how much of the next chunk may be read, and why the read stops
    drop(path)                           -> fdatasync and POSIX_FADV_DONTNEED: the file's clean pages leave the cache
    Prefetch(...).run(files, read)       -> the prefetch's result: residency before and after, what was read, why it stopped
"""

from __future__ import annotations

import ctypes
import mmap
import os
import stat
import time
from dataclasses import dataclass
from typing import Any, Callable

MIB = 1 << 20
PAGE = mmap.PAGESIZE
# What SGLang loads from a model folder: weights, configuration, tokenizer, chat template, remote code.
LOADED_SUFFIXES = ('.safetensors', '.bin', '.pt', '.pth', '.json', '.model', '.tiktoken', '.txt', '.jinja', '.py')
WEIGHT_SUFFIXES = ('.safetensors', '.bin', '.pt', '.pth')
# One mapping and one mincore vector (a byte a page: 256 KiB for 1 GiB of 4 KiB pages) at a time.
WINDOW = 1 << 30
# MemAvailable and the deadline are read again before each chunk; its pages are asked for at once (WILLNEED).
CHUNK = 64 * MIB
# The buffer the reads go to, reused: the bytes are thrown away, only the pages they leave behind count.
READ_BUFFER = 8 * MIB
MEMINFO = '/proc/meminfo'

STOP_RESERVE = 'reserve'
STOP_BUDGET = 'budget'
STOP_DEADLINE = 'deadline'
STOP_NO_MEMINFO = 'no meminfo'

PROT_READ = 0x1
MAP_SHARED = 0x01
MAP_FAILED = ctypes.c_void_p(-1).value
# mincore sets the least significant bit of a page's byte when the page is resident; the others are reserved.
_RESIDENT_BIT = bytes(value & 1 for value in range(256))


@dataclass(frozen=True)
class ModelFile:
    """One file to read: the path it was listed under (a symlink's, in the HF cache), its size, whether it holds
    weights (read after the small files), and which of the given paths it came from (weights keep that order)."""

    path: str
    size: int
    weight: bool
    source: int


def wanted_name(name: str) -> bool:
    return name.endswith(LOADED_SUFFIXES)


def read_order(files: list[ModelFile]) -> list[ModelFile]:
    """Small files first (config, tokenizer: what a server reads before its weights), smallest first; then the
    weights of each given path in turn, in name order (the shards' order, model-00001-of-00004 first)."""
    return sorted(files, key=lambda item: (1, item.source, 0, item.path) if item.weight else (0, 0, item.size, item.path))


def model_files(paths: list[str]) -> tuple[list[ModelFile], list[dict[str, str]]]:
    """The files of the given model folders (their top-level files that SGLang loads: not subfolders, since Llama
    repositories keep a second copy of the weights under original/) and files, each real file once (symlinks
    resolved: the HF cache's snapshots link to its blobs), in read order; and what was skipped and why."""
    found: dict[tuple[int, int], ModelFile] = {}
    skipped: list[dict[str, str]] = []

    def skip(path: str, why: str) -> None:
        skipped.append(dict(path=path, why=why))

    def add(path: str, source: int, listed: bool) -> None:
        try:
            status = os.stat(path)
        except FileNotFoundError:
            skip(path, 'a broken symlink (to %s): an unfinished download?' % os.path.realpath(path) if os.path.islink(path)
                 else 'it does not exist')
            return
        except OSError as exc:
            skip(path, 'cannot be read (%s)' % exc.strerror)
            return
        if stat.S_ISDIR(status.st_mode) and listed:
            return  # a subfolder: not read (original/ holds a second copy of the weights)
        if not stat.S_ISREG(status.st_mode):
            skip(path, 'not a regular file')
            return
        name = os.path.basename(path)
        identity = (status.st_dev, status.st_ino)
        if identity not in found:
            weight = name.endswith(WEIGHT_SUFFIXES) or not wanted_name(name)
            found[identity] = ModelFile(path=path, size=status.st_size, weight=weight, source=source)

    for source, given in enumerate(paths):
        if not os.path.isabs(given):
            skip(given, 'not an absolute path: a hub id (the server downloads it at its start) or a relative path is not read ahead')
            continue
        if not os.path.isdir(given):
            add(given, source, listed=False)
            continue
        try:
            names = sorted(os.listdir(given))
        except OSError as exc:
            skip(given, 'the folder cannot be listed (%s)' % exc.strerror)
            continue
        for name in names:
            if wanted_name(name):
                add(os.path.join(given, name), source, listed=True)
    return read_order(list(found.values())), skipped


def mem_available(text: str) -> int | None:
    """MemAvailable of /proc/meminfo's text in bytes; None when it has none (Linux before 3.14)."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == 'MemAvailable:' and fields[1].isdigit():
            return int(fields[1]) * (1024 if fields[2:] == ['kB'] else 1)
    return None


def read_mem_available(path: str = MEMINFO) -> int | None:
    try:
        with open(path) as handle:
            return mem_available(handle.read())
    except OSError:
        return None


@dataclass(frozen=True)
class Allowance:
    """How many bytes of the next chunk, from its start, may be read; why the read stops after them (None: go on)."""

    read: int
    stop: str | None


def allowance(length: int, missing: int, budget_left: int, available: int, reserve: int) -> Allowance:
    """The budget decision for one chunk of `length` bytes, `missing` of them not in the page cache.

    Only bytes not yet resident cost: a chunk with nothing missing is free. MemAvailable (`available`) at or below
    the reserve stops the read before any other chunk. A chunk whose missing bytes fit both what is left of the budget and
    MemAvailable less the reserve is read whole; one that does not is read as far as they allow (whole pages), and
    the read stops there.
    """
    if missing == 0:
        return Allowance(0, None)
    headroom = available - reserve
    if headroom <= 0:
        return Allowance(0, STOP_RESERVE)
    allowed = max(0, min(budget_left, headroom))
    if missing <= allowed:
        return Allowance(length, None)
    return Allowance(allowed - allowed % PAGE, STOP_BUDGET if budget_left <= headroom else STOP_RESERVE)


class Residency:
    """mincore(2) over a read-only shared mapping of a file, a window at a time (what fincore and vmtouch do)."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window - window % PAGE
        libc = ctypes.CDLL(None, use_errno=True)
        # mmap64 takes a 64-bit offset on 32-bit hosts too (glibc names both on 64-bit ones).
        self._mmap = getattr(libc, 'mmap64', None) or libc.mmap
        self._mmap.restype = ctypes.c_void_p
        self._mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int64 if hasattr(libc, 'mmap64') else ctypes.c_long]
        self._mincore = libc.mincore
        self._mincore.restype = ctypes.c_int
        self._mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        self._munmap = libc.munmap
        self._munmap.restype = ctypes.c_int
        self._munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self._vector = ctypes.create_string_buffer(self.window // PAGE)

    def resident_bytes(self, fd: int, size: int, offset: int = 0, length: int | None = None) -> int:
        """Bytes of [offset, offset + length) of the open file (size bytes long; offset a multiple of the page size)
        held by the page cache, the last page counted for the part of it inside the file. OSError when the file
        cannot be mapped."""
        end = size if length is None else min(size, offset + length)
        resident = 0
        start = offset
        while start < end:
            span = min(self.window, end - start)
            resident += self._resident_pages(fd, start, span) * PAGE
            start += span
        if end == size and size % PAGE and end > offset and self._resident_pages(fd, size - size % PAGE, size % PAGE):
            resident -= PAGE - size % PAGE
        return resident

    def _resident_pages(self, fd: int, offset: int, span: int) -> int:
        address = self._mmap(None, span, PROT_READ, MAP_SHARED, fd, offset)
        if address is None or address == MAP_FAILED:
            number = ctypes.get_errno()
            raise OSError(number, 'mmap: %s' % os.strerror(number))
        try:
            pages = (span + PAGE - 1) // PAGE
            if self._mincore(address, span, self._vector) != 0:
                number = ctypes.get_errno()
                raise OSError(number, 'mincore: %s' % os.strerror(number))
            return ctypes.string_at(self._vector, pages).translate(_RESIDENT_BIT).count(1)
        finally:
            self._munmap(address, span)

    def file_bytes(self, path: str) -> tuple[int, int]:
        """(size, resident bytes) of the file at path; a file of size 0 is all resident (it has no page to hold)."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            return size, self.resident_bytes(fd, size) if size else 0
        finally:
            os.close(fd)


def measurable(path: str) -> bool:
    """Whether the kernel answers mincore for this file to this process: root, the file's owner, or a user who may
    write it (Linux 5.0's rule, mm/mincore.c can_do_mincore)."""
    try:
        return os.geteuid() == 0 or os.stat(path).st_uid == os.geteuid() or os.access(path, os.W_OK)
    except OSError:
        return False


def drop(path: str) -> None:
    """The file's pages leave the page cache: written back (fdatasync), then POSIX_FADV_DONTNEED. Pages another
    process has mapped stay, and so does every page on a file system without a page cache of its own (tmpfs)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def percent(part: int, whole: int) -> float:
    """part of whole in percent, rounded down to a tenth: 100.0 only when every byte is there."""
    return 100.0 if whole == 0 else (1000 * part // whole) / 10


def stop_message(stop: str, start_available: int | None, reserve: int, timeout: float, left: int) -> str:
    """Why the prefetch stopped before every file was in the page cache, and what would let it read the rest."""
    left_mib = '%.1f MiB of the files stay unread' % (left / MIB)
    if stop == STOP_NO_MEMINFO:
        return ('%s: %s has no MemAvailable (Linux 3.14 and later have it), so no read can be bounded by it'
                % (left_mib, MEMINFO))
    if stop == STOP_DEADLINE:
        return '%s: the deadline of %g s passed; raise the timeout to read them' % (left_mib, timeout)
    if stop == STOP_BUDGET:
        return ('%s: they do not fit the budget of %d MiB (MemAvailable %d MiB at the start less the reserve of %d MiB);'
                ' free memory or lower the reserve to read them' % (
                    left_mib, max(0, (start_available or 0) - reserve) // MIB, (start_available or 0) // MIB, reserve // MIB))
    if (start_available or 0) <= reserve:
        return ('%s: MemAvailable was %d MiB at the start, at or below the reserve of %d MiB; free memory or lower the'
                ' reserve to read them' % (left_mib, (start_available or 0) // MIB, reserve // MIB))
    return ('%s: MemAvailable reached the reserve of %d MiB (it was %d MiB at the start), which is kept for the'
            ' running server and the machine' % (left_mib, reserve // MIB, (start_available or 0) // MIB))


class Prefetch:
    """Reads files into the page cache within a budget: MemAvailable at the start less `reserve` bytes, MemAvailable
    never at or below the reserve before a chunk, and a deadline `timeout` seconds from the start.

    Files are read with real reads into one reused buffer after POSIX_FADV_SEQUENTIAL and, for each chunk,
    POSIX_FADV_WILLNEED (the kernel asks the disk for the whole chunk at once), so the pages are resident when run()
    returns: the kernel's readahead alone gives no such promise.
    """

    def __init__(self, reserve: int, timeout: float, clock: Callable[[], float] = time.monotonic,
                 available: Callable[[], int | None] = read_mem_available, residency: Residency | None = None,
                 chunk: int = CHUNK) -> None:
        self.reserve = reserve
        self.timeout = timeout
        self.clock = clock
        self.available = available
        self.residency = residency or Residency()
        self.chunk = chunk - chunk % PAGE or PAGE
        self.buffer = bytearray(min(READ_BUFFER, self.chunk))

    def _measure(self, files: list[ModelFile], skipped: list[dict[str, str]]) -> dict[str, int | None]:
        """{path: resident bytes, None when unknown}; a file that cannot be opened or mapped joins skipped."""
        resident: dict[str, int | None] = {}
        for item in files:
            if not measurable(item.path):
                resident[item.path] = None
                continue
            try:
                dummy, resident[item.path] = self.residency.file_bytes(item.path)
            except OSError as exc:
                skipped.append(dict(path=item.path, why='its residency cannot be measured (%s)' % (exc.strerror or exc)))
        return resident

    def run(self, files: list[ModelFile], read: bool = True) -> dict[str, Any]:
        """The prefetch's result (every key, every run); `read` false (check mode) measures and reads nothing."""
        started = self.clock()
        deadline = started + self.timeout
        skipped: list[dict[str, str]] = []
        start_available = self.available()
        before = self._measure(files, skipped)
        files = [item for item in files if item.path in before]
        missing = sum(item.size - (before[item.path] or 0) for item in files)
        budget = 0 if start_available is None else max(0, start_available - self.reserve)
        would_read = min(missing, budget)
        read_bytes = 0
        stop = None
        if start_available is None:
            stop = STOP_NO_MEMINFO if missing else None
        elif not read:
            stop = (STOP_RESERVE if start_available <= self.reserve else STOP_BUDGET) if missing > budget else None
        else:
            read_bytes, stop = self._read(files, budget, deadline, skipped)
        after = self._measure(files, skipped) if files else {}
        files = [item for item in files if item.path in after]
        end_available = self.available()
        left = sum(item.size - (after[item.path] or 0) for item in files) if read else missing - would_read
        return dict(
            files=[dict(path=item.path, bytes=item.size, resident_before_pct=self._pct(before[item.path], item.size),
                        resident_after_pct=self._pct(after[item.path], item.size)) for item in files],
            bytes=sum(item.size for item in files),
            read_bytes=read_bytes,
            would_read_bytes=would_read,
            resident_before_pct=self._total_pct(files, before),
            resident_after_pct=self._total_pct(files, after),
            seconds=round(self.clock() - started, 3),
            skipped_paths=skipped,
            stopped_early=stop is not None,
            why=None if stop is None else stop_message(stop, start_available, self.reserve, self.timeout, left),
            mem_available_mib_before=None if start_available is None else start_available // MIB,
            mem_available_mib_after=None if end_available is None else end_available // MIB,
            reserve_mib=self.reserve // MIB,
        )

    @staticmethod
    def _pct(resident: int | None, size: int) -> float | None:
        return None if resident is None else percent(resident, size)

    @staticmethod
    def _total_pct(files: list[ModelFile], resident: dict[str, int | None]) -> float | None:
        known = [item for item in files if resident.get(item.path) is not None]
        if files and not known:
            return None
        return percent(sum(resident[item.path] or 0 for item in known), sum(item.size for item in known))

    def _read(self, files: list[ModelFile], budget: int, deadline: float,
              skipped: list[dict[str, str]]) -> tuple[int, str | None]:
        """Read the files in order until done, the budget is spent, MemAvailable reaches the reserve, or the deadline;
        (bytes read, why it stopped or None)."""
        read_bytes = 0
        for item in files:
            try:
                fd = os.open(item.path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                skipped.append(dict(path=item.path, why='cannot be opened (%s)' % exc.strerror))
                continue
            try:
                got, budget, stop = self._read_file(fd, item, budget, deadline)
            except OSError as exc:
                skipped.append(dict(path=item.path, why='a read failed (%s)' % exc.strerror))
                continue
            finally:
                os.close(fd)
            read_bytes += got
            if stop is not None:
                return read_bytes, stop
        return read_bytes, None

    def _read_file(self, fd: int, item: ModelFile, budget: int, deadline: float) -> tuple[int, int, str | None]:
        size = os.fstat(fd).st_size
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        known = measurable(item.path)
        read_bytes = 0
        for offset in range(0, size, self.chunk):
            if self.clock() >= deadline:
                return read_bytes, budget, STOP_DEADLINE
            length = min(self.chunk, size - offset)
            # A file whose residency is unknown costs its whole size.
            missing = length - (self.residency.resident_bytes(fd, size, offset, length) if known else 0)
            available = self.available()
            decision = allowance(length, missing, budget, 0 if available is None else available, self.reserve)
            if decision.read:
                os.posix_fadvise(fd, offset, decision.read, os.POSIX_FADV_WILLNEED)
                read_bytes += self._read_range(fd, offset, decision.read)
                budget -= missing if decision.read == length else decision.read
            if decision.stop is not None:
                return read_bytes, budget, decision.stop
        return read_bytes, budget, None

    def _read_range(self, fd: int, offset: int, length: int) -> int:
        view = memoryview(self.buffer)
        done = 0
        while done < length:
            got = os.preadv(fd, [view[:min(len(view), length - done)]], offset + done)
            if got == 0:
                break  # the file became shorter since it was measured
            done += got
        return done
