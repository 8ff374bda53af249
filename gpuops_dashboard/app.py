"""The reference ops page: a FastAPI app over gpuops_dashboard.redeploy, with SQLite history.

    GET  /                               the page
    GET  /api/hosts                      the inventory's gpu hosts and their current state, and the servers they
                                         make (a server group folded into one, rank 0's: servers.py)
    GET  /api/redeploys                  recent runs (newest first)
    POST /api/redeploys                  {limit, extra_vars, check}; Bearer token; 202 {"id": ...}
    GET  /api/redeploys/{id}             status, progress, and once finished the per-host summary
    POST /api/redeploys/{id}/cancel      Bearer token; what to expect on each host
    GET  /api/redeploys/{id}/events      server-sent events: one `progress` per record, then `end`
    GET  /api/redeploys/{id}/timeline.svg  the run as a per-host timeline
    GET  /api/redeploys/{id}/performance.svg  the performance gate's before/after per host (204: none measured)

Reads are open (the app listens on 127.0.0.1); whatever acts on hosts needs the token.
"""
import asyncio
import json
import os
import secrets
import threading
import time
from typing import Optional

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from gpuops_dashboard import redeploy as _redeploy
from gpuops_dashboard.inventory import HostDirectory
from gpuops_dashboard.phases import current_phase
from gpuops_dashboard.store import Store
from gpuops_dashboard import performance
from gpuops_dashboard.servers import fold_host_cards, fold_reports
from gpuops_dashboard.timeline import render

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'static')
FINAL = _redeploy.FINAL_STATES
SSE_POLL_S = 0.25


class RedeployRequest(BaseModel):
    limit: Optional[str] = Field(None, description='Ansible --limit pattern, e.g. "gpu2"')
    extra_vars: dict = Field(default_factory=dict, description='extra variables, e.g. {"sglang_force_restart": true}')
    check: bool = Field(False, description='run in check mode (changes nothing, reports why it would redeploy)')


class Dashboard(object):
    """The app's state: the store, the inventory, and the runs this process started."""

    def __init__(self, inventory, db_path, runs_dir, token):
        self.inventory = inventory
        self.store = Store(db_path)
        self.directory = HostDirectory(inventory)
        self.runs_dir = runs_dir
        self.token = token
        self.active = {}
        self._lock = threading.Lock()

    def start(self, request):
        with self._lock:
            running = [run for run in self.active.values() if run.status == 'running']
            if running:
                raise HTTPException(409, 'redeploy %s is still running: cancel it or wait' % running[0].id)
            run_id = _redeploy.new_run_id()
            self.store.add_run(run_id, self.inventory, request.limit, request.extra_vars, time.time())
            run = _redeploy.start(self.inventory, limit=request.limit, extra_vars=request.extra_vars,
                                  runs_dir=self.runs_dir, run_id=run_id, check=request.check,
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
        described = {'id': run_id, 'status': stored['status'], 'created_at': stored['created_at'],
                     'finished_at': stored['finished_at'], 'limit': stored['limit'],
                     'extra_vars': stored['extra_vars'], 'progress': current_phase(records),
                     'events': len(records), 'cancel': stored['cancel_notice'], 'error': stored['error']}
        if stored['status'] in FINAL:
            described['hosts'] = stored['hosts'] or {}
            described['servers'] = fold_reports(described['hosts'])
        return described


def create_app(inventory, db_path, runs_dir, token):
    dashboard = Dashboard(inventory, db_path, runs_dir, token)
    app = FastAPI(title='gpuops.sglang dashboard', version='1')
    app.state.dashboard = dashboard

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
    def hosts(refresh: bool = False):
        hosts = dashboard.directory.state(refresh)
        return {'inventory': inventory, 'hosts': hosts, 'servers': fold_host_cards(hosts)}

    @app.get('/api/redeploys')
    def redeploys(limit: int = 20):
        return {'redeploys': [dict((key, run[key]) for key in ('id', 'status', 'created_at', 'finished_at', 'limit'))
                              for run in dashboard.store.runs(limit)]}

    @app.post('/api/redeploys', status_code=202, dependencies=[Depends(require_token)])
    def start(request: RedeployRequest):
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
                     title='redeploy %s: %s' % (run_id, described['status']))
        return Response(svg, media_type='image/svg+xml')

    @app.get('/api/redeploys/{run_id}/performance.svg')
    def performance_chart(run_id: str):
        described = dashboard.describe(run_id)
        svg = performance.render(described.get('hosts') or {}, title='redeploy %s' % run_id)
        return Response(svg, media_type='image/svg+xml') if svg else Response(status_code=204)

    @app.get('/api/redeploys/{run_id}/events')
    async def events(run_id: str, request: Request, after: int = 0):
        if dashboard.store.run(run_id) is None:
            raise HTTPException(404, 'no redeploy %s' % run_id)
        last = int(request.headers.get('last-event-id') or after or 0)

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
