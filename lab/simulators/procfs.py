"""What the simulators read from /proc (the simulators run alone on lab hosts, without the collection)."""


def is_live(pid):
    """True while PID runs; a zombie or a missing PID is not live."""
    try:
        with open('/proc/%d/stat' % int(pid)) as handle:
            state = handle.read().rsplit(')', 1)[1].split()[0]
    except (OSError, IndexError, ValueError):
        return False
    return state not in ('Z', 'X')
