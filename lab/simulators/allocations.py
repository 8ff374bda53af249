"""The GPU memory records gpu_holder.py writes and nvidia_smi.py counts (one format, one place).

alloc/PID-INDEX holds {"mib": M, "start_time": T}: process PID, started at T (procfs.start_time: a reused
PID is another process), holds M MiB on GPU INDEX. While the holder runs it touches its records every
HEARTBEAT seconds, so a record's mtime says when its holder was last alive (within HEARTBEAT) even when
nobody asked nvidia-smi for a long time: a holder that died before a restart is not counted after it.
"""
import json
import os
import threading
import time

from procfs import start_time

HEARTBEAT = 0.05


def register(alloc_dir, index, mib):
    """Records that this process holds MIB on GPU INDEX, atomically (never read half-written); returns its path."""
    os.makedirs(alloc_dir, exist_ok=True)
    pid = os.getpid()
    path = os.path.join(alloc_dir, '%d-%d' % (pid, index))
    with open(path + '.tmp', 'w') as handle:
        json.dump({'mib': int(mib), 'start_time': start_time(pid)}, handle)
    os.rename(path + '.tmp', path)
    return path


def keep_alive(paths):
    """Touches the records every HEARTBEAT seconds for as long as this process runs (a daemon thread)."""
    def beat():
        while True:
            time.sleep(HEARTBEAT)
            for path in paths:
                try:
                    os.utime(path)
                except OSError:
                    pass  # removed with the simulator's state: nothing left to keep alive
    threading.Thread(target=beat, daemon=True).start()


def records(alloc_dir):
    """[(path, pid, index, mib, start_time, last_alive)]; a record removed while being read is skipped."""
    found = []
    names = sorted(os.listdir(alloc_dir)) if os.path.isdir(alloc_dir) else []
    for name in names:
        if name.endswith('.tmp'):
            continue
        path = os.path.join(alloc_dir, name)
        try:
            pid, index = (int(part) for part in name.split('-'))
            with open(path) as handle:
                record = json.load(handle)
            last_alive = os.stat(path).st_mtime
        except (FileNotFoundError, ValueError):
            continue  # gone since the listing, or not a record (a file some other tool left there)
        found.append((path, pid, index, int(record['mib']), record['start_time'], last_alive))
    return found


def discard(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass  # another nvidia-smi call removed it first
