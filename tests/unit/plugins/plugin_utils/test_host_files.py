"""The one name of every per-host file in a controller folder: any inventory name stays one file inside the folder,
an ordinary name keeps the file name it always had."""
import os
import posixpath
import re

import pytest

from ansible_collections.gpuops.sglang.plugins.filter.sglang_host_file import FilterModule
from ansible_collections.gpuops.sglang.plugins.plugin_utils._host_files import SUFFIXES, host_file
from helpers.ansible_run import REPO

# Names Ansible takes in an inventory that, used as they are, name a file elsewhere, a folder or a hidden file.
ODD_NAMES = ['../../escaped', '../x', 'a/b', '/etc/passwd', '.', '..', '.hidden', '...', 'a/../../b', 'rack%2Fgpu1',
             'rack/gpu1', 'x\\y', 'tab\there', 'new\nline', 'spa ce', 'ünï', '%2E%2E', '-leading-dash', '~']

# A path component made of the inventory name as it is: "{{ dir }}/{{ inventory_hostname }}.x".
PATH_OF_A_NAME = re.compile(r'/\{\{\s*inventory_hostname\s*\}\}')


@pytest.mark.parametrize('host, kind, name', [
    ('gpu1', 'report', 'gpu1.json'),
    ('gpu-1.example.com', 'last_redeploy', 'gpu-1.example.com.last-redeploy.json'),
    ('gpu_2', 'speculation', 'gpu_2.speculation.json'),
    ('gpu2', 'speculation_vars', 'gpu2.speculation.vars.yml'),
    ('gpu3', 'rollback', 'gpu3.rollback.json'),
    ('group:big', 'slot', 'group:big.json'),
    ('10.0.0.7', 'report', '10.0.0.7.json'),
    ('../../escaped', 'report', '%2E.%2F..%2Fescaped.json'),
    ('a/b', 'speculation', 'a%2Fb.speculation.json'),
    ('..', 'rollback', '%2E..rollback.json'),
    ('.', 'speculation_vars', '%2E.speculation.vars.yml'),
    ('rack%2Fgpu1', 'slot', 'rack%252Fgpu1.json'),
], ids=['plain', 'fqdn', 'underscore', 'vars', 'rollback', 'group-key', 'address', 'dot-dot-slash', 'slash',
        'dot-dot', 'dot', 'percent'])
def test_each_kind_of_host_file_has_its_name(host, kind, name):
    assert host_file(host, kind) == name


@pytest.mark.parametrize('kind', sorted(SUFFIXES))
@pytest.mark.parametrize('host', ODD_NAMES)
def test_any_inventory_name_stays_one_visible_file_inside_the_folder(host, kind):
    name = host_file(host, kind)
    assert '/' not in name and '\0' not in name and not name.startswith('.')
    assert posixpath.dirname(posixpath.normpath(posixpath.join('/reports', name))) == '/reports'


@pytest.mark.parametrize('kind', sorted(SUFFIXES))
def test_two_hosts_never_share_a_file(kind):
    names = ODD_NAMES + ['escaped', 'x', 'a%2Fb', 'hidden', '%2Ehidden', 'gpu1']
    assert len(set(host_file(name, kind) for name in names)) == len(names)


def test_an_unknown_kind_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="'log' is no kind of host file; the kinds are last_redeploy, report,"):
        host_file('gpu1', 'log')


def test_the_filter_names_the_file_as_the_writers_do():
    named = FilterModule().filters()['sglang_host_file']
    assert named('../../escaped', 'rollback') == host_file('../../escaped', 'rollback') == '%2E.%2F..%2Fescaped.rollback.json'
    assert named('gpu1', 'rollback') == 'gpu1.rollback.json'


def test_the_playbooks_name_per_host_files_through_the_filter():
    # rollback.yml wrote sglang_report_dir/{{ inventory_hostname }}.rollback.json: '../../x' wrote outside it.
    joined = []
    for folder in ('playbooks', os.path.join('roles', 'sglang', 'tasks')):
        for entry in sorted(os.listdir(os.path.join(REPO, folder))):
            with open(os.path.join(REPO, folder, entry)) as handle:
                joined.extend('%s: %s' % (entry, line.strip()) for line in handle if PATH_OF_A_NAME.search(line))
    assert not joined, 'per-host paths joined from the inventory name; use gpuops.sglang.sglang_host_file: %s' % joined
