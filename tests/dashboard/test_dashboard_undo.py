"""Undo from the dashboard (issue 46): each server's revisions on its host card, and POST /api/undos, which runs
playbooks/undo.yml through the redeploy's runner path with the redeploy's token, extra-variable and limit rules, for
exactly one server. Without the lab.

The served app (uvicorn on 127.0.0.1) reads revisions that are real folders in the format the guard writes
(docs/undo.md), kept in a folder the guard's trust rule accepts (tests/helpers/trusted_folder.py), on hosts Ansible
reaches with its local connection; one more host is an ssh port that accepts and never answers. An undo run goes
through ansible-runner and the real role in check mode, and the role refuses it in its preflight (before anything
stops), so nothing on this machine is changed; the page's own request is caught in the browser.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import sys
import tempfile
import time
import urllib.request

import pytest
import yaml

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._revisions import folder_size, image
from gpuops_dashboard import inventory as host_inventory
from gpuops_dashboard import redeploy, revisions, store
from helpers.dashboard_http import get, post
from helpers.trusted_folder import trusted_base

TOKEN = 'test-token'
# Bytes in the revisions' copies: never to reach the page.
CONTENT_MARK = b'contents-of-a-kept-file-5d1f'
ANSWER_BOUND_S = 3 * host_inventory.READ_BOUND_S
# The revisions read's own bound here: the stalled ssh host is stopped at it, before its ssh gives up (CONNECT_TIMEOUT_S),
# and long after the local hosts answer, however loaded the machine.
READ_BOUND_S = 25.0
CONNECT_TIMEOUT_S = 120


def write_revision(folder, number, origin, run_id, files, when):
    """revisions/<number>/ as the guard writes it: revision.json and the copies ({path: (before, after)} bytes)."""
    where = os.path.join(folder, 'revisions', str(number))
    for side in ('before', 'after'):
        os.makedirs(os.path.join(where, side), mode=0o700)
    entries = []
    for index, (path, (before, after)) in enumerate(sorted(files.items())):
        stored_as = 'file%d' % index
        for side, data in (('before', before), ('after', after)):
            with open(os.path.join(where, side, stored_as), 'wb') as handle:
                handle.write(data)
            os.chmod(os.path.join(where, side, stored_as), 0o600)
        entries.append({'path': path, 'change': 'found' if origin == 'found' else 'modified', 'stored_as': stored_as,
                        'before': image('file', 0o644, 0, 0, before), 'after': image('file', 0o644, 0, 0, after)})
    index = {'format': 1, 'number': number, 'origin': origin, 'time': when,
             'time_utc': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(when)), 'run_id': run_id, 'host': 'solo',
             'sglang_version': '0.5.23', 'patch_sha256': None, 'report': None, 'files': entries}
    with open(os.path.join(where, 'revision.json'), 'w') as handle:
        json.dump(index, handle)
    os.chmod(os.path.join(where, 'revision.json'), 0o600)


def stalling_port():
    """A port that accepts connections (the kernel completes them) and never says a word: an ssh that stalls."""
    listener = socket.socket()
    listener.bind(('127.0.0.1', 0))
    listener.listen(16)
    return listener


def hosts_view(url):
    """(status, body, seconds) of GET /api/hosts."""
    begun = time.monotonic()
    body = get(url + '/api/hosts', timeout=ANSWER_BOUND_S)
    return 200, body, time.monotonic() - begun


def card_when(url, name, ready, timeout=120):
    """The card of `name` once `ready(card)` holds (each view answers within its bound; the read goes on)."""
    deadline = time.monotonic() + timeout
    while True:
        cards = {card['name']: card for card in hosts_view(url)[1]['hosts']}
        if ready(cards[name]) or time.monotonic() > deadline:
            return cards[name]
        time.sleep(0.5)


@pytest.fixture(scope='module')
def site(serve, tmp_path_factory):
    """Hosts `solo` (revisions 1 to 3; its launch file changed since revision 3), `empty` (no revision), the two nodes
    of server group `pair`, and `stalled` (ssh that never answers); the dashboard over them, and its first view."""
    base = tmp_path_factory.mktemp('undo')
    guard = tempfile.mkdtemp(prefix='gpuops-sglang-test-', dir=trusted_base())
    listener = stalling_port()
    try:
        launch = str(base / 'launch.json')
        with open(launch, 'wb') as handle:
            handle.write(b'{"args": ["changed by hand"]}')
        solo = os.path.join(guard, 'solo')
        os.makedirs(solo, mode=0o700)
        now = time.time()
        write_revision(solo, 1, 'found', 'run-a', {launch: (b'{"args": []}', b'{"args": []}')}, now - 300)
        write_revision(solo, 2, 'redeploy', 'run-a', {launch: (b'{"args": []}', b'{"args": ["2"]}' + CONTENT_MARK)},
                       now - 200)
        write_revision(solo, 3, 'redeploy', 'run-b', {launch: (b'{"args": ["2"]}' + CONTENT_MARK, b'{"args": ["3"]}')},
                       now - 100)
        common = {'ansible_host': '127.0.0.1', 'sglang_host': '0.0.0.0', 'sglang_port': 1, 'sglang_model_path': '/m',
                  'sglang_draft_model_path': '/d', 'sglang_dynamic_spec_enabled': False,
                  'sglang_report_dir': str(base / 'reports'), 'sglang_guard_dir': guard}
        local = dict(common, ansible_connection='local', ansible_python_interpreter=sys.executable)
        # One machine each (the plan refuses servers of one machine that share their folders).
        hosts = {'solo': dict(local, ansible_host='127.0.0.3', sglang_service_name='solo'),
                 'empty': dict(local, ansible_host='127.0.0.4', sglang_service_name='empty'),
                 'pair-a': dict(local, ansible_host='127.0.0.5', sglang_service_name='pair-a', sglang_server_group='pair',
                                sglang_node_rank=0),
                 'pair-b': dict(local, ansible_host='127.0.0.6', sglang_service_name='pair-b', sglang_server_group='pair',
                                sglang_node_rank=1),
                 'stalled': dict(common, ansible_port=listener.getsockname()[1])}
        os.makedirs(str(base / 'inventory'))
        with open(str(base / 'inventory' / 'hosts.yml'), 'w') as handle:
            yaml.safe_dump({'all': {'children': {'gpu': {'hosts': hosts}}}}, handle)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(revisions, 'READ_BOUND_S', READ_BOUND_S)
            patch.setattr(revisions, 'CONNECT_TIMEOUT_S', CONNECT_TIMEOUT_S)
            served = serve(inventory=str(base / 'inventory'))
            # Resolved before anything is timed, as the hosts-read tests do.
            served.app.state.dashboard.directory.hosts()
            yield {'url': served.url, 'served': served, 'first_view': hosts_view(served.url), 'launch': launch,
                   'solo': solo}
    finally:
        listener.close()
        shutil.rmtree(guard, ignore_errors=True)


def stored_runs(url):
    return get(url + '/api/redeploys')['redeploys']


# -- the host card --------------------------------------------------------------------------------------------

def test_the_host_card_lists_each_kept_revision_newest_first_and_no_file_contents(site):
    card = card_when(site['url'], 'solo', lambda card: card['revisions']['revisions'] is not None)
    listed = card['revisions']
    assert listed['error'] is None and listed['problems'] == []
    assert [(revision['number'], revision['origin'], revision['run_id']) for revision in listed['revisions']] == [
        (3, 'redeploy', 'run-b'), (2, 'redeploy', 'run-a'), (1, 'found', 'run-a')]
    assert listed['latest'] == 3 and listed['count'] == 3
    assert [revision['changed'] for revision in listed['revisions']] == [
        [{'path': site['launch'], 'change': 'modified'}]] * 2 + [[{'path': site['launch'], 'change': 'found'}]]
    sizes = [folder_size(os.path.join(site['solo'], 'revisions', str(number))) for number in (3, 2, 1)]
    assert [revision['size_bytes'] for revision in listed['revisions']] == sizes
    assert listed['total_bytes'] == sum(sizes)
    assert listed['revisions'][0]['time_utc'].endswith('Z')
    with urllib.request.urlopen(site['url'] + '/api/hosts', timeout=ANSWER_BOUND_S) as response:
        assert CONTENT_MARK not in response.read()


def test_a_server_without_revisions_says_none_are_kept(site):
    card = card_when(site['url'], 'empty', lambda card: card['revisions']['revisions'] is not None)
    assert card['revisions']['revisions'] == [] and card['revisions']['latest'] is None


def test_a_stalling_host_stalls_neither_the_view_nor_the_other_cards(site):
    status, body, took = site['first_view']
    assert status == 200 and took < ANSWER_BOUND_S
    card = card_when(site['url'], 'stalled', lambda card: not card['revisions']['reading'])
    assert card['revisions']['revisions'] is None
    assert card['revisions']['error'].startswith('no answer within %s s' % READ_BOUND_S)
    assert card_when(site['url'], 'solo', lambda card: True)['revisions']['latest'] == 3


def test_a_view_waits_for_a_read_only_within_its_bound_and_then_shows_the_last_listing():
    answered = []

    def stalling(names, stop, on_answer):
        on_answer('fast', {'revisions': [], 'count': 0, 'latest': None, 'total_bytes': 0, 'problems': []}, None)
        answered.append(True)
        while not stop():
            time.sleep(0.01)
    reader = revisions.RevisionReader(stalling)
    begun = time.monotonic()
    cards = reader.listings(['fast', 'slow'], time.monotonic() + 0.5)
    assert answered and time.monotonic() - begun < 5
    assert cards['fast']['revisions'] == [] and cards['fast']['reading']
    assert cards['slow']['revisions'] is None and cards['slow']['error'] == 'being read'


# -- the undo: who may, for what --------------------------------------------------------------------------------

def test_an_undo_needs_the_token(site):
    before = stored_runs(site['url'])
    for token in (None, 'wrong'):
        status, body, headers = post(site['url'] + '/api/undos', token, {'limit': 'solo'})
        assert status == 401 and headers['WWW-Authenticate'] == 'Bearer'
    assert stored_runs(site['url']) == before


@pytest.mark.parametrize('limit, says', [
    (None, 'Input should be a valid string'), ('', 'limit must name hosts'), ('all', "'all' is not one"),
    ('gpu*', "'gpu*' is not one"), ('solo,empty', 'names several'), ('solo:empty', "'solo:empty' is not one"),
    ('!stalled', "'!stalled' is not one"), ('pair-a', 'server group pair is undone as a whole'),
    ('solo,@/etc/hostname', 'no "@" anywhere in it'), ('nosuch', "'nosuch' is not one")])
def test_an_undo_names_exactly_one_server_of_the_inventory(site, limit, says):
    before = stored_runs(site['url'])
    status, body, dummy = post(site['url'] + '/api/undos', TOKEN, {'limit': limit})
    assert status == 422
    assert any(problem['loc'] == ['body', 'limit'] and says in problem['msg'] for problem in body['detail']), body
    assert stored_runs(site['url']) == before


def test_a_server_group_is_undone_as_a_whole_and_a_host_alone():
    hosts = {'solo': {'server_group': ''}, 'pair-a': {'server_group': 'pair'}, 'pair-b': {'server_group': 'pair'}}
    assert redeploy.undo_limit('pair-b, pair-a', hosts) == 'pair-b,pair-a'
    assert redeploy.undo_limit('solo', hosts) == 'solo'
    for limit in ('pair-a,pair-b,solo', 'pair-a,pair-a', 'solo,solo'):
        with pytest.raises(ValueError):
            redeploy.undo_limit(limit, hosts)


@pytest.mark.parametrize('revision', ['2', True, 1.5, 0, -1, 2 ** 31, "{{ lookup('pipe', 'id') }}", [1], {'n': 1}])
def test_the_revision_is_a_whole_number_never_code(site, revision):
    before = stored_runs(site['url'])
    status, body, dummy = post(site['url'] + '/api/undos', TOKEN, {'limit': 'solo', 'revision': revision})
    assert status == 422
    assert [problem['loc'] for problem in body['detail']] == [['body', 'revision']], body
    assert 'input' not in json.dumps(body)
    assert stored_runs(site['url']) == before


@pytest.mark.parametrize('extra, key', [({'sglang_undo_to': 1}, 'sglang_undo_to'),
                                        ({'ansible_connection': 'local'}, 'ansible_connection'),
                                        ({'sglang_guard_dir': '/tmp'}, 'sglang_guard_dir'),
                                        ({'sglang_force_restart': 'yes'}, 'sglang_force_restart')])
def test_an_undos_extra_variables_follow_the_redeploys_rules(site, extra, key):
    before = stored_runs(site['url'])
    status, body, dummy = post(site['url'] + '/api/undos', TOKEN, {'limit': 'solo', 'extra_vars': extra})
    assert status == 422
    assert any(('extra_vars.%s: ' % key) in problem['msg'] for problem in body['detail']), body
    assert stored_runs(site['url']) == before


# -- the undo: a run --------------------------------------------------------------------------------------------

def finished(url, run_id, timeout=300):
    deadline = time.monotonic() + timeout
    while True:
        described = get('%s/api/redeploys/%s' % (url, run_id))
        if described['status'] != 'running' or time.monotonic() > deadline:
            return described
        time.sleep(0.5)


def artifacts_command(site, run_id):
    """The ansible-playbook command line ansible-runner kept in the run's artifacts."""
    for where, dummy, files in os.walk(os.path.join(site['served'].state_dir, 'runs', run_id, 'artifacts')):
        if 'command' in files:
            with open(os.path.join(where, 'command')) as handle:
                return json.load(handle)['command']
    raise AssertionError('no command in the artifacts of %s' % run_id)


