"""The reference ops page: a FastAPI app over gpuops_dashboard.redeploy, with SQLite history.

    GET  /                               the page
    GET  /api/hosts                      the inventory's gpu hosts and their current state, and the servers they
                                         make (a server group folded into one, rank 0's: servers.py)
    GET  /api/redeploys                  recent runs (newest first)
    POST /api/redeploys                  {limit, extra_vars, check}; Bearer token; 202 {"id": ...}
    POST /api/undos                      {limit, revision, extra_vars, check}; Bearer token; 202 {"id": ...}: an undo
                                         (playbooks/undo.yml) of one server, followed as a redeploy is (kind undo)
    GET  /api/redeploys/{id}             status, progress, and once finished the per-host summary
    POST /api/redeploys/{id}/cancel      Bearer token; what to expect on each host
    GET  /api/redeploys/{id}/events      server-sent events: one `progress` per record, then `end`
    GET  /api/redeploys/{id}/timeline.svg  the run as a per-host timeline
    GET  /api/redeploys/{id}/performance.svg  the performance gate's before/after per host (204: none measured)

Reads are open to whoever reaches the app (it listens on 127.0.0.1) and never show a secret, and no read sends a
server's API key (gpuops_dashboard.inventory; GET /api/hosts answers within its bound, on a thread of its own,
whatever the servers do); whatever runs
anything (a redeploy, a cancel, re-reading the inventory) needs the token, and a redeploy's extra variables are
what a redeploy varies, never what runs as root or which controller file is shipped (gpuops_dashboard.extra_vars:
a patch file comes from the --patch-dir folders). An undo takes the same token, extra variables and limit checks,
and more: its limit names exactly one server (a host of the inventory, or every node of one server group), and its
revision is a whole number (null: the one before the latest) handed to undo.yml as sglang_undo_to, which no
request's extra variables may set. Requests whose Host header is not
an allowed name are refused (400): a page on another site cannot reach the app by DNS rebinding. Every answer
carries a Content-Security-Policy without inline scripts, so markup that slipped into a picture cannot run.
docs/security.md has the threat model.
"""
import asyncio
import json
import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from gpuops_dashboard import extra_vars as _extra_vars
from gpuops_dashboard import redeploy as _redeploy
from gpuops_dashboard.inventory import HostDirectory, last_speculation
from gpuops_dashboard.phases import current_phase, failure_reason
from gpuops_dashboard.store import Store
from gpuops_dashboard import performance, speculation
from gpuops_dashboard.servers import fold_host_cards, fold_machines, fold_reports
from gpuops_dashboard.timeline import render

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'static')
FINAL = _redeploy.FINAL_STATES
SSE_POLL_S = 0.25
HISTORY_MAX = 200
# The names a browser on this machine uses for the app; any port unless the entry names one.
LOOPBACK_HOSTS = ('127.0.0.1', 'localhost', '[::1]')
SECURITY_HEADERS = {
    # No inline script, no plugin, no framing: an attribute that slipped into an SVG cannot run.
    'Content-Security-Policy': "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
                               "form-action 'none'",
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'X-Frame-Options': 'DENY',
}
ALLOWED_EXTRA_VARS = _extra_vars.allowed_variables()


class _RunRequest(BaseModel):
    """What a redeploy and an undo both take, and the checks of their limit and extra variables."""
    model_config = ConfigDict(extra='forbid')

    extra_vars: dict = Field(default_factory=dict, description='documented variables of the role or the playbook, '
                                                               'e.g. {"sglang_force_restart": true}')
    check: bool = Field(False, description='run in check mode (changes nothing, says what it would do and why)')

    @field_validator('limit', check_fields=False)
    @classmethod
    def _limit(cls, value):
        return _redeploy.check_limit(value)

    @field_validator('extra_vars')
    @classmethod
    def _extra_vars(cls, value):
        return _extra_vars.validate(value, ALLOWED_EXTRA_VARS)


class RedeployRequest(_RunRequest):
    limit: Optional[str] = Field(None, description='Ansible --limit pattern, e.g. "gpu2"; null for every gpu host')


class UndoRequest(_RunRequest):
    """An undo (playbooks/undo.yml) of one server; sglang_undo_to is `revision`, never one of the extra variables."""
    limit: str = Field(description='the server: one inventory host, e.g. "gpu2", or every node of one server group '
                                   '("gpu3a,gpu3b"); never a pattern')
    revision: Optional[StrictInt] = Field(None, ge=1, lt=2 ** 31, description='the revision to put back; null for '
                                                                               'the one before the latest')


