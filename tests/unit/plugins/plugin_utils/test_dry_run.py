"""A check run's dry run, the pure part: the launch flags it would change, what it would end, in the operator's words."""
import base64
import json

import pytest

from ansible_collections.gpuops.sglang.plugins.filter.sglang_dry_run import sglang_dry_run
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _dry_run

LIVE = ['--model-path', '/models/m', '--port', '30000', '--max-running-requests', '64', '--enable-metrics']


@pytest.mark.parametrize('args, flags', [
    ([], {}),
    (['--port', '30000'], {'--port': '30000'}),
    (['--port=30000'], {'--port': '30000'}),
    (['--enable-metrics', '--port', '1'], {'--enable-metrics': True, '--port': '1'}),
    (['--port', '1', '--port', '2'], {'--port': '2'}),
    (['stray', '--tp-size', 2], {'--tp-size': '2'}),
    (['--speculative-algorithm', 'EAGLE3', '--disable-overlap-schedule'],
     {'--speculative-algorithm': 'EAGLE3', '--disable-overlap-schedule': True}),
], ids=['none', 'separate-value', 'joined-value', 'switch', 'last-wins', 'leading-word-and-number', 'switch-last'])
def test_launch_flags_read_as_argparse_would(args, flags):
    assert _dry_run.launch_flags(args) == flags


@pytest.mark.parametrize('live, wanted, changes', [
    (LIVE, LIVE, []),
    (LIVE, ['--model-path', '/models/m', '--port', '30000', '--max-running-requests', '96', '--enable-metrics'],
     [{'flag': '--max-running-requests', 'live': '64', 'wanted': '96'}]),
    (LIVE, ['--model-path', '/models/m', '--port', '30000', '--max-running-requests', '64'],
     [{'flag': '--enable-metrics', 'live': True, 'wanted': None}]),
    (LIVE, LIVE + ['--speculative-algorithm', 'EAGLE3'],
     [{'flag': '--speculative-algorithm', 'live': None, 'wanted': 'EAGLE3'}]),
    (None, ['--port', '30000'], [{'flag': '--port', 'live': None, 'wanted': '30000'}]),
    (['--port=30000'], ['--port', '30000'], []),
], ids=['unchanged', 'value-changed', 'switch-dropped', 'flag-added', 'no-live-configuration', 'spelling-only'])
def test_flag_changes_list_each_flag_the_window_would_change(live, wanted, changes):
    assert _dry_run.flag_changes(live, wanted) == changes


@pytest.mark.parametrize('text, args', [
    (json.dumps({'python': 'p', 'module': 'm', 'args': ['--port', '1']}), ['--port', '1']),
    (None, None), ('', None), ('not json', None), ('[1, 2]', None), (json.dumps({'args': 'x'}), None),
], ids=['launch-json', 'none', 'empty', 'not-json', 'not-an-object', 'args-not-a-list'])
def test_live_args_of_a_launch_configuration_or_none(text, args):
    assert _dry_run.live_args(text) == args


SERVER = {'pid': 4711, 'user': 'root', 'cmdline': 'python3 -m sglang.launch_server --port 30000', 'gpus': []}
HOLDER = {'pid': 436, 'user': 'alice', 'cmdline': 'python3 hold.py', 'gpus': [0, 1]}
DEADLINE = {'deadline_s': 900, 'idle_s': 90}


@pytest.mark.parametrize('stop, container, release, found', [
    ({'would_stop': [SERVER]}, None, {'targets': [HOLDER]},
     {'stop': [SERVER], 'kill': [], 'gpu_release': [HOLDER]}),
    ({'would_stop': []}, {'targets': [dict(SERVER, pid=12)]}, {'targets': []},
     {'stop': [], 'kill': [dict(SERVER, pid=12)], 'gpu_release': []}),
    (None, {'skipped': True}, None, {'stop': [], 'kill': [], 'gpu_release': []}),
    # The server's own processes are the stop's: the later steps await them, and end only what else is there.
    ({'would_stop': [SERVER]}, {'targets': [SERVER, dict(SERVER, pid=12)]}, {'targets': [dict(SERVER, gpus=[0]), HOLDER]},
     {'stop': [SERVER], 'kill': [dict(SERVER, pid=12)], 'gpu_release': [HOLDER]}),
], ids=['server-and-a-holder', 'container-only', 'nothing-ran', 'the-stops-own-left-to-the-stop'])
def test_would_kill_names_each_step(stop, container, release, found):
    assert _dry_run.would_kill(stop, container, release) == found


def test_the_lines_say_what_each_step_would_end_each_flag_and_the_guard():
    found = {'stop': [SERVER], 'kill': [], 'gpu_release': [HOLDER]}
    changes = [{'flag': '--max-running-requests', 'live': '64', 'wanted': '96'},
               {'flag': '--enable-metrics', 'live': True, 'wanted': None}]
    assert _dry_run.lines(found, changes, DEADLINE) == [
        'would end (stop): PID 4711, user root: python3 -m sglang.launch_server --port 30000',
        'would end (kill): nothing',
        'would end (gpu_release): PID 436, user alice: python3 hold.py [GPU 0, 1]',
        'flag --max-running-requests: 64 -> 96',
        'flag --enable-metrics: true -> (none)',
        'guard: rolls back 900 s after the window opens at the latest, or 90 s after its last renewal',
    ]


def test_the_filter_reads_the_slurped_live_configuration():
    slurped = {'content': base64.b64encode(json.dumps({'args': LIVE}).encode()).decode()}
    wanted = [arg if arg != '64' else '96' for arg in LIVE]
    dry_run = sglang_dry_run({'would_stop': [SERVER]}, release={'targets': []}, live_launch=slurped,
                             wanted_args=wanted, deadline=DEADLINE)
    assert dry_run['flag_changes'] == [{'flag': '--max-running-requests', 'live': '64', 'wanted': '96'}]
    assert dry_run['would_kill']['stop'] == [SERVER] and dry_run['deadline'] == DEADLINE
    # A live file the slurp could not read (none yet): every wanted flag is a change.
    missing = sglang_dry_run({}, live_launch={'failed': True, 'msg': 'file not found'}, wanted_args=['--port', '1'],
                             deadline=DEADLINE)
    assert missing['flag_changes'] == [{'flag': '--port', 'live': None, 'wanted': '1'}]
