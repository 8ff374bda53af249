"""The server's API key: written by the role's template, read back on the host, sent as a bearer token.

The key file is read three ways that must agree: by SGLang (PyYAML, through its --config merger), by
the lab's stand-in where the lab image has no PyYAML, and by _server.read_config_keys, which the
modules and the host-side guard use. The requests go to a real HTTP listener on loopback that records
what it was sent.
"""
import importlib
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jinja2
import pytest
import yaml

from ansible_collections.gpuops.sglang.plugins.filter.sglang_flags import sglang_flags
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._router import Router
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import (
    Server,
    ServerError,
    launch_api_key,
    read_config_keys,
)
from helpers.ansible_run import REPO
from helpers.port_owner import this_process_systemctl


def load_standin():
    """The stand-in's launch_server as its interpreter imports it (`python -m sglang_standin.launch_server`)."""
    standin = os.path.join(REPO, 'lab', 'standin')
    if standin not in sys.path:
        sys.path.insert(0, standin)
    return importlib.import_module('sglang_standin.launch_server')


STANDIN = load_standin()
parse_flat_yaml = STANDIN.parse_flat_yaml
TEMPLATE = os.path.join(REPO, 'roles', 'sglang', 'templates', 'server_keys.yaml.j2')
# Characters a YAML or JSON writer could get wrong: quotes, a backslash, a colon, a hash.
AWKWARD_KEY = 'k3y:"quoted"\\back#slash\'s'


def render_keys(api_key, admin_api_key=''):
    with open(TEMPLATE) as handle:
        template = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True).from_string(handle.read())
    # Ansible's to_json is json.dumps; the role renders with trim_blocks, as Ansible's template lookup does.
    template.environment.filters['to_json'] = json.dumps
    return template.render(sglang_api_key=api_key, sglang_admin_api_key=admin_api_key)


def write_launch(tmp_path, args):
    launch = tmp_path / 'launch.json'
    launch.write_text(json.dumps({'python': '/usr/bin/python3', 'module': 'sglang.launch_server', 'args': args,
                                  'environment': {}}))
    return str(launch)


@pytest.mark.parametrize('api_key, admin_api_key', [(AWKWARD_KEY, 'admin-Key_01'), ('only-the-api-key', ''),
                                                    ('', 'only-the-admin-key')])
def test_key_file_reads_the_same_in_sglang_the_standin_and_the_modules(api_key, admin_api_key):
    text = render_keys(api_key, admin_api_key)
    wanted = dict(item for item in (('api-key', api_key), ('admin-api-key', admin_api_key)) if item[1])
    assert yaml.safe_load(text) == wanted
    assert parse_flat_yaml(text) == wanted


def test_standin_merges_a_config_file_as_sglang_does_the_command_line_winning(tmp_path):
    parser = STANDIN.build_parser()
    config = tmp_path / 'server.yaml'
    config.write_text(render_keys('from-the-file') + 'max-running-requests: 32\ndisable-overlap-schedule: true\n')
    args = parser.parse_args(STANDIN.merge_config(
        parser, ['--model-path', '/m', '--config', str(config), '--max-running-requests', '16']))
    assert (args.api_key, args.max_running_requests, args.disable_overlap_schedule) == ('from-the-file', 16, True)
    not_yaml = tmp_path / 'server.json'
    not_yaml.write_text('{}')
    with pytest.raises(SystemExit, match='must be YAML'):
        STANDIN.merge_config(parser, ['--config', str(not_yaml)])


def test_key_file_holds_no_key_line_for_an_empty_key(tmp_path):
    path = tmp_path / 'server.yaml'
    path.write_text(render_keys('', 'admin-only'))
    assert read_config_keys(str(path)) == {'admin-api-key': 'admin-only'}


def test_launch_key_comes_from_the_config_file_named_in_the_arguments(tmp_path):
    keys = tmp_path / 'server.yaml'
    keys.write_text(render_keys(AWKWARD_KEY))
    assert launch_api_key(write_launch(tmp_path, ['--model-path', '/m', '--config', str(keys)])) == AWKWARD_KEY
    assert launch_api_key(write_launch(tmp_path, ['--config=%s' % keys])) == AWKWARD_KEY


def test_an_api_key_argument_wins_over_the_config_file_as_in_sglang(tmp_path):
    keys = tmp_path / 'server.yaml'
    keys.write_text(render_keys('from-the-file'))
    assert launch_api_key(write_launch(tmp_path, ['--config', str(keys), '--api-key', 'from-argv'])) == 'from-argv'


