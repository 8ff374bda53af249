"""Runs and their events in SQLite, so a restart of the dashboard keeps the history.

The database and its WAL are 0600 (SQLite gives the -wal and -shm files the database file's mode), and the
extra variables are stored with their secrets redacted: the history never holds a key.
"""
import json
import os
import sqlite3
import threading
import time

from gpuops_dashboard.extra_vars import redact

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    finished_at REAL,
    status TEXT NOT NULL,
    inventory TEXT NOT NULL,
    run_limit TEXT,
    extra_vars TEXT NOT NULL,
    hosts TEXT,
    cancel_notice TEXT,
    error TEXT,
    kind TEXT NOT NULL DEFAULT 'redeploy'
);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL REFERENCES runs(id),
    seq INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""


class Store(object):
    def __init__(self, path):
        self.path = path
        self._lock = threading.Lock()
        # Created 0600 before SQLite opens it (an older dashboard's 0644 files are closed too).
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        for name in (path, path + '-wal', path + '-shm'):
            if os.path.exists(name):
                os.chmod(name, 0o600)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute('PRAGMA journal_mode=WAL')
        self._db.executescript(_SCHEMA)
        # An older dashboard's history has no kind: every run it stored was a redeploy.
        if 'kind' not in [row[1] for row in self._db.execute('PRAGMA table_info(runs)')]:
            self._db.execute("ALTER TABLE runs ADD COLUMN kind TEXT NOT NULL DEFAULT 'redeploy'")
        # A run the previous process left 'running' can no longer be followed: say so.
        self._db.execute("UPDATE runs SET status = 'failed', error = 'the dashboard stopped while the run was "
                         "going; see the hosts and their reports', finished_at = ? WHERE status = 'running'",
                         (time.time(),))

    def close(self):
        with self._lock:
            self._db.close()

    def add_run(self, run_id, inventory, limit, extra_vars, created_at, kind='redeploy'):
        """A run that starts now: `kind` 'redeploy' or 'undo'."""
        with self._lock:
            self._db.execute('INSERT INTO runs (id, created_at, status, inventory, run_limit, extra_vars, kind) '
                             "VALUES (?, ?, 'running', ?, ?, ?, ?)",
                             (run_id, created_at, inventory, limit, json.dumps(redact(extra_vars or {})), kind))

    def add_record(self, run_id, record):
        with self._lock:
            self._db.execute('INSERT OR REPLACE INTO events (run_id, seq, record) VALUES (?, ?, ?)',
                             (run_id, record['seq'], json.dumps(record)))

    def finish_run(self, run_id, status, finished_at, hosts, error=None):
        with self._lock:
            self._db.execute('UPDATE runs SET status = ?, finished_at = ?, hosts = ?, error = ? WHERE id = ?',
                             (status, finished_at, json.dumps(hosts), error, run_id))

    def set_cancel_notice(self, run_id, notice):
        with self._lock:
            self._db.execute('UPDATE runs SET cancel_notice = ? WHERE id = ?', (json.dumps(notice), run_id))

    def _row(self, row):
        keys = ('id', 'created_at', 'finished_at', 'status', 'inventory', 'limit', 'extra_vars', 'hosts',
                'cancel_notice', 'error', 'kind')
        run = dict(zip(keys, row))
        for key in ('extra_vars', 'hosts', 'cancel_notice'):
            run[key] = json.loads(run[key]) if run[key] else None
        # A run an older dashboard stored may hold keys in clear.
        run['extra_vars'] = redact(run['extra_vars'])
        return run

    def run(self, run_id):
        with self._lock:
            row = self._db.execute('SELECT id, created_at, finished_at, status, inventory, run_limit, extra_vars, '
                                   'hosts, cancel_notice, error, kind FROM runs WHERE id = ?', (run_id,)).fetchone()
        return self._row(row) if row else None

    def runs(self, limit=20):
        with self._lock:
            rows = self._db.execute('SELECT id, created_at, finished_at, status, inventory, run_limit, extra_vars, '
                                    'hosts, cancel_notice, error, kind FROM runs ORDER BY created_at DESC LIMIT ?',
                                    (limit,)).fetchall()
        return [self._row(row) for row in rows]

    def records(self, run_id, after=0):
        with self._lock:
            rows = self._db.execute('SELECT record FROM events WHERE run_id = ? AND seq > ? ORDER BY seq',
                                    (run_id, after)).fetchall()
        return [json.loads(row[0]) for row in rows]
