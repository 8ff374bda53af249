"""Every module's documentation, as ansible-doc renders it, follows the anchors' conventions."""
import json
import os
import subprocess
import sys

import pytest
import yaml

from helpers.ansible_run import ANSIBLE_ENV, REPO

# Listed as Ansible lists a collection's modules: a name starting with '.' is none (an editor's lock
# file, .#gpu_release.py, exists while a buffer has unsaved changes, and failed this test meanwhile).
MODULES = sorted(name[:-3] for name in os.listdir(os.path.join(REPO, 'plugins', 'modules'))
                 if name.endswith('.py') and not name.startswith(('_', '.')))


@pytest.fixture(scope='module')
def docs():
    rendered = subprocess.check_output(
        [os.path.join(os.path.dirname(sys.executable), 'ansible-doc'), '--json']
        + ['gpuops.sglang.%s' % name for name in MODULES],
        env=dict(os.environ, **ANSIBLE_ENV), cwd=REPO, universal_newlines=True)
    return json.loads(rendered)


def returns_of(values, path=''):
    for key, value in values.items():
        yield path + key, value
        for item in returns_of(value.get('contains') or {}, path + key + '.'):
            yield item


def test_every_module_is_in_the_action_group():
    with open(os.path.join(REPO, 'meta', 'runtime.yml')) as runtime:
        group = yaml.safe_load(runtime)['action_groups']['sglang']
    assert sorted(group) == MODULES


@pytest.mark.parametrize('module', MODULES)
def test_attributes_come_from_the_fragment_with_module_details(docs, module):
    attributes = docs['gpuops.sglang.%s' % module]['doc']['attributes']
    assert attributes['platform']['platforms'] == 'posix'
    assert attributes['action_group']['membership'] == ['gpuops.sglang.sglang']
    for name in ('check_mode', 'diff_mode'):
        assert attributes[name]['support'] in ('full', 'partial', 'none')
        assert attributes[name]['details'], (module, name)
        # the general meaning comes from the fragment, the module's own text goes in details
        assert attributes[name]['description'].startswith(('Can run in', 'Will return details')), (module, name)


@pytest.mark.parametrize('module', MODULES)
def test_every_list_of_dicts_return_says_what_it_contains(docs, module):
    returns = docs['gpuops.sglang.%s' % module]['return']
    bare = [key for key, value in returns_of(returns)
            if value.get('type') == 'list' and value.get('elements') == 'dict' and not value.get('contains')]
    assert not bare, bare


# The role's internal steps are the modules backed by an action plugin (they run on the controller, their
# options are the role's to give): `ansible-doc -l` must tell them from the modules a user calls.
ROLE_INTERNAL = sorted(name[:-3] for name in os.listdir(os.path.join(REPO, 'plugins', 'action'))
                       if name.endswith('.py') and not name.startswith(('_', '.')))


@pytest.mark.parametrize('module', MODULES)
def test_only_the_role_internal_modules_say_so_first(docs, module):
    doc = docs['gpuops.sglang.%s' % module]['doc']
    internal = module in ROLE_INTERNAL
    assert doc['short_description'].startswith('(internal to the sglang role) ') == internal, doc['short_description']
    assert any('role, called by its' in line and 'not by users' in line for line in doc['description']) == internal


def test_the_role_documentation_leads_with_its_required_variables():
    with open(os.path.join(REPO, 'roles', 'sglang', 'meta', 'argument_specs.yml')) as handle:
        main = yaml.safe_load(handle)['argument_specs']['main']
    required = sorted(name for name, option in main['options'].items() if option.get('required'))
    assert required, 'the role has no required variable: the first line below would lead with nothing'
    first = main['description'][0]
    assert first.startswith('Required: ') and all(name in first for name in required), first
    with open(os.path.join(REPO, 'roles', 'sglang', 'README.md')) as handle:
        readme = handle.read().split('\n\n')
    # The README's first paragraph says what the role is; the second names what an inventory must set.
    assert readme[2].startswith('**Required: ') and all('`%s`' % name in readme[2] for name in required), readme[2]


# The other plugins' documentation parses too: a line break inside a plain YAML line that holds ": " made a filter's
# DOCUMENTATION a mapping (sanity and the Galaxy check caught it, minutes later than this does).
FILTERS = sorted(name[:-3] for name in os.listdir(os.path.join(REPO, 'plugins', 'filter'))
                 if name.endswith('.py') and not name.startswith(('_', '.')))


def test_every_filter_documents_itself_as_ansible_doc_reads_it():
    rendered = json.loads(subprocess.check_output(
        [os.path.join(os.path.dirname(sys.executable), 'ansible-doc'), '--json', '-t', 'filter']
        + ['gpuops.sglang.%s' % name for name in FILTERS],
        env=dict(os.environ, **ANSIBLE_ENV), cwd=REPO, universal_newlines=True))
    assert sorted(rendered) == ['gpuops.sglang.%s' % name for name in FILTERS]
    assert all(entry['doc'].get('short_description') for entry in rendered.values())


def aliased_options(options, path=''):
    for name, option in (options or {}).items():
        if option.get('aliases'):
            yield path + name
        for found in aliased_options(option.get('suboptions'), path + name + '.'):
            yield found


def test_no_option_has_an_alias(docs):
    # One name per option: the aliases were dropped before the first release (changelog 42-no-aliases).
    assert [(module, option) for module in MODULES
            for option in aliased_options(docs['gpuops.sglang.%s' % module]['doc'].get('options'))] == []
