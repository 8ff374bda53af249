import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.sglang.plugins.filter.sglang_flags import sglang_flags
from ansible_collections.gpuops.sglang.plugins.filter.sglang_kill_lines import FilterModule as KillLines

EAGLE3 = {'model_path': '/models/llama', 'host': '127.0.0.1', 'port': 30000, 'tp_size': 1,
          'max_running_requests': 64, 'speculative_algorithm': 'EAGLE3', 'draft_model_path': '/models/eagle3',
          'speculative_num_steps': 3, 'speculative_eagle_topk': 1, 'speculative_num_draft_tokens': 4,
          'disable_overlap_schedule': True, 'adaptive': False, 'adaptive_config_path': '/etc/sglang/a.json',
          'extra_args': []}


def pairs(args):
    """{flag: value or True} of an argv, with no flag given twice."""
    found, index = {}, 0
    while index < len(args):
        flag = args[index]
        assert flag not in found, '%s given twice' % flag
        if index + 1 < len(args) and not args[index + 1].startswith('--'):
            found[flag], index = args[index + 1], index + 2
        else:
            found[flag], index = True, index + 1
    return found


def test_eagle3_flags_and_the_server_info_they_must_produce_come_from_one_row():
    flags = sglang_flags(EAGLE3)
    argv = pairs(flags['args'])
    assert argv['--speculative-algorithm'] == 'EAGLE3'
    assert argv['--speculative-num-steps'] == '3' and argv['--speculative-eagle-topk'] == '1'
    assert argv['--speculative-num-draft-tokens'] == '4'
    assert argv['--max-running-requests'] == '64'
    assert argv['--disable-overlap-schedule'] is True
    assert '--speculative-adaptive' not in argv
    assert flags['expected'] == {
        'model_path': '/models/llama', 'port': 30000, 'tp_size': 1, 'max_running_requests': 64,
        'speculative_algorithm': 'EAGLE3', 'speculative_draft_model_path': '/models/eagle3',
        'speculative_num_steps': 3, 'speculative_eagle_topk': 1, 'speculative_num_draft_tokens': 4,
        'disable_overlap_schedule': True}


def test_without_a_speculative_algorithm_no_speculative_flag_is_given_or_expected():
    flags = sglang_flags(dict(EAGLE3, speculative_algorithm=''))
    assert not [arg for arg in flags['args'] if arg.startswith('--speculative')]
    assert not [key for key in flags['expected'] if key.startswith('speculative')]


def test_adaptive_mode_adds_its_switch_config_and_expectation():
    flags = sglang_flags(dict(EAGLE3, adaptive=True))
    argv = pairs(flags['args'])
    assert argv['--speculative-adaptive'] is True
    assert argv['--speculative-adaptive-config'] == '/etc/sglang/a.json'
    assert flags['expected']['speculative_adaptive'] is True


def test_switches_given_as_strings_are_read_as_booleans():
    assert '--disable-overlap-schedule' not in sglang_flags(dict(EAGLE3, disable_overlap_schedule='false'))['args']


def test_extra_args_come_last_one_item_each():
    args = sglang_flags(dict(EAGLE3, extra_args=['--mem-fraction-static', 0.8]))['args']
    assert args[-2:] == ['--mem-fraction-static', '0.8']


@pytest.mark.parametrize('settings, message', [
    (dict(EAGLE3, port='thirty'), 'port must be int'),
    (dict(EAGLE3, extra_args='--x 1'), 'extra_args must be a list'),
    ('model', 'expects a dict'),
])
def test_bad_settings_are_refused_clearly(settings, message):
    with pytest.raises(AnsibleFilterError, match=message):
        sglang_flags(settings)


def test_kill_lines_name_each_process_and_its_last_signal():
    sglang_kill_lines = KillLines().filters()['sglang_kill_lines']
    assert sglang_kill_lines([{'pid': 5, 'cmdline': 'sglang::scheduler_TP0', 'signal': 'TERM'}]) == \
        ['sglang::scheduler_TP0 <- SIGTERM']
    assert sglang_kill_lines(None) == []


def test_a_server_across_nodes_gets_its_node_count_rank_and_meeting_address_from_one_row_each():
    flags = sglang_flags(dict(EAGLE3, tp_size=16, nnodes=2, node_rank='1', dist_init_addr='127.0.0.31:5000'))
    argv = pairs(flags['args'])
    assert (argv['--tp-size'], argv['--nnodes'], argv['--node-rank'], argv['--dist-init-addr']) \
        == ('16', '2', '1', '127.0.0.31:5000')
    assert dict((key, flags['expected'][key]) for key in ('nnodes', 'node_rank', 'dist_init_addr')) \
        == {'nnodes': 2, 'node_rank': 1, 'dist_init_addr': '127.0.0.31:5000'}


def test_a_single_node_server_gets_no_node_flag():
    flags = sglang_flags(dict(EAGLE3, nnodes=None, node_rank=None, dist_init_addr=None))
    assert flags == sglang_flags(EAGLE3)
    assert not [arg for arg in flags['args'] if arg in ('--nnodes', '--node-rank', '--dist-init-addr')]