def test_no_key_without_config_file_or_when_it_cannot_be_read(tmp_path):
    assert launch_api_key(write_launch(tmp_path, ['--model-path', '/m'])) is None
    assert launch_api_key(write_launch(tmp_path, ['--config', str(tmp_path / 'missing.yaml')])) is None
    assert launch_api_key(str(tmp_path / 'no-launch.json')) is None


def test_flag_table_names_the_key_file_with_config_and_never_a_key():
    flags = sglang_flags({'model_path': '/m', 'config_file': '/etc/sglang/server.yaml'})
    assert flags['args'] == ['--model-path', '/m', '--config', '/etc/sglang/server.yaml']
    assert 'config' not in flags['expected'] and 'config_file' not in flags['expected']
    assert sglang_flags({'model_path': '/m', 'config_file': None})['args'] == ['--model-path', '/m']


class Recorder(object):
    """A loopback HTTP listener answering like SGLang with --api-key: 401 without the key but on /health."""

    def __init__(self, api_key):
        self.seen = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self):
                length = int(self.headers.get('Content-Length') or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                recorder.seen.append((self.command, self.path, self.headers.get('Authorization'), body))
                if not self.path.startswith('/health') and self.headers.get('Authorization') != 'Bearer ' + api_key:
                    code, document = 401, {'error': 'Unauthorized'}
                elif self.path == '/v1/loads':
                    code, document = 200, {'aggregate': {'total_reqs': 0}}
                elif self.path == '/generate':
                    code, document = 200, {'text': 'x', 'meta_info': {}}
                elif self.path == '/workers':
                    code, document = 202, {'status': 'accepted'}
                else:
                    code, document = 200, {'max_running_requests': 64, 'api_key': api_key}
                data = json.dumps(document).encode()
                self.send_response(code)
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = answer

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = 'http://127.0.0.1:%d' % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={'poll_interval': 0.01},
                                       daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def keyed_server():
    recorder = Recorder(AWKWARD_KEY)
    yield recorder
    recorder.close()


def server_for(tmp_path, url, key):
    keys = tmp_path / 'server.yaml'
    keys.write_text(render_keys(key))
    launch = write_launch(tmp_path, ['--model-path', '/m', '--config', str(keys)])
    # The server's main process is this test's, which listens on the recorder's port: the port is the server's.
    return Server('systemd', 'sglang', launch, str(tmp_path / 'pid'), os.devnull, url, runner=this_process_systemctl)


def test_verification_load_and_generate_requests_send_the_key_as_a_bearer_token(tmp_path, keyed_server):
    server = server_for(tmp_path, keyed_server.url, AWKWARD_KEY)
    assert server.server_info()['max_running_requests'] == 64
    assert server.in_flight() == (0, '/v1/loads')
    assert server.generate_once(5)['ok']
    assert [(method, path, auth) for method, path, auth, _ in keyed_server.seen] == [
        ('GET', '/server_info', 'Bearer ' + AWKWARD_KEY), ('GET', '/v1/loads', 'Bearer ' + AWKWARD_KEY),
        ('POST', '/generate', 'Bearer ' + AWKWARD_KEY)]


def test_a_refused_key_says_401_and_what_to_check_without_naming_the_key(tmp_path, keyed_server):
    server = server_for(tmp_path, keyed_server.url, 'not-the-servers-key')
    with pytest.raises(ServerError) as refused:
        server.server_info()
    assert '401' in str(refused.value) and 'API key' in str(refused.value)
    assert 'not-the-servers-key' not in str(refused.value) and AWKWARD_KEY not in str(refused.value)
    assert 'API key' in server.generate_once(5)['why']


def test_router_gets_the_workers_key_in_the_registration_body_only_when_there_is_one(keyed_server):
    router = Router(keyed_server.url, api_key=AWKWARD_KEY)
    router.add('http://10.0.0.11:30000/', worker_api_key='worker-key')
    router.add('http://10.0.0.12:30000')
    bodies = [body for method, path, _, body in keyed_server.seen if path == '/workers']
    assert bodies == [{'url': 'http://10.0.0.11:30000', 'api_key': 'worker-key'}, {'url': 'http://10.0.0.12:30000'}]
    # The request log a module returns names the requests, never a key.
    assert not any('worker-key' in line or AWKWARD_KEY in line for line in router.requests)