def _host_and_port(value):
    """('name', 'port' or None) of a Host header or an allowed-host entry; IPv6 stays in brackets."""
    value = (value or '').strip().lower()
    if value.startswith('['):
        name, _, rest = value.partition(']')
        return name + ']', (rest[1:] if rest.startswith(':') else None) or None
    if value.count(':') > 1:  # a bare IPv6 address in an entry
        return '[%s]' % value, None
    name, _, port = value.partition(':')
    return name, port or None


def host_allowed(header, allowed):
    """Whether a request's Host header names the app as `allowed` says (entries 'name' or 'name:port')."""
    name, port = _host_and_port(header)
    if not name:
        return False
    for entry in allowed:
        allowed_name, allowed_port = _host_and_port(entry)
        if name == allowed_name and (allowed_port is None or port == allowed_port):
            return True
    return False


def bounded_int(value, name, low, high, default):
    """A query parameter or header as an int in [low, high]; 400 naming it otherwise (never a 500)."""
    if value in (None, ''):
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        number = None
    if number is None or not low <= number <= high:
        raise HTTPException(400, '%s must be a whole number from %d to %d, not %r' % (name, low, high, value))
    return number


class Dashboard(object):
    """The app's state: the store, the inventory, and the runs this process started."""

    def __init__(self, inventory, db_path, runs_dir, token, patch_dirs=None):
        self.inventory = inventory
        self.patch_dirs = _extra_vars.patch_folders(_extra_vars.DEFAULT_PATCH_DIRS if patch_dirs is None
                                                    else patch_dirs)
        self.store = Store(db_path)
        self.directory = HostDirectory(inventory)
        self.runs_dir = runs_dir
        os.makedirs(runs_dir, mode=0o700, exist_ok=True)
        os.chmod(runs_dir, 0o700)
        # A run that outlived its dashboard (killed mid-run) left its extra variables, keys included: no run
        # of this process has started yet, so none is needed.
        for name in os.listdir(runs_dir):
            leftover = os.path.join(runs_dir, name, 'env', 'extravars')
            if os.path.isfile(leftover):
                os.remove(leftover)
        self.token = token
        # ansible-runner hands this process's environment to ansible-playbook and writes it into each run's
        # artifacts: no variable holding the token may be there (__main__ takes DASHBOARD_TOKEN out already).
        for name in [name for name, value in os.environ.items() if value == token]:
            del os.environ[name]
        self.active = {}
        self._lock = threading.Lock()
        # GET /api/hosts is open to whoever reaches the app: its reads run on a thread of their own, one at a
        # time, and the requests that come meanwhile share the read in flight, so however many there are they
        # hold none of the threads that /cancel and the other endpoints run on.
        self._host_reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix='host-read')
        self._host_read = None

    async def host_state(self, refresh=False):
        """HostDirectory.state(refresh): the read in flight, or a new one (always for a refresh)."""
        if refresh or self._host_read is None or self._host_read.done():
            self._host_read = asyncio.get_running_loop().run_in_executor(self._host_reader, self.directory.state,
                                                                         refresh)
        return await asyncio.shield(self._host_read)

    def start(self, request):
        """Start a RedeployRequest, or an UndoRequest (one server, its revision), as a run of its own kind."""
        undo = isinstance(request, UndoRequest)
        try:
            # The request model knows no app: the patch folders are this app's, checked here before anything.
            extra_vars = _extra_vars.validate(request.extra_vars, ALLOWED_EXTRA_VARS, patch_dirs=self.patch_dirs)
        except _extra_vars.InvalidExtraVars as error:
            raise HTTPException(422, [{'loc': ['body', 'extra_vars'], 'msg': str(error)}])
        limit = request.limit
        if undo:
            try:
                # The inventory's hosts, as this app resolved them: an undo names one server of them.
                limit = _redeploy.undo_limit(limit, self.directory.hosts())
            except ValueError as error:
                raise HTTPException(422, [{'loc': ['body', 'limit'], 'msg': str(error)}])
        kind = 'undo' if undo else 'redeploy'
        with self._lock:
            running = [run for run in self.active.values() if run.status == 'running']
            if running:
                raise HTTPException(409, '%s %s is still running: cancel it or wait' % (running[0].kind, running[0].id))
            run_id = _redeploy.new_run_id()
            stored = dict(extra_vars, sglang_undo_to=request.revision) if undo else extra_vars
            self.store.add_run(run_id, self.inventory, limit, stored, time.time(), kind=kind)
            run = _redeploy.start(self.inventory, limit=limit, extra_vars=extra_vars,
                                  runs_dir=self.runs_dir, run_id=run_id, check=request.check,
                                  patch_dirs=self.patch_dirs, undo=undo,
                                  revision=request.revision if undo else None,
                                  on_record=lambda run, record: self.store.add_record(run.id, record))
            self.active[run_id] = run
        threading.Thread(target=self._finish, args=(run,), daemon=True).start()
        return run_id

    def _finish(self, run):
        status = run.wait()
        hosts = run.hosts()
        if not hosts:
            # No artifacts (cancelled, or ansible-playbook died): what the hosts' report files say now.
            seen = sorted(set(record['host'] for record in run.records() if record.get('host')))
            hosts = self.directory.reports_since(seen, run.started_at)
            for report in hosts.values():
                report['source'] = 'report file (the run ended without artifacts)'
        self.store.finish_run(run.id, status, run.finished_at, hosts, run.error)
        # The run may have recorded a revision (or put one back): the cards read them again.
        self.directory.revisions.forget()

    def cancel(self, run_id):
        run = self.active.get(run_id)
        if run is None or run.status != 'running':
            raise HTTPException(409, 'redeploy %s is not running' % run_id)
        notice = run.cancel()
        self.store.set_cancel_notice(run_id, notice)
        return notice

    def describe(self, run_id):
        stored = self.store.run(run_id)
        if stored is None:
            raise HTTPException(404, 'no redeploy %s' % run_id)
        records = self.store.records(run_id)
        described = {'id': run_id, 'kind': stored['kind'], 'status': stored['status'],
                     'created_at': stored['created_at'],
                     'finished_at': stored['finished_at'], 'limit': stored['limit'],
                     'extra_vars': stored['extra_vars'], 'progress': current_phase(records),
                     'events': len(records), 'cancel': stored['cancel_notice'], 'error': stored['error']}
        if stored['status'] in FINAL:
            described['hosts'] = stored['hosts'] or {}
            described['servers'] = fold_reports(described['hosts'])
            # Why it failed, in one text: a host's report, else the failed task's message (undo.yml's refusals).
            described['failure'] = failure_reason(stored['status'], described['hosts'], records, stored['error'])
        return described


