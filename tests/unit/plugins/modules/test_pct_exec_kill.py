from ansible_collections.gpuops.sglang.plugins.modules import pct_exec_kill

from helpers.module_runner import read_fixture

PCT = '/usr/sbin/pct'
PS = read_fixture('ps-container.txt')
PS_AFTER = '\n'.join(line for line in PS.splitlines() if 'sglang' not in line.split(None, 3)[3].split(' ')[0]
                     and 'launch_server' not in line) + '\n'
RESULT_KEYS = {'changed', 'killed', 'remaining', 'cmd', 'vmid'}


def container(status='running', ps_sequence=(PS, PS_AFTER)):
    listings = list(ps_sequence)

    def respond(argv):
        if argv[1] == 'status':
            if status is None:
                return 255, '', "Configuration file 'nodes/pve1/lxc/%s.conf' does not exist\n" % argv[2]
            return 0, 'status: %s\n' % status, ''
        if argv[4] == 'ps':
            return 0, listings.pop(0) if len(listings) > 1 else listings[0], ''
        if argv[4] == 'kill':
            return 0, '', ''
        raise AssertionError('unexpected command %r' % argv)
    return respond


def test_check_mode_lists_sglang_processes_and_sends_nothing(run_module):
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101}, container(), check_mode=True,
                               bin_paths={'pct': PCT})
    assert result['changed'] is True
    assert [entry['pid'] for entry in result['killed']] == [43, 44, 51]
    assert {entry['signal'] for entry in result['killed']} == {'TERM'}
    assert not any('kill' in call for call in calls)
    assert set(result) >= RESULT_KEYS


def test_commands_are_argv_lists_through_pct_exec(run_module):
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101}, container(), bin_paths={'pct': PCT})
    assert calls[0] == [PCT, 'status', '101']
    assert calls[1] == [PCT, 'exec', '101', '--', 'ps', '-e', '-ww', '-o', 'pid=,ppid=,stat=,args=']
    assert calls[2] == [PCT, 'exec', '101', '--', 'kill', '-s', 'TERM', '43', '44', '51']
    assert result['changed'] is True and result['remaining'] == []
    assert result['cmd'] == calls


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
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101}, container(ps_sequence=(PS_AFTER,)),
                               bin_paths={'pct': PCT})
    assert result['changed'] is False and result['killed'] == []
    assert len(calls) == 2


def test_survivor_of_kill_fails_with_its_state(run_module):
    result, _ = run_module(pct_exec_kill.main, {'vmid': 101, 'term_timeout': 0, 'kill_timeout': 0.1},
                           container(ps_sequence=(PS,)), bin_paths={'pct': PCT})
    assert result['failed']
    assert [entry['pid'] for entry in result['remaining']] == [43, 44, 51]
    assert 'survived SIGKILL' in result['msg'] and 'state Ss' in result['msg']


def test_bad_pattern_is_rejected_before_any_command(run_module):
    result, calls = run_module(pct_exec_kill.main, {'vmid': 101, 'patterns': ['(']}, container(),
                               bin_paths={'pct': PCT})
    assert result['failed'] and "invalid pattern '('" in result['msg'] and calls == []
