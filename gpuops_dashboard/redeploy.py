"""Start, follow and cancel `playbooks/redeploy.yml` through ansible-runner, as an ops dashboard does.

    from gpuops_dashboard import redeploy
    run = redeploy.start('inventory/lab', limit='gpu2', extra_vars={'sglang_force_restart': True})
    run.id                      # at once; the playbook runs in a thread
    run.progress()              # {'gpu2': {'phase': 'stop', 'label': 'drain + stop', 'state': 'running', ...}}
    run.wait(600)               # 'successful' | 'failed' | 'canceled'
    run.hosts()                 # per-host summary from the run's artifacts (set_stats key sglang_redeploy)
    notice = run.cancel()       # within about 0.2 s; notice['hosts'] says what to expect on each host

What this module takes care of, which a bare `ansible_runner.run` call leaves to its caller: the private
data dir is created (ansible-runner wants an existing folder), ansible-playbook is found beside the running
interpreter (the venv need not be on PATH), the collection and ansible.cfg of this checkout are used
(ANSIBLE_CONFIG, ANSIBLE_COLLECTIONS_PATH), the inventory is always passed explicitly, and cancel is
noticed every 0.2 s instead of ansible-runner's default 5 s (`pexpect_timeout`).

And what it refuses to leave open (docs/security.md): host keys are checked (ansible-runner turns that off
unless told; an inventory that turns it off itself, as inventory/lab does, still can), the extra variables
are the role's documented ones, type-checked, and reach Ansible as a 0600 file of `!unsafe` strings that is
never templated and is removed when the run ends (gpuops_dashboard.extra_vars), the limit is a real pattern,
and the run's private data dir is 0700 with request.json (secrets redacted) 0600.

A cancel is a SIGKILL of ansible-playbook's process group and of its workers and ssh clients, which leave that group
(run_processes.py): nothing on the controller cleans up. What happens on each host depends on how far it got, and `cancel()` says so (see `expectations_after_cancel`):
- before its guard was armed: nothing was stopped, the old server serves;
- inside the outage window (guard armed, new server not confirmed): the guard on the host restores the
  pre-run files and starts the previous server by itself, `sglang_rollback_idle` seconds after the last
  step renewed its lease (or `sglang_rollback_deadline` seconds after the window opened, if sooner); the host's report file says "the run stopped inside the outage window" until then; a
  new run started earlier carries out that guard first (takeover), it never starts a second server;
- after the new server was confirmed: the new server serves; only the report may be missing.
"""
import json
import os
import secrets
import sys
import threading
import time

import ansible_runner

from gpuops_dashboard import extra_vars as _extra_vars
from gpuops_dashboard import phases as _phases
from gpuops_dashboard import run_processes as _run_processes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLAYBOOK = os.path.join(REPO, 'playbooks', 'redeploy.yml')
# An undo (docs/undo.md) runs the same way: its playbook, one server's --limit, and sglang_undo_to.
UNDO_PLAYBOOK = os.path.join(REPO, 'playbooks', 'undo.yml')
PLAYBOOKS = {'redeploy': PLAYBOOK, 'undo': UNDO_PLAYBOOK}
DEFAULT_RUNS_DIR = os.path.join(REPO, '.cache', 'dashboard', 'runs')
# ansible-runner checks its cancel callback once per pexpect_timeout (5 s by default; 0.2 s measured 0.27 s).
CANCEL_POLL_S = 0.2
FINAL_STATES = ('successful', 'failed', 'canceled')


def ansible_environment():
    """What ansible-playbook needs to resolve gpuops.sglang.* from this checkout, whatever the caller's shell."""
    venv_bin = os.path.dirname(sys.executable)
    return {
        'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
        'ANSIBLE_COLLECTIONS_PATH': os.path.join(REPO, '.cache', 'collections'),
        'PATH': venv_bin + os.pathsep + os.environ.get('PATH', '/usr/bin:/bin'),
        # Dashboards read events; the text output is kept in the artifacts only.
        'ANSIBLE_FORCE_COLOR': '0',
        # ansible-runner sets ANSIBLE_HOST_KEY_CHECKING=False unless the environment names it, and an
        # environment variable beats ansible.cfg: without this every run would trust any host key. An
        # inventory can still turn it off for its own hosts (ansible_host_key_checking, as inventory/lab does).
        'ANSIBLE_HOST_KEY_CHECKING': 'True',
    }


