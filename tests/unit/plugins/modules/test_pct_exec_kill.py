import yaml

from ansible_collections.gpuops.sglang.plugins.modules import pct_exec_kill
from ansible_collections.gpuops.sglang.plugins.module_utils.readers import _processes as processes
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._pct import LIST_SCRIPT, SIGNAL_SCRIPT

from helpers.module_runner import read_fixture

PCT = '/usr/sbin/pct'
LISTING = read_fixture('pct-listing-container.txt')
SGLANG_PIDS = ('2', '3', '4')
AFTER = ''.join(line + '\n' for line in LISTING.splitlines() if line.split(' ')[1:2] not in [[p] for p in SGLANG_PIDS])
RESULT_KEYS = {'changed', 'killed', 'remaining', 'cmd', 'vmid'}
LIST_ARGV = [PCT, 'exec', '101', '--', '/bin/sh', '-c', LIST_SCRIPT, 'gpuops-sglang-list']


def container(status='running', listings=(LISTING, AFTER), signal_answer=None, hang=()):
    """Answers pct like a node: `status`, the listing script's output in turn, the signal script's."""
    listings = list(listings)

    def respond(argv):
        if argv[1] == 'status':
            if 'status' in hang:
                return 124, '', ''
            if status is None:
                return 255, '', "Configuration file 'nodes/pve1/lxc/%s.conf' does not exist\n" % argv[2]
            return 0, 'status: %s\n' % status, ''
        script = argv[6]
        if script == LIST_SCRIPT:
            if 'list' in hang:
                return 124, '', ''
            return 0, listings.pop(0) if len(listings) > 1 else listings[0], ''
        if script == SIGNAL_SCRIPT:
            if 'signal' in hang:
                return 124, '', ''
            pids = [target.split(':')[0] for target in argv[9:]]
            if signal_answer is not None:
                return signal_answer
            return 0, ''.join('sent %s\n' % pid for pid in pids) + 'end\n', ''
        raise AssertionError('unexpected command %r' % argv)
    return respond


def test_check_mode_lists_sglang_processes_and_sends_nothing(run_module):
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101}, container(), check_mode=True,
                               bin_paths={'pct': PCT})
    assert result['changed'] is True
    assert [entry['pid'] for entry in result['killed']] == [2, 3, 4]
    assert {entry['signal'] for entry in result['killed']} == {'TERM'}
    assert not any(SIGNAL_SCRIPT in call for call in calls)
    assert set(result) >= RESULT_KEYS


def test_pid_1_and_the_listing_shell_are_never_targets_even_for_a_pattern_matching_all(run_module):
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101, 'kill_patterns': ['.']}, container(), check_mode=True,
                               bin_paths={'pct': PCT})
    pids = [entry['pid'] for entry in result['killed']]
    assert 1 not in pids and 8 not in pids and pids == [2, 3, 4, 5, 6]


def test_commands_are_fixed_scripts_with_pids_and_start_times_as_arguments(run_module):
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101}, container(), bin_paths={'pct': PCT})
    assert calls[0] == [PCT, 'status', '101']
    assert calls[1] == LIST_ARGV
    assert calls[2] == [PCT, 'exec', '101', '--', '/bin/sh', '-c', SIGNAL_SCRIPT, 'gpuops-sglang-signal', 'TERM',
                        '2:53672', '3:53672', '4:53673']
    assert calls[3] == LIST_ARGV
    assert result['changed'] is True and result['remaining'] == [] and not result['failed']
    assert result['cmd'] == calls


def test_success_needs_a_final_listing_without_a_match(run_module):
    after = AFTER.replace('end\n', 'proc 40 1 S 60000 sglang::scheduler_TP0\nend\n')
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101, 'term_timeout': 0, 'kill_timeout': 0.05},
                               container(listings=(LISTING, after)), bin_paths={'pct': PCT})
    # pid 40 appeared after the first listing: it is signalled too, and still there, so the run fails
    assert result['failed'] and [entry['pid'] for entry in result['remaining']] == [40]
    assert any(call[-1] == '40:60000' for call in calls)
    assert 40 in [entry['pid'] for entry in result['killed']]


def test_stopped_container_fails_before_listing(run_module):
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101}, container(status='stopped'),
                               bin_paths={'pct': PCT})
    assert result['failed'] and 'container 101 is stopped' in result['msg']
    assert len(calls) == 1
    assert set(result) >= RESULT_KEYS


def test_missing_container_reports_pct_message(run_module):
    result, _ = run_module(pct_exec_kill.main, {'vmid': 999}, container(status=None), bin_paths={'pct': PCT})
    assert result['failed'] and 'does not exist' in result['msg'] and '999' in result['msg']


def test_missing_pct_is_a_clear_failure(run_module):
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101}, container(), bin_paths={})
    assert result['failed'] and 'pct was not found' in result['msg'] and calls == []


def test_nothing_matching_is_not_a_change(run_module):
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101}, container(listings=(AFTER,)),
                               bin_paths={'pct': PCT})
    assert result['changed'] is False and result['killed'] == [] and not result['failed']
    assert len(calls) == 2


