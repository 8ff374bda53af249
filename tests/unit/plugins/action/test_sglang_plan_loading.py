"""SGLang's own loading options and the compile caches (issue 45) as the plan hands them to the server: the argv and
the /server_info values checked after the start, and the launch environment's cache folders."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'plugin_utils'))
from role_settings import NEEDED, role_defaults  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.gpuops.sglang.plugins.action.sglang_plan import ActionModule  # noqa: E402

LOADING_FLAGS = ('--weight-loader-prefetch-checkpoints', '--weight-loader-prefetch-num-threads',
                 '--startup-weight-load-mode')
LOADING_KEYS = ('weight_loader_prefetch_checkpoints', 'weight_loader_prefetch_num_threads', 'startup_weight_load_mode')
SERVICE_CACHES = {
    'TRITON_CACHE_DIR': '/var/cache/sglang/sglang/triton',
    'TORCHINDUCTOR_CACHE_DIR': '/var/cache/sglang/sglang/torchinductor',
    'FLASHINFER_WORKSPACE_BASE': '/var/cache/sglang/sglang/flashinfer',
    'SGLANG_DG_CACHE_DIR': '/var/cache/sglang/sglang/deep_gemm',
    'DG_JIT_CACHE_DIR': '/var/cache/sglang/sglang/deep_gemm',
}


def plan_of(run_action, **overrides):
    task_vars = dict(role_defaults(), **NEEDED)
    task_vars.update(inventory_hostname='gpu1', ansible_play_hosts_all=['gpu1'], groups={'gpu': ['gpu1']},
                     hostvars={'gpu1': {}})
    task_vars.update(overrides)
    plan = run_action(ActionModule, task_vars)
    assert not plan.get('failed'), plan.get('msg')
    return plan


def loading_args(args):
    """The loading flags of an argv, each with its value (the first is a bare switch)."""
    found = []
    for index, arg in enumerate(args):
        if arg in LOADING_FLAGS:
            found.extend(args[index:index + (1 if arg == LOADING_FLAGS[0] else 2)])
    return found


def launch_environment(plan):
    return json.loads(plan['contents']['launch configuration'])['environment']


def test_the_loading_options_are_left_out_and_unchecked_unless_set(run_action):
    plan = plan_of(run_action)
    assert not set(LOADING_FLAGS) & set(plan['args'])
    assert not set(LOADING_KEYS) & set(plan['expected_server_info'])


@pytest.mark.parametrize('overrides, args, expected', [
    ({'sglang_weight_loader_prefetch_checkpoints': True, 'sglang_weight_loader_prefetch_num_threads': 8},
     ['--weight-loader-prefetch-checkpoints', '--weight-loader-prefetch-num-threads', '8'],
     {'weight_loader_prefetch_checkpoints': True, 'weight_loader_prefetch_num_threads': 8}),
    # -e gives strings.
    ({'sglang_weight_loader_prefetch_checkpoints': 'true', 'sglang_weight_loader_prefetch_num_threads': '2'},
     ['--weight-loader-prefetch-checkpoints', '--weight-loader-prefetch-num-threads', '2'],
     {'weight_loader_prefetch_checkpoints': True, 'weight_loader_prefetch_num_threads': 2}),
    # Off, said: no switch, and a server that prefetches anyway fails the check after the start.
    ({'sglang_weight_loader_prefetch_checkpoints': False}, [], {'weight_loader_prefetch_checkpoints': False}),
    ({'sglang_startup_weight_load_mode': 'overlap'}, ['--startup-weight-load-mode', 'overlap'],
     {'startup_weight_load_mode': 'overlap'}),
], ids=['prefetch-with-threads', 'from-extra-vars', 'prefetch-off', 'overlap'])
def test_a_loading_option_set_is_given_and_checked_in_server_info(run_action, overrides, args, expected):
    plan = plan_of(run_action, **overrides)
    assert loading_args(plan['args']) == args
    assert {key: plan['expected_server_info'][key] for key in LOADING_KEYS if key in plan['expected_server_info']} \
        == expected
    assert json.loads(plan['contents']['launch configuration'])['args'] == plan['args']


def test_the_launch_points_each_compile_cache_at_the_services_own_folder(run_action):
    plan = plan_of(run_action, sglang_environment={'A': '1'})
    environment = launch_environment(plan)
    assert {name: environment[name] for name in SERVICE_CACHES if name in environment} == SERVICE_CACHES
    assert environment['A'] == '1'
    # What sglang_prefetch makes or refuses before the stop: each folder once, none under /tmp (PrivateTmp, reboots).
    assert plan['paths']['cache_folders'] == sorted(set(SERVICE_CACHES.values()))
    assert not any(folder.startswith('/tmp/') for folder in plan['paths']['cache_folders'])


def test_a_second_service_keeps_caches_of_its_own(run_action):
    plan = plan_of(run_action, sglang_service_name='sglang-b', sglang_cache_dir='/srv/cache/')
    assert launch_environment(plan)['TRITON_CACHE_DIR'] == '/srv/cache/sglang-b/triton'


def test_an_operators_own_cache_variable_is_kept_and_its_folder_left_alone(run_action):
    plan = plan_of(run_action, sglang_environment={'TRITON_CACHE_DIR': '/data/triton'},
                   sglang_secret_environment={'DG_JIT_CACHE_DIR': '/data/dg'})
    environment = launch_environment(plan)
    assert environment['TRITON_CACHE_DIR'] == '/data/triton' and environment['DG_JIT_CACHE_DIR'] == '/data/dg'
    # SGLang sets DG_JIT_CACHE_DIR from SGLANG_DG_CACHE_DIR: setting that one would override the operator's.
    assert 'SGLANG_DG_CACHE_DIR' not in environment
    assert plan['paths']['cache_folders'] == ['/var/cache/sglang/sglang/flashinfer',
                                              '/var/cache/sglang/sglang/torchinductor']


def test_no_cache_dir_leaves_the_caches_where_sglang_puts_them(run_action):
    plan = plan_of(run_action, sglang_cache_dir='')
    assert not set(SERVICE_CACHES) & set(launch_environment(plan)) and plan['paths']['cache_folders'] == []