def _inventory_path(inventory):
    path = inventory if os.path.isabs(inventory) else os.path.join(REPO, inventory)
    if not os.path.exists(path):
        raise ValueError('inventory %s does not exist' % path)
    return path


def check_limit(limit):
    """The --limit pattern, or None for every gpu host; refuses what would widen or misuse it."""
    if limit is None:
        return None
    if not isinstance(limit, str) or not limit.strip():
        # ansible-runner drops an empty limit: the run would take every host.
        raise ValueError('limit must name hosts (leave it out, or null, for every gpu host), not %r' % (limit,))
    if '@' in limit or any(ord(char) < 32 for char in limit):
        # `--limit @FILE` reads a file on the controller, as any item of a list does (`gpu2,@/etc/hostname`: its
        # first line comes back in ansible-playbook's warning); no inventory host name needs an `@`.
        raise ValueError('limit must be a host pattern: no "@" anywhere in it (an @file item reads a file on the '
                         'controller), no control characters; got %r' % (limit,))
    return limit.strip()


def check_revision(revision):
    """An undo's revision: None (the one before the latest) or a whole number from 1 (never a bool, a string or a
    template: it reaches the play as data)."""
    if revision is None:
        return None
    if type(revision) is not int or not 1 <= revision < 2 ** 31:
        raise ValueError('revision must be a whole number from 1 (a revision the server keeps), or null for the one '
                         'before the latest; not %r' % (revision,))
    return revision


def undo_limit(limit, hosts):
    """The --limit of an undo: exactly one server, named as the inventory names it. `hosts` is {name: variables}
    of the inventory's gpu hosts (inventory.HostDirectory.hosts(): `server_group` of each). One host name, or every
    node of one server group (comma-separated, as undo.yml requires a group undone as a whole); no pattern, group
    or exclusion: an undo puts files back as root, and a pattern could widen to servers nobody named. ValueError
    naming the rule otherwise."""
    limit = check_limit(limit)
    if limit is None:
        raise ValueError('an undo is for one server: limit must name it (a host of the inventory, or every node of '
                         'one server group)')
    names = [name.strip() for name in limit.split(',')]
    unknown = [name for name in names if name not in hosts]
    if unknown:
        raise ValueError('an undo is for one server: limit must name hosts of the inventory\'s gpu group by their '
                         'names (no pattern, group or exclusion), and %s is not one; the hosts are %s'
                         % (', '.join(repr(name) for name in unknown), ', '.join(sorted(hosts))))
    groups = sorted(set(hosts[name].get('server_group') or '' for name in names))
    if len(names) != len(set(names)) or len(groups) > 1 or (groups == [''] and len(names) > 1):
        raise ValueError('an undo is for one server: limit %r names several (one host, or the nodes of one server '
                         'group); undo them one at a time' % limit)
    if groups != ['']:
        nodes = sorted(name for name, variables in hosts.items() if variables.get('server_group') == groups[0])
        if sorted(names) != nodes:
            raise ValueError('server group %s is undone as a whole: limit must name all its nodes (%s), not %r'
                             % (groups[0], ','.join(nodes), limit))
    return ','.join(names)


def new_run_id():
    return time.strftime('%Y%m%dT%H%M%S', time.gmtime()) + '-' + secrets.token_hex(3)


