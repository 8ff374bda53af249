#!/usr/bin/env python3
"""A process that misbehaves on SIGTERM the ways SGLang's can (see tests/helpers/faults.py).

--title T          run under command line T (argv[0]), as setproctitle makes it
--on-term fork     on SIGTERM, fork a child titled --child-title (which ignores SIGTERM) and exit
--on-term retitle  on SIGTERM, re-exec under the command line "python3 draining" and ignore SIGTERM
--on-term ignore   ignore SIGTERM
--ready FILE       written with the PID once set up (the child writes --child-ready)
"""
import argparse
import os
import signal
import sys
import time

# After an exec under another argv[0], sys.executable is guessed from that title: keep the real one.
PYTHON = os.environ.setdefault('FAULTY_PROCESS_PYTHON', sys.executable)


def write_ready(path):
    with open(path + '.tmp', 'w') as handle:
        handle.write(str(os.getpid()))
    os.rename(path + '.tmp', path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('--title')
    parser.add_argument('--on-term', default='ignore')
    parser.add_argument('--ready')
    parser.add_argument('--child-title')
    parser.add_argument('--child-ready')
    parser.add_argument('--titled', action='store_true')
    args = parser.parse_args()
    if not args.titled:
        os.execv(PYTHON, [args.title, os.path.abspath(__file__), '--titled'] + sys.argv[1:])

    if args.on_term == 'fork':
        def fork_and_exit(signum, frame):
            child_argv = [PYTHON, os.path.abspath(__file__), '--title', args.child_title,
                          '--on-term', 'ignore', '--ready', args.child_ready]
            if os.fork() == 0:
                # Ignored before the exec (an ignored signal stays ignored across it): the child's argv
                # names its title, so a listing may match it, and signal it, before its own code runs.
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                os.execv(PYTHON, child_argv)
            # Exit only once the child runs under its title: a listing between the two would
            # otherwise see neither, which is not the case this stands in for.
            while not os.path.exists(args.child_ready):
                time.sleep(0.01)
            sys.exit(0)
        signal.signal(signal.SIGTERM, fork_and_exit)
    elif args.on_term == 'retitle':
        def retitle(signum, frame):
            os.execv(PYTHON, ['python3 draining', os.path.abspath(__file__), '--titled',
                                      '--on-term', 'ignore'])
        signal.signal(signal.SIGTERM, retitle)
    else:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.ready:
        write_ready(args.ready)
    while True:
        time.sleep(3600)


if __name__ == '__main__':
    main()