@pytest.mark.parametrize('revision, says', [
    (7, 'revision 7 is not kept (beyond the latest): the revisions kept are 1, 2, 3'),
    (None, 'changed since revision 3 recorded them (by hand?): %s')])
def test_an_undo_runs_undo_yml_for_its_server_and_its_refusal_is_the_runs_failure(site, revision, says):
    says = says % site['launch'] if '%s' in says else says
    status, body, dummy = post(site['url'] + '/api/undos', TOKEN, {'limit': 'solo', 'revision': revision,
                                                                   'check': True})
    assert status == 202, body
    described = finished(site['url'], body['id'])
    assert (described['kind'], described['status'], described['limit']) == ('undo', 'failed', 'solo')
    assert described['extra_vars'] == {'sglang_undo_to': revision}
    assert described['failure'].startswith('solo: nothing was stopped: Plan the undo') and says in described['failure']
    command = artifacts_command(site, body['id'])
    assert redeploy.UNDO_PLAYBOOK in command and '--check' in command
    assert command[command.index('--limit') + 1] == 'solo'
    assert [run['kind'] for run in stored_runs(site['url']) if run['id'] == body['id']] == ['undo']
    # Its events as a redeploy's: progress records, then the end.
    with urllib.request.urlopen('%s/api/redeploys/%s/events' % (site['url'], body['id']), timeout=60) as response:
        stream = response.read().decode()
    assert 'event: progress' in stream and stream.rstrip().endswith('data: {"status": "failed"}')
    with urllib.request.urlopen('%s/api/redeploys/%s/timeline.svg' % (site['url'], body['id']), timeout=60) as answer:
        assert ('undo %s: failed' % body['id']) in answer.read().decode()