def expectations_after_cancel(records, rollback_deadline_s=None, rollback_idle_s=None):
    """Per host: what an operator should expect after a cancel, from how far the host got.

    Returns {host: {'stage': 'before_window'|'in_window'|'confirmed', 'expect': text}}.
    """
    seen = _phases.host_phases(records)
    deadline = ('%s s' % rollback_deadline_s) if rollback_deadline_s is not None else 'sglang_rollback_deadline'
    idle = ('%s s' % rollback_idle_s) if rollback_idle_s is not None else 'sglang_rollback_idle'
    notice = {}
    for host, host_phases in seen.items():
        names = [phase['phase'] for phase in host_phases]
        confirmed = any(phase['phase'] == 'confirm' and phase['state'] == 'ok' for phase in host_phases)
        if confirmed:
            notice[host] = {'stage': 'confirmed',
                            'expect': 'the new server was confirmed before the cancel and serves; its report may '
                                      'be missing'}
        elif 'arm' in names:
            notice[host] = {'stage': 'in_window',
                            'expect': 'the run was cut inside the outage window: the guard on the host restores the '
                                      'pre-run files and starts the previous server by itself, %s after the last step '
                                      'renewed its lease, or at the latest %s after the window opened (its report: /var/lib/gpuops-sglang/<service>/fired.json); the report '
                                      'file says "the run stopped inside the outage window" until a new run writes '
                                      'one; a new run started earlier carries out the guard first' % (idle, deadline)}
        else:
            notice[host] = {'stage': 'before_window',
                            'expect': 'nothing was stopped: the old server serves as before'}
    return notice


class Redeploy(object):
    """One run of playbooks/redeploy.yml (or, `kind` undo, playbooks/undo.yml) in a thread. Thread-safe to read from
    other threads."""

    def __init__(self, run_id, private_data_dir, inventory, limit, extra_vars, on_record=None, check=False,
                 kind='redeploy'):
        self.id = run_id
        self.kind = kind
        self.playbook = PLAYBOOKS[kind]
        self.private_data_dir = private_data_dir
        self.inventory = inventory
        self.limit = limit
        self.extra_vars = dict(extra_vars or {})
        self.check = check
        self.started_at = time.time()
        self.finished_at = None
        self.rc = None
        self.error = None
        self._status = 'running'
        self._records = []
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        # (PID, kind) of what the cancel killed (run_processes.end_run), None before a cancel.
        self.ended_processes: list[tuple[int, str]] | None = None
        self._done = threading.Event()
        self._on_record = on_record
        self._thread = threading.Thread(target=self._run, name='redeploy-%s' % run_id, daemon=True)

    # -- reading ---------------------------------------------------------------------------------
    @property
    def status(self):
        """'running', then 'successful', 'failed' or 'canceled' (ansible-runner's timeout/error count as failed)."""
        return self._status

    def records(self, after=0):
        """Progress records (see phases.progress_record) with seq > after, in order."""
        with self._lock:
            return [record for record in self._records if (record.get('seq') or 0) > after]

    def progress(self):
        return _phases.current_phase(self.records())

    def artifacts(self):
        for record in reversed(self.records()):
            if record.get('kind') == 'stats':
                return record.get('artifacts') or {}
        return {}

    def hosts(self):
        """The per-host summary the role published (set_stats key sglang_redeploy); {} until the run ends
        normally. After a cancel there is none: read the hosts' report files (sglang_report_dir)."""
        return self.artifacts().get('sglang_redeploy', {})

    def wait(self, timeout=None):
        self._done.wait(timeout)
        return self._status

    # -- acting ----------------------------------------------------------------------------------
    def cancel(self):
        """Ask ansible-runner to kill the run (noticed within CANCEL_POLL_S). Returns what to expect per host."""
        self._cancel.set()
        return {'id': self.id, 'requested': True,
                'hosts': expectations_after_cancel(self.records(), self.extra_vars.get('sglang_rollback_deadline'),
                                                   self.extra_vars.get('sglang_rollback_idle'))}

    def _cancel_requested(self) -> bool:
        """ansible-runner's cancel callback: once cancel() was called, every process of the run is killed here, its
        workers and ssh clients too (run_processes.py says why), before ansible-runner kills ansible-playbook's
        process group."""
        if not self._cancel.is_set():
            return False
        if self.ended_processes is None:
            self.ended_processes = _run_processes.end_run(self.private_data_dir)
        return True

    def _event(self, event):
        record = _phases.progress_record(event)
        if record is not None:
            with self._lock:
                self._records.append(record)
            if self._on_record:
                self._on_record(self, record)
        return True

    def _run(self):
        try:
            runner = ansible_runner.run(
                private_data_dir=self.private_data_dir,
                playbook=self.playbook,
                inventory=self.inventory,
                limit=self.limit,
                # No extravars: start() wrote them to env/extravars as !unsafe strings, which ansible-runner
                # passes as `-e @env/extravars` (extravars= would put them on the command line, templated).
                cmdline='--check' if self.check else None,
                envvars=ansible_environment(),
                quiet=True,
                settings={'pexpect_timeout': CANCEL_POLL_S, 'suppress_ansible_output': True},
                event_handler=self._event,
                cancel_callback=self._cancel_requested,
            )
            self.rc = runner.rc
            status = runner.status
        except Exception as error:  # the run must always end in a final state a dashboard can show
            status = 'failed'
            self.rc = -1
            self.error = '%s: %s' % (type(error).__name__, error)
        finally:
            # ansible-playbook read them at its start; keys in them must not stay on disk.
            try:
                os.remove(os.path.join(self.private_data_dir, 'env', 'extravars'))
            except OSError:
                pass
        self.finished_at = time.time()
        self._status = status if status in FINAL_STATES else 'failed'
        self._done.set()


