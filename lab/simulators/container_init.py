#!/usr/bin/env python3
"""PID 1 of a simulated container namespace: reaps orphans until SIGTERM, as an init does."""
import os
import signal
import sys


def main():
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    while True:
        try:
            os.wait()
        except ChildProcessError:
            signal.pause()


if __name__ == '__main__':
    main()
