"""The role's settings as the plan reads them (_variables.ROLE_SETTINGS) against the role that defines them: each one
a documented variable (meta/argument_specs.yml) with a default (defaults/main.yml), and the two files agreeing on
every default. A misspelt name in any of the three fails here, not as an undefined variable on a managed host."""
from __future__ import annotations

import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _variables

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
ROLE = os.path.join(REPO, 'roles', 'sglang')


def load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


@pytest.fixture(scope='module')
def defaults() -> dict:
    return load('defaults', 'main.yml')


@pytest.fixture(scope='module')
def options() -> dict:
    """{name: spec} of every entry point's options (the tune entry point's repeat the main one's)."""
    found = {}
    for entry in load('meta', 'argument_specs.yml')['argument_specs'].values():
        found.update(entry.get('options') or {})
    return found


def test_the_plan_reads_each_setting_once():
    assert len(set(_variables.ROLE_SETTINGS)) == len(_variables.ROLE_SETTINGS)


def test_every_setting_the_plan_reads_is_a_documented_role_variable(options):
    undocumented = sorted(set(_variables.ROLE_SETTINGS) - set(options))
    assert not undocumented, 'read by the plan, not in meta/argument_specs.yml: %s' % undocumented


def test_every_setting_the_plan_reads_has_a_default_or_is_optional_by_design(defaults, options):
    missing = sorted(set(_variables.ROLE_SETTINGS) - set(defaults) - set(_variables.OPTIONAL))
    assert not missing, 'read by the plan, no default in defaults/main.yml: %s' % missing
    # What the plan takes for an unset optional setting is no default of the role's: the spec gives none either.
    assert set(_variables.OPTIONAL) <= set(_variables.ROLE_SETTINGS)
    assert not set(_variables.OPTIONAL) & set(defaults)
    assert all('default' not in options[name] for name in _variables.OPTIONAL)


def test_every_default_of_the_role_is_a_documented_variable(defaults, options):
    undocumented = sorted(set(defaults) - set(options))
    assert not undocumented, 'in defaults/main.yml, not in meta/argument_specs.yml: %s' % undocumented


# Documented variables the role tests with `is defined`: a host in a Proxmox container names them, bare metal does not.
# sglang_undo_to too: playbooks/undo.yml sets it (null for the revision before the latest), an undo run's mark.
UNSET_BY_DESIGN = ('pve_node', 'pve_vmid', 'sglang_undo_to')


def test_every_documented_variable_has_a_default_unless_unset_is_its_meaning(defaults, options):
    without = set(options) - set(defaults)
    spec_only = sorted(name for name in without if 'default' in options[name])
    assert not spec_only, 'a default in meta/argument_specs.yml, none in defaults/main.yml: %s' % spec_only
    required = set(name for name in without if options[name].get('required'))
    missing = sorted(without - required - set(_variables.OPTIONAL) - set(UNSET_BY_DESIGN))
    assert not missing, 'documented, no default in defaults/main.yml: %s' % missing


def test_the_argument_specs_default_is_the_roles_default(defaults, options):
    # A templated default is compared as Ansible renders it without extra variables (redeploy_*).
    # The role's own file is trusted as Ansible trusts it (ansible-core 2.19 renders no untrusted text).
    trusted = {name: trust_as_template(value) if isinstance(value, str) else value for name, value in defaults.items()}
    templar = Templar(loader=DataLoader(), variables=trusted)
    differ = {}
    for name, spec in sorted(options.items()):
        if 'default' not in spec:
            continue
        value = templar.template(trusted[name])
        if value != spec['default'] or isinstance(value, bool) != isinstance(spec['default'], bool):
            differ[name] = (spec['default'], value)
    assert not differ, '{name: (argument_specs.yml, defaults/main.yml)}: %s' % differ
