# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A slot in the fleet's unavailability budget, held on the controller while a server is out.

Hosts of one batch run without waiting for each other (strategy free), so "may I take my server
down?" must be answered under one lock on the controller: count the slots held by hosts now in
their window (this run or another run on this controller), plus every other server of the fleet
that is unavailable right now (no 200 from /health, or not listed by the router), and grant the
slot only while that stays within max_unavailable. A slot records the pid of the ansible-playbook
process that holds it, so a run that died does not hold slots forever.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import write_atomic
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._fleet import unavailable_peers
from ansible_collections.gpuops.sglang.plugins.plugin_utils._host_files import host_file


def process_start(pid: int) -> str:
    """The process's start time in clock ticks (field 22 of /proc/PID/stat): a reused pid differs."""
    with open('/proc/%d/stat' % pid) as handle:
        return handle.read().rsplit(')', 1)[1].split()[19]


def owner_alive(slot: dict[str, Any]) -> bool:
    try:
        return process_start(int(slot['pid'])) == slot.get('pid_start')
    except (KeyError, TypeError, ValueError, OSError, IndexError):
        return False


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        dummy, args = self.validate_argument_spec(argument_spec=dict(
            state=dict(type='str', default='acquired', choices=['acquired', 'released']),
            host=dict(type='str', required=True),
            folder=dict(type='path', required=True),
            max_unavailable=dict(type='int', default=0),
            peers=dict(type='dict', default={}),
            router_url=dict(type='str', default=''),
            router_api_key=dict(type='str', default='', no_log=True),
            wait_timeout=dict(type='float', default=300),
            probe_timeout=dict(type='float', default=2),
            ttl=dict(type='float', default=0),
        ))
        folder = os.path.expanduser(args['folder'])
        # The ansible-playbook (or ansible-runner's) main process: workers are forked from it.
        owner = {'pid': os.getppid(), 'pid_start': process_start(os.getppid())}
        result.update(changed=False, slot=False, held_by=[], unavailable=[], waited_s=0.0)
        try:
            if not os.path.isdir(folder):
                os.makedirs(folder, 0o700)
        except OSError as exc:
            raise AnsibleActionFail('cannot create the fleet slot folder %s: %s' % (folder, exc), result=result)
        slot_path = os.path.join(folder, host_file(args['host'], 'slot'))
        if args['state'] == 'released':
            result['changed'] = self._release(folder, slot_path, owner)
            return result
        if args['max_unavailable'] <= 0 or self._task.check_mode:
            result['slot'] = args['max_unavailable'] <= 0
            return result

        return self._acquire(args, folder, slot_path, owner, result)

    def _acquire(self, args: dict[str, Any], folder: str, slot_path: str, owner: dict[str, Any],
                 result: dict[str, Any]) -> dict[str, Any]:
        """Wait, under the controller's lock, until taking this host down keeps the fleet within its budget."""
        begun = time.time()
        while True:
            with open(os.path.join(folder, '.lock'), 'a') as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                mine = self._read(slot_path)
                if mine is not None and self._live(mine) and mine.get('pid') != owner['pid']:
                    raise AnsibleActionFail('another run (ansible-playbook pid %s) holds the slot of %s: it is '
                                            'redeploying that host now' % (mine.get('pid'), args['host']),
                                            result=result)
                # Only this fleet's hosts count: another fleet redeployed from this controller has its own budget.
                held = [host for host in self._held(folder, exclude=args['host']) if host in args['peers']]
                unavailable = unavailable_peers(args['peers'], args['router_url'], args['router_api_key'] or None,
                                                args['probe_timeout'], skip=set(held))
                me_down = args['host'] in dict(unavailable)
                others = [entry for entry in unavailable if entry[0] != args['host']]
                # A server that is down already costs nothing more when it is redeployed.
                total = len(held) + len(others) + (0 if me_down else 1)
                result.update(held_by=sorted(held), unavailable=[{'host': h, 'why': w} for h, w in others])
                if total <= args['max_unavailable']:
                    now = time.time()
                    slot = dict(owner, host=args['host'], since=now,
                                expires=now + args['ttl'] if args['ttl'] > 0 else None)
                    write_atomic(slot_path, to_bytes(json.dumps(slot)), mode=0o644, durable=False)
                    result.update(changed=True, slot=True, waited_s=round(time.time() - begun, 3))
                    return result
            if time.time() - begun >= args['wait_timeout']:
                result['waited_s'] = round(time.time() - begun, 3)
                raise AnsibleActionFail(
                    'taking %s down would make %d server(s) unavailable, more than max_unavailable %d: %s; '
                    'waited %ss for that to change' % (
                        args['host'], total, args['max_unavailable'],
                        ', '.join(['%s (in its window)' % h for h in sorted(held)]
                                  + ['%s (%s)' % (h, w) for h, w in others]) or 'none',
                        args['wait_timeout']), result=result)
            time.sleep(0.5)

    @staticmethod
    def _read(path: str) -> dict[str, Any] | None:
        try:
            with open(path) as handle:
                return json.load(handle)
        except (OSError, ValueError):
            return None

    @staticmethod
    def _live(slot: dict[str, Any]) -> bool:
        """A slot counts while the run that took it lives and, when it has one, its expiry has not passed
        (a host that became unreachable in its window is restored by its guard by then)."""
        expires = slot.get('expires')
        return owner_alive(slot) and (expires is None or time.time() < float(expires))

    def _held(self, folder: str, exclude: str) -> list[Any]:
        held = []
        for name in sorted(os.listdir(folder)):
            if not name.endswith('.json') or name == host_file(exclude, 'slot'):
                continue
            slot = self._read(os.path.join(folder, name))
            if slot is not None and self._live(slot):
                held.append(slot['host'])
        return held

    @staticmethod
    def _release(folder: str, slot_path: str, owner: dict[str, Any]) -> bool:
        with open(os.path.join(folder, '.lock'), 'a') as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(slot_path) as handle:
                    slot = json.load(handle)
            except (OSError, ValueError):
                return False
            # Another live run's slot for this host is not ours to drop.
            if slot.get('pid') != owner['pid'] and owner_alive(slot):
                return False
            os.unlink(slot_path)
            return True
