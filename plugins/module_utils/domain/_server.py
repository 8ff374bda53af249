# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Start, stop, wait for and verify one SGLang server, as systemd unit or detached process.

Domain layer. Pure standard library (plus this collection's base and reader files), because
two callers share it: the sglang_server module, and the host-side guard (_guard.py), which
runs on the gpu host without Ansible when the controller is gone. External commands run
through a ``runner(argv, timeout) -> (rc, stdout, stderr)`` the caller supplies
(``CommandRunner.as_runner()``, or _command.subprocess_runner in the guard).

launch.json: {"python": ..., "module": ..., "args": [...], "environment": {...}}. The
server runs as ``PYTHON -m MODULE ARGS``, so its command line is what SGLang's own
tooling and the kill patterns match.

API keys: SGLang's ``--api-key`` protects every endpoint but /health* and /metrics. The role hands
the keys over in a 0600 YAML file named by ``--config`` in the launch arguments (an argument would be
readable by every local user in /proc/PID/cmdline). A Server reads the key of the server it manages
from that file on the host, at the moment it asks: the live file names the running server's key (the
stop's drain), the new one the new server's (the verification), the restored one the previous
server's (the guard). The key never passes through a module's arguments or results.

Whose port: a local user may bind the server's port first (SGLang binds it only once its model is loaded), and
would then answer /health and get every request, key and all. Nothing is sent to the server's URL, and no answer
counts, until the socket listening where that URL connects is shown to be held by the server's own processes
(``listener_not_ours``, over _sockets).

A rank above 0 of a server spanning several hosts (``--node-rank`` > 0) serves no HTTP: its base URL is
"" and its health is its process being alive. The group's health is a generation on rank 0, which needs
every rank (the role checks it there).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import subprocess
import sys
import time

from urllib.parse import urlsplit
from typing import Any, Callable, Iterator

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import subprocess_runner
from ansible_collections.gpuops.sglang.plugins.module_utils.base._files import UntrustedPath, open_append_no_follow, write_atomic
from ansible_collections.gpuops.sglang.plugins.module_utils.base._http import NO_ANSWER, bearer, http_get, http_request, parse_json
from ansible_collections.gpuops.sglang.plugins.module_utils.base._identity import Identity, UnknownIdentity, identity
from ansible_collections.gpuops.sglang.plugins.module_utils.base._polling import poll_until
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._processes import (
    LAUNCH_MARK,
    SERVICE_MARK,
    ProcessRecord,
    ServerMarks,
    ServerOwnership,
    port_of,
    select,
    terminate,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._procfs import (
    LocalProcesses,
    described,
    protected_pids,
    read_identity,
    read_proc_record,
    user_named,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._sockets import Listener, held_sockets, read_listeners, reached, socket_holders

# Where the server is, as sglang_server, sglang_server_info and sglang_guard's `server` take it (one spec; the doc
# fragment gpuops.sglang.server documents it).
SERVER_OPTIONS = dict(
    service_name=dict(type='str', default='sglang'),
    launch_file=dict(type='path', required=True),
    pidfile=dict(type='path', required=True),
    url=dict(type='str', required=True),
    # Who the server runs as (the role's sglang_user, sglang_group); None: the user the module runs as.
    user=dict(type='str'),
    group=dict(type='str'),
)

# The bound of one systemctl or launch command (sglang_server's CommandRunner deadline); the plan's step bounds
# (plugin_utils/_timing.py) count it too.
COMMAND_TIMEOUT = 60

# A detached server's environment names its service and launch file (SERVICE_MARK, LAUNCH_MARK, defined with the
# kill policy that also reads them): a run whose pid file is elsewhere (sglang_run_dir changed since the server
# started) still finds it, in /proc/PID/environ, fixed at its exec. Both, so that two servers of one name on a host
# (test runs side by side) are never taken for each other.


class ServerError(Exception):
    """The server could not be started or stopped; the message says why."""


class NotOurListener(ServerError):
    """What listens where the server's URL connects is not the server's own (or nothing is): nothing was sent."""


def _launch_spec(path: str) -> dict[str, Any]:
    with open(path) as handle:
        return json.load(handle)


def _launch_args(spec: dict[str, Any]) -> list[Any]:
    return [str(arg) for arg in spec.get('args', [])]


def load_launch(path: str) -> tuple[list[str], dict[str, str]]:
    """argv and environment of the server described by a launch.json."""
    spec = _launch_spec(path)
    argv = [spec['python'], '-m', spec['module']] + _launch_args(spec)
    env = dict(os.environ)
    env.update({key: str(value) for key, value in spec.get('environment', {}).items()})
    return argv, env


def read_config_keys(path: str) -> dict[str, str]:
    """{option: value} of a flat ``key: value`` YAML file as the role writes it (values JSON-quoted).

    Pure standard library (the guard runs without PyYAML): the role renders each value with to_json,
    which is also a valid YAML double-quoted scalar. Comments and blank lines are skipped; a line this
    reader does not understand raises ValueError.
    """
    options = {}
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            text = line.strip()
            if not text or text.startswith('#'):
                continue
            name, colon, value = text.partition(':')
            if not colon:
                raise ValueError('%s line %d is not "key: value"' % (path, number))
            value = value.strip()
            options[name.strip().replace('_', '-')] = json.loads(value) if value.startswith('"') else value
    return options


def launch_api_key(launch_file: str) -> str | None:
    """The API key of the server a launch.json describes (its --config file's api-key); None without one.

    An --api-key argument is read too (a launch configuration written by hand), though the role never
    writes one: there it would be readable in /proc/PID/cmdline.
    """
    try:
        args = _launch_args(_launch_spec(launch_file))
    except (OSError, ValueError, AttributeError):
        return None
    key = None
    for path in _option_values(args, '--config'):
        try:
            key = read_config_keys(path).get('api-key') or key
        except (OSError, ValueError):
            pass
    # As SGLang merges them: arguments on the command line win over the config file's.
    for value in _option_values(args, '--api-key'):
        key = value
    return key or None


def _option_values(args: list[str], name: str) -> Iterator[str]:
    """Each value given to option name in args, as --name VALUE or --name=VALUE, in order."""
    for index, arg in enumerate(args):
        if arg.startswith(name + '='):
            yield arg.split('=', 1)[1]
        elif arg == name and index + 1 < len(args):
            yield args[index + 1]


def answered(path: str, status: int, body: bytes | None = None) -> str:
    """How a failed request answered, in words an operator can act on (with no answer, why: body is then
    _http's reason, a timeout or a cap, say)."""
    if status == NO_ANSWER:
        why = body.decode('utf-8', 'replace') if body else ''
        return '%s answered nothing%s' % (path, ': %s' % why if why else '')
    if status == 401:
        return ('%s answered 401: the server wants an API key and refused the one in its launch configuration'
                ' (or there was none)' % path)
    return '%s answered %s' % (path, status)


def in_flight_from_loads(path: str, body: bytes) -> int:
    """Requests the server holds (running + waiting), from SGLang's /v1/loads or older /get_load."""
    data = parse_json(body)
    if path == '/v1/loads':
        return int(data['aggregate']['total_reqs'])
    return sum(int(rank['num_reqs']) for rank in data)


class ServiceDriver:
    """How one server is run and stopped: the part of a Server that depends on its manager, as kolla-ansible's
    ContainerWorker has its DockerWorker and PodmanWorker. A Server picks one at its creation (``DRIVERS``) and
    keeps everything else (HTTP, health, readiness, strays, settings) for both."""

    # Why the last reading of the server's processes ignored its pid file; only a detached server has one.
    pidfile_ignored = None

    def __init__(self, server: Server) -> None:
        # The Server itself, not a copy of its settings: its runner records each command (server.commands) and a
        # caller may change a setting (cgroup_root, say) after the Server was made.
        self.server = server

    def main_pid(self) -> int | None:
        """PID of the running server's main process, or None."""
        raise NotImplementedError

    def own_pids(self, pid: int) -> list[int]:
        """The processes, sorted, that a stop of the server running as pid (not None) ends."""
        raise NotImplementedError

    def stop(self, pid: int | None, wait: bool,
             stray_patterns: list[re.Pattern]) -> tuple[bool, list[int], list[ProcessRecord]]:
        """Stop the server main_pid() found as pid (with wait=False: begin to); (changed, stopping, strays).

        changed is False when nothing of the server ran. strays (Server._strays) is read from the same reading
        that names the server's own, before anything is signalled; stopping is what is left for the next step
        to wait on (Server.stop says more)."""
        raise NotImplementedError

    def start(self, daemon_reload: bool) -> tuple[int, Callable[[], str | None]]:
        """Start the server; (its PID, a callable saying why it died or None)."""
        raise NotImplementedError


class SystemdDriver(ServiceDriver):
    """A systemd unit: systemctl starts, stops and names it; its control group holds its processes."""

    def _systemctl(self, *args: str, **kwargs: Any) -> tuple[int, str, str]:
        return self.server._run(['systemctl'] + list(args), kwargs.get('timeout'))

    def main_pid(self) -> int | None:
        name = self.server.service_name
        rc, out, err = self._systemctl('show', '--property=MainPID', '--value', name)
        # systemctl show answers rc 0 and MainPID 0 for a unit that is stopped or unknown; anything else
        # (rc 124 from a hung systemctl, a garbled answer) means the state is unknown, not "not running".
        if rc != 0 or not out.strip().isdigit():
            raise ServerError('systemctl show --property=MainPID --value %s failed (rc %s): %s; the state of the'
                              ' server is unknown' % (name, rc, (err or out).strip() or 'no answer'))
        return int(out.strip()) or None

    def own_pids(self, pid: int) -> list[int]:
        """Every process of the unit (its cgroup), so that the next step waits for the children too; else the main PID."""
        name = self.server.service_name
        rc, out, dummy = self._systemctl('show', '--property=ControlGroup', '--value', name)
        group = out.strip() if rc == 0 else ''
        # Only the unit's own group: an empty answer would name the root group, every process of the host.
        if not group.endswith('/%s.service' % name):
            return [pid]
        # cgroup v2 (one hierarchy), then v1's systemd hierarchy (hybrid hosts, containers on them).
        for root in (self.server.cgroup_root, os.path.join(self.server.cgroup_root, 'systemd')):
            try:
                with open(root + group + '/cgroup.procs') as handle:
                    pids = sorted({int(line) for line in handle if line.strip()})
            except (OSError, ValueError):
                continue
            if pid in pids:
                return pids
        return [pid]

    def stop(self, pid: int, wait: bool, stray_patterns: list[Any]) -> tuple[bool, list[Any], list[Any]]:
        server = self.server
        if pid is None:
            return False, [], server._strays(stray_patterns, [])
        # KillMode=mixed and TimeoutStopSec in the unit give SGLang its drain, then SIGKILL the rest. The group is
        # read only when someone needs it: the strays, or the next step that waits on what is stopping.
        own = self.own_pids(pid) if stray_patterns or not wait else [pid]
        strays = server._strays(stray_patterns, own)
        argv = ('stop', server.service_name) if wait else ('stop', '--no-block', server.service_name)
        rc, out, err = self._systemctl(*argv, timeout=server.term_timeout + server.command_timeout)
        if rc != 0:
            raise ServerError('systemctl stop %s failed (rc %s): %s' % (server.service_name, rc, (err or out).strip()))
        return True, [] if wait else own, strays

    def start(self, daemon_reload: bool) -> tuple[int, Callable]:
        name = self.server.service_name
        if daemon_reload:
            self._systemctl('daemon-reload')
        # Enabled, so that the server comes back after a reboot of the host (idempotent). Without
        # --no-reload, enable reloads systemd's whole configuration (about 0.1 s, inside the outage);
        # the link it makes only matters at boot, and a changed unit was reloaded above.
        rc, out, err = self._systemctl('enable', '--no-reload', name)
        if rc != 0:
            raise ServerError('systemctl enable %s failed (rc %s): %s' % (name, rc, (err or out).strip()))
        rc, out, err = self._systemctl('start', name)
        if rc != 0:
            raise ServerError('systemctl start %s failed (rc %s): %s' % (name, rc, (err or out).strip()))
        return self.main_pid(), self.death

    def death(self) -> str | None:
        """Why the started unit is down (failed or inactive), or None while it runs."""
        dummy, out, dummy = self._systemctl('show', '--property=ActiveState,Result', self.server.service_name)
        props = dict(line.split('=', 1) for line in out.splitlines() if '=' in line)
        if props.get('ActiveState') in ('failed', 'inactive'):
            return 'unit %s is %s (result %s); see %s' % (
                self.server.service_name, props.get('ActiveState'), props.get('Result', '?'), self.server.log_file)
        return None


class DetachedDriver(ServiceDriver):
    """A process in a session of its own, started here: its pid file names the session's leader (else the marks
    its start put in its environment do), and a stop ends that session."""

    def __init__(self, server: Server) -> None:
        super().__init__(server)
        self.pidfile_ignored = None

    def main_pid(self) -> int | None:
        leader, members = self._session()
        if leader is not None and any(record.pid == leader for record in members):
            return leader
        return None

    def own_pids(self, pid: int) -> list[int]:
        return sorted(record.pid for record in self.session_members())

    def stop(self, pid: int | None, wait: bool, stray_patterns: tuple[()]) -> tuple[bool, list[Any], list[Any]]:
        processes = self.server.processes
        members = self.session_members()
        strays = self.server._strays(stray_patterns, [record.pid for record in members])
        if not members:
            self._remove_pidfile()
            return False, [], strays
        # SIGTERM to the main process only: SGLang drains, then stops its own children;
        # whatever of the session is left after term_timeout gets SIGKILL (systemd's KillMode=mixed).
        main = [record for record in members if record.pid == pid] or members[:1]
        if not wait:
            processes.signal(main, 'TERM')
            return True, sorted(record.pid for record in members), strays
        outcome = terminate(processes, main, self.server.term_timeout)
        rest = self.session_members()
        if rest:
            outcome = terminate(processes, rest, 0)
        if outcome.remaining:
            raise ServerError('processes of the server survived SIGKILL: %s'
                              % ', '.join('%d (%s)' % (r.pid, r.cmdline) for r in outcome.remaining))
        self._remove_pidfile()
        return True, [], strays

    def start(self, daemon_reload: bool) -> tuple[int, Callable]:
        server = self.server
        argv, env = load_launch(server.launch_file)
        env.update(self._marks())
        try:
            log = open_append_no_follow(server.log_file)
        except UntrustedPath as exc:
            raise ServerError('refused to write the server\'s output to %s: %s. Remove it (whoever may write its folder'
                              ' may have linked it to a file of root\'s) and keep the log in a folder only root can'
                              ' write, as the role\'s preflight requires.' % (server.log_file, exc))
        try:
            # Its own session: the server outlives this process and the ssh connection, and a
            # stop signals exactly this session.
            # run_command waits for its child: the server must outlive the module.
            child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,  # pylint: disable=ansible-bad-function
                                     env=env, cwd='/', close_fds=True, start_new_session=True,
                                     **_run_as(server.identity()))
        except OSError as exc:
            raise ServerError('could not run %s as %s: %s' % (argv[0], server.user or 'this user', exc))
        finally:
            os.close(log)
        # Not fsynced: a pid file outlives neither the server nor a reboot, and this is inside the outage.
        write_atomic(server.pidfile, str(child.pid).encode('ascii'), 0o644, durable=False)

        def death() -> str | None:
            status = child.poll()
            if status is None:
                return None
            return 'the server exited with status %s; see %s' % (status, server.log_file)
        return child.pid, death

    def session_members(self) -> list[Any]:
        """Live processes of the server's session (its pid file names the leader, else its mark)."""
        return self._session()[1]

    def _session(self) -> tuple[int | None, list[Any]]:
        """(leader, live members) of the server's session: the pid file's, when its leader is this
        server's (``_not_ours``), or else the one session whose leader carries the marks of this service and
        launch file (started by a run whose sglang_run_dir was another). A pid file that names another
        process (a stale one whose pid was reused) is ignored, and ``pidfile_ignored`` says why."""
        server = self.server
        sessions = self._sessions()
        leader = self._read_pid()
        self.pidfile_ignored = None
        if leader is not None and sessions.get(leader):
            # The leader, or each process left of its session when it is gone (a crash leaves its children).
            why = self._not_ours([leader] if leader in sessions[leader] else sessions[leader], legacy=True)
            if why is not None:
                self.pidfile_ignored = ('the pid file %s names process %d, which is not the server %s: %s;'
                                        ' the pid file was ignored' % (server.pidfile, leader, server.service_name, why))
                leader = None
        else:
            leader = None
        if leader is None:
            leader = self._marked_leader(sessions)
        members = []
        for pid in sessions.get(leader, []) if leader is not None else []:
            record = read_proc_record(pid, server.processes.proc_root)
            if record is not None:
                members.append(record)
        return leader, members

    def _sessions(self) -> dict[int, list[int]]:
        """{session id: the PIDs of its live processes}, from one reading of /proc."""
        processes = self.server.processes
        sessions = {}
        for pid in processes.pids():
            try:
                with open(os.path.join(processes.proc_root, str(pid), 'stat'), 'rb') as handle:
                    fields = handle.read().decode('utf-8', 'replace').rsplit(')', 1)[1].split()
                session = int(fields[3])
            except (OSError, IndexError, ValueError):
                continue
            # fields: state ppid pgrp session ...
            if fields[0] not in ('Z', 'X'):
                sessions.setdefault(session, []).append(pid)
        return sessions

    def _marks(self) -> dict[str, str]:
        return {SERVICE_MARK: self.server.service_name, LAUNCH_MARK: os.path.abspath(self.server.launch_file)}

    def _read_proc(self, pid: int, name: str) -> bytes | None:
        try:
            with open(os.path.join(self.server.processes.proc_root, str(pid), name), 'rb') as handle:
                return handle.read()
        except OSError:
            return None

    def _not_ours(self, pids: list[int], legacy: bool = False) -> str | None:
        """Why the processes pids are not this server's (None when each is): each must run as the server's user
        (all four uids) and carry both marks in its environment. With legacy, a process without marks is
        accepted when its command line is exactly the one the launch file describes (a server started by a
        release before the marks, from the launch file still in place); never one of another user."""
        marks = {('%s=%s' % pair).encode('utf-8') for pair in self._marks().items()}
        try:
            server_uid = self.server.identity().uid
        except ServerError as exc:
            return str(exc)
        for pid in pids:
            dummy, uids = read_identity(pid, self.server.processes.proc_root)
            if uids is None:
                return 'process %d cannot be read' % pid
            if set(uids) != {server_uid}:
                return 'process %d runs as uid %s, not as the server\'s user (uid %d)' % (
                    pid, '/'.join(str(uid) for uid in uids), server_uid)
            environment = self._read_proc(pid, 'environ')
            if environment is not None and marks <= set(environment.split(b'\0')):
                continue
            if legacy and self._runs_launch_command(pid):
                continue
            return ('process %d carries neither the marks of the service %s and the launch file %s nor the command'
                    ' line that launch file describes' % (pid, self.server.service_name, self.server.launch_file))
        return None

    def _runs_launch_command(self, pid: int) -> bool:
        """Whether pid's command line is the argv the launch file describes, to the byte."""
        try:
            argv = load_launch(self.server.launch_file)[0]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        cmdline = self._read_proc(pid, 'cmdline')
        return cmdline is not None and cmdline.split(b'\0')[:-1] == [os.fsencode(arg) for arg in argv]

    def _marked_leader(self, sessions: dict[int, list[int]]) -> int | None:
        """The session leader started for this service and launch file (its marks) as the server's user; None
        when there is none. A process of another user is never taken for the server, whatever its environment
        says; two marked sessions are an error, not a guess."""
        server = self.server
        found = [leader for leader in sorted(sessions) if leader in sessions[leader] and self._not_ours([leader]) is None]
        if len(found) > 1:
            raise ServerError('%d detached sessions were started for the service %s from %s (pids %s) and the pid file %s'
                              ' names none of them; the state of the server is unknown: stop the ones that should'
                              ' not run' % (len(found), server.service_name, server.launch_file,
                                            ', '.join(str(pid) for pid in found), server.pidfile))
        return found[0] if found else None

    def _read_pid(self) -> int | None:
        try:
            with open(self.server.pidfile) as handle:
                return int(handle.read().strip())
        except (OSError, ValueError):
            return None

    def _remove_pidfile(self) -> None:
        try:
            os.unlink(self.server.pidfile)
        except OSError:
            pass


# The drivers by the `manager` a Server is made with.
DRIVERS = {'systemd': SystemdDriver, 'detached': DetachedDriver}


def _run_as(who: Identity) -> dict[str, Any]:
    """Popen's arguments that start the server as `who`: nothing when this process already runs as it. The drop
    happens in the child between fork and exec (initgroups, setgid, setuid, as systemd's User= and Group=), by
    Popen's own C code from Python 3.9; a 3.8 host drops in a preexec_fn."""
    if who.is_current:
        return {}
    if sys.version_info >= (3, 9):
        return {'user': who.uid, 'group': who.gid, 'extra_groups': list(who.groups)}
    return {'preexec_fn': who.become}


class Server:
    """One server: how it is managed (its driver), where its files are and where it answers."""

    def __init__(self, manager: str, service_name: str, launch_file: str, pidfile: str, log_file: str, base_url: str,
                 term_timeout: float = 30.0, runner: Callable = subprocess_runner, command_timeout: float = 60.0,
                 proc_root: str = '/proc', cgroup_root: str = '/sys/fs/cgroup', check_listener: bool = True,
                 user: str | None = None, group: str | None = None) -> None:
        if manager not in DRIVERS:
            raise ValueError('manager must be systemd or detached, not %r' % (manager,))
        self.manager = manager
        self.service_name = service_name
        self.launch_file = launch_file
        self.pidfile = pidfile
        self.log_file = log_file
        self.base_url = base_url.rstrip('/')
        self.term_timeout = float(term_timeout)
        self.runner = runner
        self.command_timeout = command_timeout
        self.processes = LocalProcesses(proc_root)
        self.cgroup_root = cgroup_root
        self.commands = []
        # progress(horizon_s), when set, is called before each read of a wait that may take that long
        # (the rollback guard's lease renews there while a server loads its model).
        self.progress = None
        # Why the last check of the server's port found it held by another process than the server's (None when it
        # did not): what a wait that ran out of time says, and what a read-only report warns of.
        self.foreign_listener = None
        # False only for a caller that knows the server's URL and nothing of its processes (sglang_benchmark given the
        # URL alone), whose requests are the URL's whoever listens there.
        self.check_listener = check_listener
        # Who the server runs as (None: the user this process runs as, root for the role's modules and the guard).
        self.user = user or None
        self.group = group or None
        # The other servers of this machine (ServerMarks): a stray carrying their marks is theirs (issue 44).
        self.neighbours = []
        # The matches of the last reading of strays that are not this server's: {pid, cmdline, why}.
        self.spared = []
        self.driver = DRIVERS[manager](self)

    @classmethod
    def from_dict(cls, spec: dict[str, Any], **kwargs: Any) -> Server:
        # `base_url`: the name a guard armed before the server's options were one spec recorded.
        url = spec['url'] if 'url' in spec else spec['base_url']
        # `user`, `group`: absent from a guard armed before the server had a user of its own (it ran as root).
        return cls(spec['manager'], spec['service_name'], spec['launch_file'], spec['pidfile'],
                   spec['log_file'], url, spec.get('term_timeout', 30), user=spec.get('user'), group=spec.get('group'),
                   **kwargs)

    def identity(self) -> Identity:
        """The identity the server runs as (_identity.Identity); ServerError when its user or group does not exist."""
        try:
            return identity(self.user, self.group)
        except UnknownIdentity as exc:
            raise ServerError('%s: the server %s cannot run as it; create it, or name another (the role\'s sglang_user'
                              ' and sglang_group)' % (exc, self.service_name))

    def _run(self, argv: list[str], timeout: float | None = None) -> tuple[int, str, str]:
        self.commands.append(list(argv))
        rc, out, err = self.runner(argv, timeout or self.command_timeout)
        return rc, out, err

    def _request(self, method: str, path: str, timeout: float, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
        """One request to the server, with its API key (read from its launch configuration now), sent only once
        the socket listening where base_url connects is the server's own; NotOurListener, with nothing sent,
        otherwise."""
        why = self.listener_not_ours()
        if why is not None:
            raise NotOurListener(why)
        return http_request(method, self.base_url + path, timeout, body=body, headers=bearer(self.api_key()))

    # --- whose port -------------------------------------------------------

    def listener_not_ours(self, name_holders: bool = True) -> str | None:
        """None when every socket a connection to base_url lands on is held by the server's own processes (its
        unit's control group, or its session); else why not, with the holder named where one can be found
        (name_holders: a search of every process's open files, which a probe repeated every interval skips).

        One read of /proc/net/tcp and tcp6; only while something listens there, the server's main PID, its own
        processes and their open files. Nothing is kept from one call to the next: a restarted server, or one
        that died and left its port to someone else, is read anew. foreign_listener keeps the why when another
        process holds the port.
        """
        self.foreign_listener = None
        if not self.check_listener:
            return None
        try:
            port, addresses = self._endpoints()
            listeners = read_listeners(port, self.processes.proc_root)
        except (OSError, ValueError) as exc:
            return 'whose socket listens at %s cannot be told: %s; nothing was sent to it' % (self.base_url, exc)
        landing = []
        for address in addresses:
            landing.extend(listener for listener in reached(listeners, address, port) if listener not in landing)
        if not landing:
            return 'nothing listens at %s' % self.base_url
        pid = self.main_pid()
        held = held_sockets(self.own_pids(pid), [listener.inode for listener in landing], self.processes.proc_root)
        foreign = [listener for listener in landing if listener.inode not in held]
        if not foreign:
            return None
        self.foreign_listener = 'port %d is held by %s, not by the started server%s' % (
            port, self._holders(foreign) if name_holders else 'another process',
            '' if pid is not None else ' (the server is not running)')
        return self.foreign_listener

    def foreign_listener_named(self) -> str | None:
        """foreign_listener read anew with its holder named, which the probes of health() skip; None when no other
        process holds the port now (or none did at the last check)."""
        if self.foreign_listener is not None:
            self.listener_not_ours()
        return self.foreign_listener

    def _endpoints(self) -> tuple[int, list[str]]:
        """(port, the addresses base_url's host stands for); ValueError or OSError when it names none."""
        parts = urlsplit(self.base_url)
        port = parts.port or (443 if parts.scheme == 'https' else 80)
        try:
            return port, [str(ipaddress.ip_address(parts.hostname or ''))]
        except ValueError:
            pass
        if not parts.hostname:
            raise ValueError('the URL names no host')
        # A name: each address the HTTP client may try, in the order it tries them.
        found = []
        for info in socket.getaddrinfo(parts.hostname, port, 0, socket.SOCK_STREAM):
            address = info[4][0].split('%', 1)[0]
            if address not in found:
                found.append(address)
        return port, found

    def _holders(self, listeners: list[Listener]) -> str:
        """Who holds each listener, as an operator finds them: PID, user and command, or the socket's owner."""
        proc_root = self.processes.proc_root
        holders = socket_holders([listener.inode for listener in listeners], proc_root)
        named = []
        for listener in listeners:
            pids = holders.get(listener.inode, [])
            for pid in pids:
                record = read_proc_record(pid, proc_root)
                uids = read_identity(pid, proc_root)[1]
                # The holder chose its command line: no line break or control character of it reaches a message.
                command = ''.join(char if char.isprintable() else ' ' if char.isspace() else '?'
                                  for char in (record.cmdline if record is not None else '?'))
                named.append('PID %d (user %s, command %s)' % (
                    pid, user_named(uids[1]) if uids else '?',
                    command if len(command) <= 200 else command[:200] + '...'))
            if not pids:
                named.append('a socket of user %s on %s that no process here holds (one of another network'
                             ' namespace or PID namespace, or one this user may not read)'
                             % (user_named(listener.uid), listener.endpoint))
        return ', '.join(named)

    def api_key(self) -> str | None:
        """The API key its launch configuration gives it now (None without one); never cached: a run rotates it."""
        return launch_api_key(self.launch_file)

    # --- what runs --------------------------------------------------------

    @property
    def pidfile_ignored(self) -> str | None:
        """Why the last reading of a detached server's session ignored its pid file (None when it did not)."""
        return self.driver.pidfile_ignored

    def session_members(self) -> list[Any]:
        """Live processes of the detached server's session (its pid file names the leader, else its mark)."""
        return self.driver.session_members()

    def main_pid(self) -> int | None:
        """PID of the running server's main process, or None."""
        return self.driver.main_pid()

    def own_pids(self, pid: int | None) -> list[Any]:
        """The processes a stop of the server running as `pid` ends: its unit's control group, or its session."""
        if pid is None:
            return []
        return self.driver.own_pids(pid)

    def described_own(self, pid: int) -> list[dict[str, Any]]:
        """{pid, user, cmdline, gpus} of each process a stop of the server running as `pid` ends (a dry run's list;
        its GPUs are gpu_release's to name)."""
        records = (read_proc_record(own, self.processes.proc_root) for own in self.own_pids(pid))
        return [described(record, self.processes.proc_root) for record in records if record is not None]

    def strays(self, patterns: list[Any], pid: int | None) -> list[Any]:
        """Live processes matching any compiled pattern that are not the server's own (nor this process and its ancestors)."""
        # No patterns, nothing to read: a check-mode call without them must not cost a systemctl call.
        return self._strays(patterns, self.own_pids(pid)) if patterns else []

    def marks(self) -> ServerMarks:
        """What tells this server's processes from its neighbours' (ServerOwnership): its service name, its launch
        file, and its ports, its URL's and the one its live launch file gives (the running server's, where a run
        changes the port)."""
        ports = set()
        if self.base_url:
            try:
                parts = urlsplit(self.base_url)
                ports.add(parts.port or (443 if parts.scheme == 'https' else 80))
            except ValueError:
                pass
        try:
            given = port_of(' '.join(_launch_args(_launch_spec(self.launch_file))))
        except (OSError, ValueError, AttributeError, TypeError):
            given = None
        if given is not None:
            ports.add(given)
        return ServerMarks(self.service_name, tuple(sorted(ports)), os.path.abspath(self.launch_file))

    def _strays(self, patterns: tuple[()], own: list[Any]) -> list[Any]:
        """The matches that are this server's leftovers; those of a neighbour (or of nobody that can be told, beside
        neighbours) land in self.spared, never among them."""
        self.spared = []
        if not patterns:
            return []
        protected = protected_pids(self.processes.proc_root) | set(own)
        ownership = ServerOwnership(self.marks(), self.neighbours)
        listing = self.processes.list(with_marks=ownership.judges)
        strays, self.spared = ownership.sort(select(listing, patterns, protected), listing)
        return strays

    # --- stop and start ---------------------------------------------------

    def stop(self, wait: bool = True, stray_patterns: tuple[()] = ()) -> dict[str, Any]:
        """Stop gracefully (SIGTERM, drain, SIGKILL after term_timeout). Returns a result dict.

        With compiled ``stray_patterns``, ``strays`` lists the matching processes that are not the
        server's own, read right before the SIGTERM from the same snapshot that names the server's own
        (``stopping``), so that no process is in neither list.

        With wait=False the stop is only begun: SIGTERM is sent (systemd: the stop job is queued, and
        systemd itself gives the drain TimeoutStopSec, then SIGKILLs the unit) and the processes being
        stopped are returned under ``stopping``, for the next step to wait on (gpu_release's or
        pct_exec_kill's await_exit). The drain then overlaps that step's start-up instead of adding to
        the outage. Whoever waits on ``stopping`` SIGKILLs what is still there after term_timeout, as
        the waiting stop does (gpu_release's and pct_exec_kill's await_exit).
        """
        started = time.time()
        pid = self.main_pid()
        changed, stopping, strays = self.driver.stop(pid, wait, stray_patterns)
        if not changed:
            return {'changed': False, 'stopped_at': None, 'pid': None, 'stopping': [], 'strays': strays,
                    'spared': self.spared}
        return {'changed': True, 'stopped_at': started, 'pid': pid, 'stop_elapsed': round(time.time() - started, 3),
                'stopping': stopping, 'strays': strays, 'spared': self.spared}

    def start(self, daemon_reload: bool = False) -> tuple[dict[str, Any], Callable]:
        """Start the server; returns (result dict, a callable saying why it died or None)."""
        started = time.time()
        pid, death = self.driver.start(daemon_reload)
        return {'changed': True, 'started_at': started, 'pid': pid}, death

    # --- health and verification -----------------------------------------

    def _progress(self, horizon_s: float) -> None:
        if self.progress is not None:
            self.progress(horizon_s)

    # How long a rank without HTTP must stay up after its start before it counts as started: what ends a rank at
    # once (a bad flag, a missing module) shows within it, and the group's stop is then cheap; a later death
    # shows at rank 0, whose health waits for every rank.
    RANK_SETTLE_S = 1.0

    @property
    def serves_http(self) -> bool:
        """False for a rank > 0 of a multi-node server: it runs schedulers only, rank 0 answers for it."""
        return bool(self.base_url)

    def health(self, timeout: float = 5.0) -> int:
        """/health's status, asked only of the server's own listener: NO_ANSWER, and nothing asked, while its port
        is free or another process's (foreign_listener says so, foreign_listener_named() whose)."""
        if not self.serves_http:
            # Nothing to ask: alive is all a rank > 0 can show (200 as /health would, else no answer).
            return 200 if self.main_pid() is not None else NO_ANSWER
        if self.listener_not_ours(name_holders=False) is not None:
            return NO_ANSWER
        # SGLang leaves /health* open whatever its keys: liveness needs no secret (nor a file read per probe).
        return http_get(self.base_url + '/health', timeout)[0]

    def wait_healthy(self, timeout: float, interval: float = 0.25, died: Callable | None = None) -> dict[str, Any]:
        """Poll /health on this host every `interval` s until 200, the server dies, or timeout.

        A 200 counts only from a socket the server's own processes hold (health()): a process that took its port
        first is never asked, and the wait says whose the port is when it runs out. With died, it ends as soon as
        the started server is gone (died() says why).

        Returns a dict: healthy, healthy_at, attempts, last_status, and why (when not healthy).
        """
        state = {'attempts': 0, 'last_status': None, 'why': None}
        settled_at = time.time() + self.RANK_SETTLE_S

        def read() -> int | None:
            state['attempts'] += 1
            probe_timeout = max(0.5, min(5.0, interval * 4))
            self._progress(probe_timeout)
            status = self.health(timeout=probe_timeout)
            if status == 200 and not self.serves_http and time.time() < settled_at:
                status = NO_ANSWER
            state['last_status'] = status
            if died is not None:
                # Before a 200 too: the one started may have exited at once ("address already in use": a server the
                # stop missed, or another user's process, holds its port).
                why = died()
                held = self.foreign_listener_named() if why is not None else None
                if held is not None:
                    why += '; %s' % held
                elif why is not None and status == 200 and not self.serves_http:
                    why += '; another process of the service runs'
                state['why'] = why
            return status

        status = poll_until(read, lambda s: s == 200 or state['why'] is not None, timeout,
                            first_interval=interval, max_interval=interval)
        healthy = status == 200 and state['why'] is None
        why = None
        if not healthy:
            why = state['why'] or self.foreign_listener_named() or (
                '/health did not answer 200 within %ss (last: %s)' % (timeout, 'no answer' if status == NO_ANSWER else status))
        return {'healthy': healthy, 'healthy_at': time.time() if healthy else None,
                'attempts': state['attempts'], 'last_status': status, 'why': why}

    NO_LOAD_ENDPOINT = 'neither /v1/loads nor /get_load exists'
    # SGLang 0.5.x's load endpoints, newest first.
    LOAD_PATHS = ('/v1/loads', '/get_load')

    def in_flight(self, paths: tuple[str, ...] = LOAD_PATHS) -> tuple[int | None, str]:
        """(requests in flight, the path read); (None, why) when the server does not say."""
        for path in paths:
            try:
                status, body = self._request('GET', path, 5)
            except NotOurListener as exc:
                return None, str(exc)
            if status == 200:
                try:
                    return in_flight_from_loads(path, body), path
                except (ValueError, KeyError, TypeError) as exc:
                    return None, '%s answered 200 with an unexpected body (%s)' % (path, exc)
            if status != 404:
                return None, answered(path, status, body)
        return None, self.NO_LOAD_ENDPOINT

    def wait_idle(self, timeout: float, interval: float = 0.25, settle_reads: int = 2) -> dict[str, Any]:
        """Wait until the server holds no request (settle_reads zero readings in a row), up to timeout.

        Router removal only stops new traffic; what was already routed here finishes before the stop.
        A request between the tokenizer and the scheduler is not counted by the load endpoints for a
        moment, hence several zero readings in a row rather than one. Returns a dict: idle, in_flight
        (first and last reading), waited_s, source, why (when not idle).
        """
        begun = time.time()
        state = {'zeros': 0, 'first': None, 'last': None, 'source': None, 'why': None}

        def read() -> dict[str, Any]:
            # Once a path answered, only that one (an older server would cost a 404 first every time).
            self._progress(5.0 * len(self.LOAD_PATHS))
            count, source = self.in_flight((state['source'],) if state['source'] else self.LOAD_PATHS)
            if count is None:
                # A busy server may miss one reading: note why and read again, until the deadline. One
                # that has no load endpoint at all never will: stop waiting at once.
                state['why'] = source
                state['zeros'] = 0
                return state
            state.update(why=None, source=source, last=count)
            if state['first'] is None:
                state['first'] = count
            state['zeros'] = state['zeros'] + 1 if count == 0 else 0
            return state

        poll_until(read, lambda s: s['zeros'] >= settle_reads or s['why'] == self.NO_LOAD_ENDPOINT, timeout,
                   first_interval=interval, max_interval=interval)
        idle = state['zeros'] >= settle_reads
        why = None
        if state['why'] == self.NO_LOAD_ENDPOINT:
            why = 'the server reports no load (%s), so its drain cannot be seen' % state['why']
        elif not idle:
            why = ('%s request(s) still in flight after %ss' % (state['last'], timeout) if state['why'] is None
                   else 'the load could not be read within %ss: %s' % (timeout, state['why']))
        return {'idle': idle, 'in_flight_at_start': state['first'], 'in_flight_at_end': state['last'],
                'waited_s': round(time.time() - begun, 3), 'source': state['source'], 'why': why}

    def wait_ready(self, consecutive: int, timeout: float, interval: float = 0.25) -> dict[str, Any]:
        """After /health: `consecutive` 200s in a row from /health_generate (a real one-token generation on
        an idle SGLang server), or from /health where the server has no /health_generate."""
        state = {'path': '/health_generate', 'streak': 0, 'attempts': 0, 'last': None, 'refused': None}
        deadline = time.time() + timeout

        def read() -> dict[str, Any]:
            # Each request gets what is left of the budget (at most 20 s), so a hung read cannot overrun it.
            left = deadline - time.time()
            self._progress(max(0.1, min(20.0, left)))
            try:
                status, state['refused'] = self._request('GET', state['path'], max(0.1, min(20.0, left)))[0], None
            except NotOurListener as exc:
                status, state['refused'] = NO_ANSWER, str(exc)
            if status == 404 and state['path'] == '/health_generate':
                state['path'] = '/health'
                return state
            state['attempts'] += 1
            state['last'] = status
            state['streak'] = state['streak'] + 1 if status == 200 else 0
            return state

        poll_until(read, lambda s: s['streak'] >= consecutive, timeout, first_interval=interval, max_interval=interval)
        ready = state['streak'] >= consecutive
        why = None
        if not ready:
            why = '%s answered 200 only %d time(s) in a row of %d wanted within %ss (last: %s)' % (
                state['path'], state['streak'], consecutive, timeout,
                state['refused'] or ('no answer' if state['last'] == NO_ANSWER else state['last']))
        return {'ready': ready, 'path': state['path'], 'attempts': state['attempts'], 'why': why}

    def generate_once(self, timeout: float) -> dict[str, Any]:
        """One real generation request (one new token), as a client would send it."""
        begun = time.time()
        try:
            status, body = self._request('POST', '/generate', timeout,
                                         body={'text': 'ping', 'sampling_params': {'max_new_tokens': 1, 'temperature': 0}})
        except NotOurListener as exc:
            return {'status': NO_ANSWER, 'elapsed': round(time.time() - begun, 3), 'ok': False, 'why': str(exc)}
        result = {'status': status, 'elapsed': round(time.time() - begun, 3), 'ok': False, 'why': None}
        if status != 200:
            result['why'] = answered('POST /generate', status, body)
            return result
        try:
            answer = parse_json(body)
            text = answer[0]['text'] if isinstance(answer, list) else answer['text']
        except (ValueError, KeyError, IndexError, TypeError):
            result['why'] = 'POST /generate answered 200 without a generated text'
            return result
        result['ok'] = isinstance(text, str)
        if not result['ok']:
            result['why'] = 'POST /generate answered 200 without a generated text'
        return result

    def compare_settings(self, expected: dict[str, Any], expected_environment: dict[str, str] | None = None) -> Any:
        """(the reported values of the expected keys, mismatches); ServerError when /server_info cannot be read."""
        reported = self.server_info()
        return ({key: reported.get(key) for key in expected},
                mismatches(reported, expected, expected_environment))

    def settings_or_why(self, expected: dict[str, Any], expected_environment: dict[str, str] | None = None) -> Any:
        """compare_settings, or ({}, [why]) when the settings cannot be read (a read-only report goes on)."""
        try:
            return self.compare_settings(expected, expected_environment)
        except ServerError as exc:
            return {}, ['its settings could not be read: %s' % exc]

    def server_info(self) -> dict[str, Any]:
        """What the server reports about its arguments: /server_info, or /get_server_info on older releases."""
        for path in ('/server_info', '/get_server_info'):
            status, body = self._request('GET', path, 10)
            if status == 200:
                try:
                    info = parse_json(body)
                except ValueError as exc:
                    raise ServerError('%s answered 200 with a body that is not JSON: %s' % (path, exc))
                if not isinstance(info, dict):
                    raise ServerError('%s answered 200 with JSON that is not an object' % path)
                return info
            if status != 404:
                raise ServerError(answered(path, status, body))
        raise ServerError('neither /server_info nor /get_server_info exists')


def mismatches(reported: dict[str, Any], expected: dict[str, Any],
               expected_environment: dict[str, str] | None = None) -> list[Any]:
    """What the server reports differently from what was asked, one readable line each."""
    found = []
    for key in sorted(expected):
        if reported.get(key) != expected[key]:
            found.append('%s is %s, want %s' % (key, json.dumps(reported.get(key)), json.dumps(expected[key])))
    for name in sorted(expected_environment or {}):
        wanted = expected_environment[name]
        got = (reported.get('environment') or {}).get(name)
        if got != wanted:
            found.append('environment %s is %s, want %s' % (name, json.dumps(got), json.dumps(wanted)))
    return found