def test_survivor_of_kill_fails_with_its_state(run_module):
    result, _ = run_module(pct_exec_kill.main, {'vmid': 101, 'term_timeout': 0, 'kill_timeout': 0.1},
                           container(listings=(LISTING,)), bin_paths={'pct': PCT})
    assert result['failed']
    assert [entry['pid'] for entry in result['remaining']] == [2, 3, 4]
    assert 'still there after SIGKILL' in result['msg'] and 'state S' in result['msg']


def test_hung_listing_after_the_signal_says_what_was_signalled(run_module):
    listings = [LISTING]

    def respond(argv):
        if argv[1] != 'status' and argv[6] == LIST_SCRIPT and not listings:
            return 124, '', ''
        if argv[1] != 'status' and argv[6] == LIST_SCRIPT:
            return 0, listings.pop(), ''
        return container()(argv)
    result, _ = run_module(pct_exec_kill.main, {'vmid': 101, 'command_timeout': 2}, respond, bin_paths={'pct': PCT})
    assert result['failed'] and 'timed out after 2s' in result['msg']
    assert 'already signalled: pid 2 (SIGTERM), pid 3 (SIGTERM), pid 4 (SIGTERM)' in result['msg']
    assert [entry['pid'] for entry in result['killed']] == [2, 3, 4] and result['changed'] is True


def test_hung_status_kills_nothing(run_module):
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101, 'command_timeout': 2}, container(hang=('status',)),
                               bin_paths={'pct': PCT})
    assert result['failed'] and '`%s status 101` timed out after 2s' % PCT in result['msg']
    assert 'nothing was signalled' in result['msg'] and len(calls) == 1


def test_listing_failure_says_why(run_module):
    def respond(argv):
        if argv[1] == 'status':
            return 0, 'status: running\n', ''
        return 1, '', 'lxc-attach: 101: attach.c: No such file or directory - Failed to exec "/bin/sh"\n'
    result, _ = run_module(pct_exec_kill.main, {'vmid': 101}, respond, bin_paths={'pct': PCT})
    assert result['failed'] and 'Failed to exec "/bin/sh"' in result['msg'] and 'rc 1' in result['msg']
    assert 'nothing was signalled' in result['msg']


def test_empty_patterns_are_refused_before_any_command(run_module):
    for patterns, message in (([], 'patterns is empty'), ([''], 'an empty pattern matches every process')):
        result, calls = run_module(pct_exec_kill.main, {'vmid': 101, 'kill_patterns': patterns}, container(),
                                   bin_paths={'pct': PCT})
        assert result['failed'] and message in result['msg'] and calls == []
        assert set(result) >= RESULT_KEYS


def test_bad_pattern_is_rejected_before_any_command(run_module):
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101, 'kill_patterns': ['(']}, container(),
                               bin_paths={'pct': PCT})
    assert result['failed'] and "invalid pattern '('" in result['msg'] and calls == []


def test_the_two_server_example_ends_its_servers_tree_alone_and_spares_the_neighbours():
    task = next(task for task in yaml.safe_load(pct_exec_kill.EXAMPLES) if 'port 30000' in task['name'])
    owners = pct_exec_kill.ownership(task['gpuops.sglang.pct_exec_kill'])
    patterns = processes.compile_patterns(processes.DEFAULT_SGLANG_PATTERNS)
    venv = '/opt/sglang/venv/bin/python3'
    record, marks = processes.ProcessRecord, processes.ProcessMarks
    # Two servers in one container under one user, each with its children (their titles name no port), and orphans
    # whose parent died: one inherited the neighbour's launch mark, one sits in the server's unit, one carries nothing.
    records = [
        record(10, 1, 'S', venv + ' -m sglang.launch_server --model-path /models/a --port 30000 --host 0.0.0.0'),
        record(11, 10, 'S', 'sglang::scheduler_TP0'),
        record(12, 10, 'S', 'sglang::detokenizer'),
        record(20, 1, 'S', venv + ' -m sglang.launch_server --model-path /models/b --port=30001 --host 0.0.0.0'),
        record(21, 20, 'S', 'sglang::scheduler_TP0'),
        record(31, 1, 'S', 'sglang::scheduler_TP1', marks=marks(launch_file='/etc/sglang-b/launch.json')),
        record(32, 1, 'S', 'sglang::detokenizer', marks=marks(unit='sglang')),
        record(33, 1, 'S', 'sglang::scheduler_TP2'),
        record(40, 1, 'S', venv + ' -m sglang.launch_server --model-path /models/d --port 300001'),
    ]
    targets, spared = owners.sort(processes.select(records, patterns), records)
    assert [process.pid for process in targets] == [10, 11, 12, 32]
    why = {entry['pid']: entry['why'] for entry in spared}
    assert sorted(why) == [20, 21, 31, 33, 40]
    assert 'neighbour server gpu1b' in why[20] and why[21].startswith('its parent 20 carries the marks of the neighbour')
    assert 'launch file /etc/sglang-b/launch.json' in why[31] and 'may be theirs' in why[33]
    assert 'another server than this one' in why[40] and '--port 300001' in why[40]
