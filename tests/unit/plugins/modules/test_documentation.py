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
