#!/usr/bin/env python3
"""Proxmox VE `pct` SIMULATOR: `pct status VMID` and `pct exec VMID -- CMD ...` only.

A container is a real set of namespaces whose init has host PID N, recorded as
$PCT_SIM_STATE/VMID.pid (default /etc/pve-sim). `exec` enters them with
nsenter, as lxc-attach does, and runs CMD there with no shell in between.
Fault knob (for tests): while $PCT_SIM_STATE/fail-exec exists, `exec` prints its text and exits 255,
as pct does when it cannot attach.
"""
import os
import socket
import sys

from procfs import is_live

STATE = os.environ.get('PCT_SIM_STATE', '/etc/pve-sim')


def usage():
    sys.stderr.write('pct simulator: only "pct status VMID" and "pct exec VMID -- CMD [ARG...]" are simulated\n')
    return 2


def init_pid(vmid):
    """Host PID of the container's init, or None when the container is stopped; exits 255 if it does not exist."""
    path = os.path.join(STATE, '%s.pid' % vmid)
    if not os.path.exists(path):
        sys.stderr.write("Configuration file 'nodes/%s/lxc/%s.conf' does not exist\n" % (socket.gethostname(), vmid))
        sys.exit(255)
    with open(path) as handle:
        text = handle.read().strip()
    return int(text) if text and is_live(text) else None


def main(argv):
    if len(argv) < 2 or not argv[1].isdigit():
        return usage()
    verb, vmid = argv[0], argv[1]
    if verb == 'status' and len(argv) == 2:
        print('status: %s' % ('running' if init_pid(vmid) else 'stopped'))
        return 0
    if verb == 'exec' and len(argv) >= 4 and argv[2] == '--':
        fault = os.path.join(STATE, 'fail-exec')
        if os.path.exists(fault):
            with open(fault) as handle:
                sys.stderr.write(handle.read())
            return 255
        pid = init_pid(vmid)
        if pid is None:
            sys.stderr.write('CT %s not running\n' % vmid)
            return 255
        os.execvp('nsenter', ['nsenter', '--target', str(pid), '--all', '--'] + argv[3:])
    return usage()


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
