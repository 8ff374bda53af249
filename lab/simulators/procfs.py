"""What the simulators read from /proc (the simulators run alone on lab hosts, without the collection)."""


def _stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (state first), or None when PID is gone."""
    try:
        with open('/proc/%d/stat' % int(pid)) as handle:
            return handle.read().rsplit(')', 1)[1].split()
    except (OSError, IndexError, ValueError):
        return None


def is_live(pid):
    """True while PID runs; a zombie or a missing PID is not live."""
    fields = _stat_fields(pid)
    return bool(fields) and fields[0] not in ('Z', 'X')


def start_time(pid):
    """When PID started (clock ticks after boot, field 22 of /proc/PID/stat), or None when it is gone.

    A PID is reused once its process is gone; the PID and its start time together name one process.
    """
    fields = _stat_fields(pid)
    try:
        return int(fields[19])
    except (TypeError, IndexError, ValueError):
        return None


def live_start_time(pid):
    """start_time of PID while it is live (not a zombie), else None: one read of /proc/PID/stat."""
    fields = _stat_fields(pid)
    if not fields or fields[0] in ('Z', 'X'):
        return None
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None
