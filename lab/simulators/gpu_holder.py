#!/usr/bin/env python3
"""A real process that SIMULATES a CUDA process holding GPU memory (see README.md beside it).

It opens the given device files and keeps them open, registers MiB per GPU with the
nvidia-smi simulator (allocations.py: its records, kept alive while it runs), writes its
PID to --ready when set up, then waits.
  --hold INDEX=MIB      memory on GPU INDEX (nvidia-smi's index; it opens that GPU's device file from the
                        simulator's gpus.json, and only that one: gpu_config.py)
  --open PATH           another device file to keep open (nvidiactl, nvidia-uvm, caps)
  --title TEXT          run under this command line (argv[0]), like setproctitle does
  --on-term ignore|exit|drain=SECONDS|gate=PATH   (gate: drain while PATH exists, then exit 0)
"""
import argparse
import os
import signal
import sys
import time

from allocations import keep_alive, register
from gpu_config import STATE, load


def parse(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument('--state', default=STATE)
    parser.add_argument('--hold', action='append', default=[])
    parser.add_argument('--open', action='append', default=[])
    parser.add_argument('--title')
    parser.add_argument('--on-term', default='exit')
    parser.add_argument('--ready')
    parser.add_argument('--titled', action='store_true', help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main():
    args = parse(sys.argv[1:])
    if args.title and not args.titled:
        # Re-exec so /proc/PID/cmdline starts with the title, as setproctitle makes it.
        os.execv(sys.executable, [args.title, os.path.abspath(__file__), '--titled'] + sys.argv[1:])

    if args.on_term == 'ignore':
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif args.on_term.startswith('gate='):
        gate = args.on_term.split('=', 1)[1]

        def drain_while_gated(signum, frame):
            while os.path.exists(gate):
                time.sleep(0.02)
            sys.exit(0)
        signal.signal(signal.SIGTERM, drain_while_gated)
    elif args.on_term.startswith('drain='):
        drain = float(args.on_term.split('=', 1)[1])

        def drain_then_exit(signum, frame):
            time.sleep(drain)
            sys.exit(0)
        signal.signal(signal.SIGTERM, drain_then_exit)
    else:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))

    handles = []
    holds = [item.split('=') for item in args.hold]
    if holds:
        devices = dict((gpu['index'], gpu['device']) for gpu in load(args.state)['gpus'])
        alloc_dir = os.path.join(args.state, 'alloc')
        records = []
        for index, mib in holds:
            handles.append(open(devices[int(index)], 'rb'))
            records.append(register(alloc_dir, int(index), mib))
        keep_alive(records)
    for path in args.open:
        handles.append(open(path, 'rb'))
    if args.ready:
        with open(args.ready + '.tmp', 'w') as ready:
            ready.write(str(os.getpid()))
        os.rename(args.ready + '.tmp', args.ready)
    while True:
        time.sleep(3600)


if __name__ == '__main__':
    main()