def create_app(inventory, db_path, runs_dir, token, allowed_hosts=None, patch_dirs=None):
    """The app. `allowed_hosts`: the Host header values it answers ('name' for any port, 'name:port');
    default the loopback names (LOOPBACK_HOSTS). `patch_dirs`: the folders a request's sglang_patch_file may
    name a file in (default the collection's files/); ValueError for one that is not a folder."""
    if not token:
        raise ValueError('the dashboard needs a token')
    allowed_hosts = tuple(allowed_hosts or LOOPBACK_HOSTS)
    dashboard = Dashboard(inventory, db_path, runs_dir, token, patch_dirs=patch_dirs)
    app = FastAPI(title='gpuops.sglang dashboard', version='1')
    app.state.dashboard = dashboard

    @app.middleware('http')
    async def guard(request: Request, call_next):
        if not host_allowed(request.headers.get('host'), allowed_hosts):
            response = JSONResponse({'detail': 'this dashboard does not answer to Host %r (allowed: %s; see '
                                               '--allowed-host)' % (request.headers.get('host'),
                                                                    ', '.join(allowed_hosts))}, status_code=400)
        else:
            response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    @app.exception_handler(RequestValidationError)
    async def refused(request: Request, error: RequestValidationError):
        # pydantic's own answer echoes the input back, keys included: only where and why.
        return JSONResponse({'detail': [{'loc': list(problem.get('loc', ())), 'msg': problem.get('msg')}
                                        for problem in error.errors()]}, status_code=422)

    def require_token(request: Request):
        header = request.headers.get('authorization', '')
        scheme, _, given = header.partition(' ')
        if scheme.lower() != 'bearer' or not secrets.compare_digest(given.strip().encode(), token.encode()):
            raise HTTPException(401, 'a Bearer token is required', headers={'WWW-Authenticate': 'Bearer'})

    @app.get('/', include_in_schema=False)
    def page():
        return FileResponse(os.path.join(STATIC, 'index.html'))

    @app.get('/static/{name}', include_in_schema=False)
    def static(name: str):
        path = os.path.join(STATIC, os.path.basename(name))
        if not os.path.isfile(path):
            raise HTTPException(404)
        return FileResponse(path)

    @app.get('/api/hosts')
    async def hosts(request: Request, refresh: bool = False):
        if refresh:
            # Re-reading the inventory runs ansible-runner: only for the token's holder.
            require_token(request)
        hosts = await dashboard.host_state(refresh)
        servers = fold_host_cards(hosts)
        return {'inventory': inventory, 'hosts': hosts, 'servers': servers, 'machines': fold_machines(servers)}

    @app.get('/api/hosts/{name}/speculation.svg')
    def speculation_chart(name: str):
        # Only a host of the inventory: its name picks a file in its own report folder.
        variables = dashboard.directory.hosts().get(name)
        if variables is None:
            raise HTTPException(404, 'no host %s in the inventory' % name)
        svg = speculation.render(name, last_speculation(variables.get('report_dir'), name))
        return Response(svg, media_type='image/svg+xml') if svg else Response(status_code=204)

    @app.get('/api/redeploys')
    def redeploys(limit: Optional[str] = None):
        count = bounded_int(limit, 'limit', 1, HISTORY_MAX, 20)
        return {'redeploys': [{key: run[key] for key in ('id', 'kind', 'status', 'created_at', 'finished_at', 'limit')}
                              for run in dashboard.store.runs(count)]}

    @app.post('/api/redeploys', status_code=202, dependencies=[Depends(require_token)])
    def start(request: RedeployRequest):
        return {'id': dashboard.start(request)}

    @app.post('/api/undos', status_code=202, dependencies=[Depends(require_token)])
    def undo(request: UndoRequest):
        # Followed as a redeploy is: /api/redeploys/{id}, its events, its cancel.
        return {'id': dashboard.start(request)}

    @app.get('/api/redeploys/{run_id}')
    def describe(run_id: str):
        return dashboard.describe(run_id)

    @app.post('/api/redeploys/{run_id}/cancel', dependencies=[Depends(require_token)])
    def cancel(run_id: str):
        return dashboard.cancel(run_id)

    @app.get('/api/redeploys/{run_id}/timeline.svg')
    def timeline(run_id: str):
        described = dashboard.describe(run_id)
        svg = render(dashboard.store.records(run_id), described.get('hosts') or {},
                     title='%s %s: %s' % (described['kind'], run_id, described['status']))
        return Response(svg, media_type='image/svg+xml')

    @app.get('/api/redeploys/{run_id}/performance.svg')
    def performance_chart(run_id: str):
        described = dashboard.describe(run_id)
        svg = performance.render(described.get('hosts') or {}, title='%s %s' % (described['kind'], run_id))
        return Response(svg, media_type='image/svg+xml') if svg else Response(status_code=204)

    @app.get('/api/redeploys/{run_id}/events')
    async def events(run_id: str, request: Request, after: Optional[str] = None):
        # SQLite integers are 64-bit: a larger one would fail the query, not the request.
        last = bounded_int(request.headers.get('last-event-id'), 'Last-Event-ID', 0, 2 ** 62, None)
        if last is None:
            last = bounded_int(after, 'after', 0, 2 ** 62, 0)
        if dashboard.store.run(run_id) is None:
            raise HTTPException(404, 'no redeploy %s' % run_id)

        async def stream():
            nonlocal last
            yield 'retry: 1000\n\n'
            while True:
                stored = dashboard.store.run(run_id)
                for record in dashboard.store.records(run_id, last):
                    last = record['seq']
                    yield 'id: %d\nevent: progress\ndata: %s\n\n' % (last, json.dumps(record))
                if stored['status'] in FINAL:
                    yield 'event: end\ndata: %s\n\n' % json.dumps({'status': stored['status']})
                    return
                if await request.is_disconnected():
                    return
                await asyncio.sleep(SSE_POLL_S)
        return StreamingResponse(stream(), media_type='text/event-stream',
                                 headers={'Cache-Control': 'no-cache', 'X-Accel-Buffering': 'no'})

    return app
