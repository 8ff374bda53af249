import os
import shutil
import socket
import threading
import time

import pytest
import uvicorn

from gpuops_dashboard.app import create_app

from helpers import lab_instance
from helpers.lab_strays import orphan_in_container

TOKEN = 'test-token'


class Served(object):
    def __init__(self, app, url, state_dir):
        self.app = app
        self.url = url
        self.state_dir = state_dir
        self.token = TOKEN


def _free_port():
    with socket.socket() as probe:
        probe.bind(('127.0.0.1', 0))
        return probe.getsockname()[1]


@pytest.fixture(scope='module')
def serve(tmp_path_factory):
    """Start the app with uvicorn in a thread on 127.0.0.1; stops it at the end of the module. `patch_dirs`: the
    folders a request's sglang_patch_file may come from (create_app's default: the collection's files/)."""
    servers = []

    def start(state_dir=None, inventory=None, allowed_hosts=None, patch_dirs=None):
        inventory = inventory or lab_instance.inventory()
        state_dir = state_dir or str(tmp_path_factory.mktemp('dashboard'))
        os.makedirs(os.path.join(state_dir, 'runs'), exist_ok=True)
        app = create_app(inventory, os.path.join(state_dir, 'dashboard.sqlite3'),
                         os.path.join(state_dir, 'runs'), TOKEN, allowed_hosts=allowed_hosts, patch_dirs=patch_dirs)
        port = _free_port()
        server = uvicorn.Server(uvicorn.Config(app, host='127.0.0.1', port=port, log_level='warning'))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, 'the dashboard did not start'
            time.sleep(0.05)
        servers.append((server, thread))
        return Served(app, 'http://127.0.0.1:%d' % port, state_dir)
    yield start
    for server, thread in servers:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope='module')
def dashboard_offline(serve):
    return serve()


@pytest.fixture(scope='module')
def lab_serving():
    """The shared lab, up (idempotent) and left serving: never torn down here.

    Run these tests under `flock /tmp/gpuops-lab.lock` when the lab is shared.
    """
    with lab_instance.one_start_at_a_time():
        lab_instance.lab('up')


@pytest.fixture(scope='module')
def dashboard(serve, lab_serving):
    return serve()


@pytest.fixture
def orphan_in_gpu1(lab_serving):
    """An orphaned scheduler in gpu1's container: the window's pct_exec_kill runs only when there is one."""
    with orphan_in_container() as title:
        yield title


@pytest.fixture
def page():
    """A page of Debian's chromium, headless, driven by Playwright (skipped where Playwright is not installed)."""
    sync_api = pytest.importorskip('playwright.sync_api')
    chromium = shutil.which('chromium') or '/usr/bin/chromium'
    if not os.path.exists(chromium):
        pytest.fail('chromium is missing: make setup installs it (apt package chromium)')
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True,
                                             args=['--no-sandbox', '--disable-gpu'])
        try:
            yield browser.new_page(viewport={'width': 1100, 'height': 900})
        finally:
            browser.close()
