"""Each server's revisions (docs/undo.md) for its host card: number, time, run id, what changed, size; newest first.

The revisions live on the gpu host, root's and 0700 (the guard's trust rule), so the only reader is the collection's
own: `gpuops.sglang.sglang_revisions state=listed` in check mode (what playbooks/revisions.yml runs), as one ad-hoc
run through ansible-runner over the inventory's gpu hosts, with the dashboard's Ansible environment (host keys
checked). Its folder is the role's (`sglang_guard_dir`/`sglang_service_name`, the role's defaults where the
inventory sets none); nothing of a request goes into it.

A read connects to every host, so it runs on a thread of its own and is bounded twice: each host's ssh connection
by CONNECT_TIMEOUT_S and the whole read by READ_BOUND_S (then it is stopped, and each host that had not answered
says so). The hosts view waits for it only within its own bound (inventory.READ_BOUND_S) and only for a host of
which no listing is known since the last run; otherwise it shows the last listing, with when it was read, and a
new read starts once that is older than FRESH_S. A stalling host therefore never stalls the page.

Of what the module returns the card keeps only the listing's fields (KEPT); never a file's contents (the module
returns none: the listing holds paths and what happened to them).
"""
import datetime
import tempfile
import threading
import time

import ansible_runner

from gpuops_dashboard.redeploy import _inventory_path, ansible_environment

MODULE = 'gpuops.sglang.sglang_revisions'
# Each ssh connection (Ansible's timeout), and the read of every host together.
CONNECT_TIMEOUT_S = 10
READ_BOUND_S = 30.0
# A listing older than this is read again at the next view (a run that ends makes every listing old).
FRESH_S = 60.0
# What a card shows of each revision.
KEPT = ('number', 'origin', 'undo_to', 'time_utc', 'run_id', 'size_bytes')
# ansible-runner's check of its cancel callback (5 s by default).
CANCEL_POLL_S = 0.2


def _utc(epoch):
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')


def _text(value):
    return value if isinstance(value, str) else None


def _count(value):
    return value if type(value) is int and value >= 0 else None


def shown(result):
    """What a card shows of the module's result: {revisions (newest first, each KEPT and `changed` [{path,
    change}]), count, latest, total_bytes, problems}. Anything of another type than documented is left out."""
    revisions = []
    for entry in result.get('revisions') if isinstance(result.get('revisions'), list) else []:
        if not isinstance(entry, dict) or _count(entry.get('number')) is None:
            continue
        revision = {key: (_count if key in ('number', 'undo_to', 'size_bytes') else _text)(entry.get(key)) for key in KEPT}
        revision['changed'] = [{'path': _text(change.get('path')), 'change': _text(change.get('change'))}
                               for change in entry.get('changed') or [] if isinstance(change, dict)]
        revisions.append(revision)
    revisions.sort(key=lambda revision: revision['number'], reverse=True)
    problems = result.get('problems') if isinstance(result.get('problems'), list) else []
    return {'revisions': revisions, 'count': len(revisions), 'latest': revisions[0]['number'] if revisions else None,
            'total_bytes': _count(result.get('total_bytes')),
            'problems': [problem[:500] for problem in problems if isinstance(problem, str)]}


def read(inventory, names, arguments, stop, on_answer):
    """One ad-hoc read of `names`' revisions: `on_answer(host, listing or None, why not)` as each host answers;
    `stop()` true stops the read (the hosts that had not answered are then not answered)."""
    def collect(event):
        data = event.get('event_data') or {}
        kind = event.get('event')
        if kind in ('runner_on_ok', 'runner_on_failed', 'runner_on_unreachable') and data.get('host'):
            res = data.get('res') if isinstance(data.get('res'), dict) else {}
            if kind == 'runner_on_ok':
                on_answer(data['host'], shown(res), None)
            else:
                on_answer(data['host'], None, str(res.get('msg') or kind)[:500])
        return True
    # A private dir of its own (0700, removed after): its artifacts are the hosts' answers.
    with tempfile.TemporaryDirectory(prefix='gpuops-revisions-') as private:
        ansible_runner.run(
            private_data_dir=private, host_pattern=','.join(names), module=MODULE, module_args=arguments,
            inventory=_inventory_path(inventory), cmdline='--check',
            envvars=dict(ansible_environment(), ANSIBLE_TIMEOUT=str(CONNECT_TIMEOUT_S)), quiet=True,
            settings={'suppress_ansible_output': True, 'pexpect_timeout': CANCEL_POLL_S},
            event_handler=collect, cancel_callback=stop)


class RevisionReader:
    """The hosts' last listings and the one read in flight. Thread-safe.

    `read_hosts(names, stop, on_answer)` does one read: `read` over the inventory (inventory.HostDirectory), or a
    test's own."""

    def __init__(self, read_hosts):
        self._read_hosts = read_hosts
        self._known = {}          # host -> {listing, error, read_at (epoch)}
        self._changed = threading.Condition()
        self._in_flight = False
        self._forgotten_at = 0.0  # epoch: listings read before it are old (a run ended since)

    def forget(self):
        """Every listing is old now (a run ended): the next view reads again and waits for it within its bound."""
        with self._changed:
            self._forgotten_at = time.time()

    def _since_forgotten(self, name):
        return self._known.get(name, {}).get('read_at', 0) > self._forgotten_at

    def _read(self, names, bound):
        def answer(host, listing, why):
            with self._changed:
                self._known[host] = {'listing': listing, 'error': why, 'read_at': time.time()}
                self._changed.notify_all()
        error, begun = None, time.time()
        try:
            self._read_hosts(names, lambda: time.monotonic() > bound, answer)
        except Exception as failure:  # a read that breaks marks the cards, never the page
            error = 'the read failed: %s: %s' % (type(failure).__name__, failure)
        with self._changed:
            for host in names:
                if self._known.get(host, {}).get('read_at', 0) < begun:
                    self._known[host] = {'listing': None, 'read_at': time.time(), 'error': error or (
                        'no answer within %s s (the read was stopped; an ssh connection waits at most %s s)'
                        % (READ_BOUND_S, CONNECT_TIMEOUT_S))}
            self._in_flight = False
            self._changed.notify_all()

    def listings(self, names, deadline):
        """{host: {revisions, count, latest, total_bytes, problems, read_at, reading, error}} for `names` (the card's
        `revisions`). Starts a read where a listing is old or missing; waits for it until `deadline`
        (time.monotonic()) only for hosts with no listing read since the last run ended."""
        now = time.time()
        with self._changed:
            old = [name for name in names if not self._since_forgotten(name)
                   or now - self._known[name]['read_at'] >= FRESH_S]
            if old and not self._in_flight:
                self._in_flight = True
                threading.Thread(target=self._read, args=(list(names), time.monotonic() + READ_BOUND_S),
                                 name='revisions-read', daemon=True).start()
            while self._in_flight and not all(self._since_forgotten(name) for name in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            return {name: self._card(name) for name in names}

    def _card(self, name):
        entry = self._known.get(name)
        empty = {'revisions': None, 'count': None, 'latest': None, 'total_bytes': None, 'problems': []}
        if entry is None:
            return dict(empty, read_at=None, reading=self._in_flight,
                        error='being read' if self._in_flight else 'not read yet')
        card = dict(entry['listing'] or empty)
        card.update(read_at=_utc(entry['read_at']), reading=self._in_flight, error=entry['error'])
        return card
