"""A launch flag's way from the role to the server's argv: the flags table (the sglang_flags filter's), the role's
variable of the same name (defaults/main.yml, meta/argument_specs.yml), the settings the plan reads
(_variables.ROLE_SETTINGS) and the plan's input to the table (sglang_plan.flag_settings). Each list is written by
hand; these tests hold them to the table, so a flag added, renamed or misspelt in one place fails here instead of
being left out of the argv in silence (the table skips a setting it is not given)."""
from __future__ import annotations

import importlib
import os
import sys

import pytest
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'plugin_utils'))
from role_settings import NEEDED, role_defaults  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.gpuops.sglang.plugins.action import sglang_plan  # noqa: E402
from ansible_collections.gpuops.sglang.plugins.plugin_utils import _configs, _speculation, _variables  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
# The table wherever the filter the plan calls keeps it (it is moving to plugin_utils).
FLAGS = importlib.import_module(sglang_plan.sglang_flags.__module__).FLAGS
TABLE = {row[0]: row[3] for row in FLAGS}
# The filter's input beyond the table's rows.
BEYOND_TABLE = ('extra_args',)
# Flags whose value the plan works out instead of passing sglang_<setting> through: the server group's three
# (_groups.plan_group, from sglang_server_group, sglang_node_rank, sglang_dist_init_*), adaptive drafting and its
# file (_rules.adaptive, the paths), the API keys file (_configs.keyed) and /metrics (on for a canary bake too).
WORKED_OUT = ('nnodes', 'node_rank', 'dist_init_addr', 'adaptive', 'adaptive_config_path', 'config_file',
              'enable_metrics')
PASSED_THROUGH = sorted(set(TABLE) - set(WORKED_OUT)) + list(BEYOND_TABLE)
SPEC_TYPES = {'str': 'str', 'int': 'int', 'bool': 'bool'}


class Recording(dict):
    """The settings, noting each one read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read = set()

    def __getitem__(self, name):
        self.read.add(name)
        return super().__getitem__(name)


@pytest.fixture
def settings() -> Recording:
    return Recording(role_defaults(), **NEEDED)


@pytest.fixture(scope='module')
def options() -> dict:
    with open(os.path.join(REPO, 'roles', 'sglang', 'meta', 'argument_specs.yml')) as handle:
        return yaml.safe_load(handle)['argument_specs']['main']['options']


def given(settings):
    return sglang_plan.flag_settings(settings, _configs.paths(settings))


def test_the_plan_gives_the_table_every_flag_and_nothing_it_does_not_read(settings):
    wanted = set(TABLE) | set(BEYOND_TABLE)
    assert set(given(settings)) == wanted, set(given(settings)) ^ wanted


def test_the_flags_the_plan_works_out_are_flags_of_the_table():
    assert set(WORKED_OUT) <= set(TABLE), set(WORKED_OUT) - set(TABLE)


@pytest.mark.parametrize('setting', PASSED_THROUGH)
def test_a_flag_reaches_the_argv_from_the_role_variable_of_its_name(settings, options, setting):
    variable = 'sglang_%s' % setting
    assert variable in options, '%s: no role variable %s in meta/argument_specs.yml' % (setting, variable)
    assert variable in _variables.ROLE_SETTINGS, '%s: the plan does not read %s' % (setting, variable)
    assert variable in role_defaults() or variable in _variables.OPTIONAL, (
        'no default in defaults/main.yml: %s' % variable)
    settings[variable] = marker = object()
    assert given(settings)[setting] is marker, '%s: the plan passes the table something other than %s' % (
        setting, variable)
    if setting in TABLE:
        # The argument spec refuses what the table could not convert.
        assert options[variable]['type'] == SPEC_TYPES[TABLE[setting]], (variable, options[variable]['type'])


def test_every_setting_the_plan_gives_the_table_is_one_it_reads(settings):
    given(settings)
    assert settings.read <= set(_variables.ROLE_SETTINGS), settings.read - set(_variables.ROLE_SETTINGS)


def test_the_dashboard_shows_only_server_info_keys_the_table_verifies():
    from gpuops_dashboard.inventory import SERVER_INFO_KEYS  # pylint: disable=import-outside-toplevel
    verified = {row[2] for row in FLAGS if row[2]}
    assert set(SERVER_INFO_KEYS) <= verified, set(SERVER_INFO_KEYS) - verified


def test_the_tuner_plans_each_mode_with_every_speculation_setting_of_the_mode(settings):
    # tasks/tune.yml hands each mode's settings to the plan as task variables, one by one: a setting a mode gains
    # (_speculation.mode_settings) and the task does not set would read as overridden (-e) and refuse the run.
    with open(os.path.join(REPO, 'roles', 'sglang', 'tasks', 'tune.yml')) as handle:
        block = yaml.safe_load(handle)[0]['block']
    task = next(task for task in block if (task.get('gpuops.sglang.sglang_plan') or {}).get('tune_mode'))
    from_mode = {name for name, value in task['vars'].items() if 'item.settings.' in str(value)}
    for mode in _speculation.modes(3, [1, 2]):
        assert set(_speculation.mode_settings(mode, settings)) == from_mode, mode
    assert all(task['vars'][name] == '{{ item.settings.%s }}' % name for name in from_mode)