# -- the history, and the page ----------------------------------------------------------------------------------

def test_an_older_history_reads_every_run_as_a_redeploy(tmp_path):
    path = str(tmp_path / 'dashboard.sqlite3')
    old = sqlite3.connect(path)
    old.executescript(store._SCHEMA.replace(",\n    kind TEXT NOT NULL DEFAULT 'redeploy'", ''))
    old.execute("INSERT INTO runs (id, created_at, status, inventory, extra_vars) VALUES ('r', 1, 'successful', "
                "'inventory/lab', '{}')")
    old.commit()
    old.close()
    reopened = store.Store(path)
    reopened.add_run('u', 'inventory/lab', 'gpu2', {'sglang_undo_to': 1}, 2.0, kind='undo')
    assert [(run['id'], run['kind']) for run in reopened.runs()] == [('u', 'undo'), ('r', 'redeploy')]
    reopened.close()


def test_the_page_lists_the_revisions_and_its_undo_asks_for_that_server_and_revision(site, page):
    card_when(site['url'], 'solo', lambda card: card['revisions']['revisions'] is not None)
    asked, dialogs, answers = [], [], ['dismiss', 'accept', 'accept']

    def answer(route, request):
        asked.append((request.headers.get('authorization'), json.loads(request.post_data)))
        route.fulfill(status=202, content_type='application/json', body=json.dumps({'id': 'caught'}))

    def confirm(dialog):
        dialogs.append((dialog.type, dialog.message))
        getattr(dialog, answers.pop(0))()
    page.route('**/api/undos', answer)
    page.on('dialog', confirm)
    page.goto(site['url'] + '/')
    page.fill('#token', TOKEN)
    page.wait_for_selector('.host[data-host="solo"] .revision[data-revision="1"]')
    lines = page.query_selector_all('.host[data-host="solo"] .revision')
    assert [line.get_attribute('data-revision') for line in lines] == ['3', '2', '1']
    assert 'run run-b' in lines[0].inner_text() and 'modified %s' % site['launch'] in lines[0].inner_text()
    # The current revision has no undo of its own; the others do.
    assert lines[0].query_selector('button') is None
    assert '3 (redeploy)' in lines[0].inner_text() and '1 (found)' in lines[2].inner_text()
    # Each undo asks first; one not confirmed sends nothing.
    lines[2].query_selector('button.undo-to').click()
    page.wait_for_selector('#status:text-matches("^undo of solo not confirmed: nothing was sent")')
    assert asked == [] and dialogs == [('confirm', "Undo solo to revision 1? The server is stopped and restarted with "
                                                   "that revision's files.")]
    lines[2].query_selector('button.undo-to').click()
    # A selector, not a function: the page's policy allows no eval.
    page.wait_for_selector('#status:text-matches("^undo caught")')
    assert asked == [('Bearer ' + TOKEN, {'limit': 'solo', 'revision': 1})]
    # "Undo the last run" sends the revision it shows (the one before the latest listed), never null.
    last = page.query_selector('.host[data-host="solo"] button.undo')
    assert last.inner_text() == 'Undo the last run (back to revision 2)'
    # The first undo's run is being followed (a second would be refused): a fresh page.
    page.reload()
    page.fill('#token', TOKEN)
    page.wait_for_selector('.host[data-host="solo"] button.undo').click()
    page.wait_for_selector('#status:text-matches("^undo caught")')
    assert asked[1:] == [('Bearer ' + TOKEN, {'limit': 'solo', 'revision': 2})]
    assert [message for kind, message in dialogs[2:]] == ["Undo solo to revision 2? The server is stopped and restarted "
                                                          "with that revision's files."]