def start(inventory, limit=None, extra_vars=None, runs_dir=None, run_id=None, on_record=None, check=False,
          patch_dirs=None, undo=False, revision=None):
    """Start a redeploy (with ``undo``, an undo: playbooks/undo.yml) and return its Redeploy at once.

    ``inventory`` is required (never ansible.cfg's default): a path, relative to this checkout or absolute.
    ``runs_dir`` holds one private data dir per run (created; default .cache/dashboard/runs).
    ``on_record(run, record)`` is called from the run's thread for every progress record.
    ``extra_vars`` must be documented variables of the role or the playbook (extra_vars.InvalidExtraVars
    otherwise, a ValueError), sglang_patch_file "" or a file inside ``patch_dirs`` (default the collection's
    files/); ``limit`` None or a host pattern (ValueError for an empty one). An undo needs a ``limit`` (the
    caller holds it to one server: undo_limit) and takes ``revision`` (check_revision; None: the one before the
    latest) as sglang_undo_to, which no request's extra variables may set.
    """
    limit = check_limit(limit)
    folders = _extra_vars.patch_folders(_extra_vars.DEFAULT_PATCH_DIRS if patch_dirs is None else patch_dirs)
    extra_vars = _extra_vars.validate(extra_vars or {}, patch_dirs=folders)
    if undo:
        if limit is None:
            raise ValueError('an undo is for one server: limit must name it')
        revision = check_revision(revision)
        if revision is not None:
            extra_vars['sglang_undo_to'] = revision
    inventory_path = _inventory_path(inventory)
    run_id = run_id or new_run_id()
    runs = runs_dir or DEFAULT_RUNS_DIR
    os.makedirs(runs, mode=0o700, exist_ok=True)
    private = os.path.join(runs, run_id)
    os.mkdir(private, 0o700)
    os.chmod(private, 0o700)
    descriptor = os.open(os.path.join(private, 'request.json'), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, 'w') as handle:
        json.dump({'inventory': inventory, 'limit': limit, 'extra_vars': _extra_vars.redact(extra_vars),
                   'check': check, 'kind': 'undo' if undo else 'redeploy'}, handle)
    if extra_vars:
        _extra_vars.write_unsafe(os.path.join(private, 'env', 'extravars'), extra_vars)
    run = Redeploy(run_id, private, inventory_path, limit, extra_vars, on_record=on_record, check=check,
                   kind='undo' if undo else 'redeploy')
    run._thread.start()
    return run
