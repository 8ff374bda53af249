"""module_utils in layers that import downward only, and what the guard installs stays standard-library-only.

Layers (docs/architecture.md draws them):
  base     the runner, HTTP, files, polling: no import of another layer
  readers  what the host shows (/proc, pct, nvidia-smi) and the kill policy over it
  domain   the server, router, fleet, patching, guard, gpu_release's decisions
  module   how a module ends (only plugins/modules import it)
A file may import files of the layers below it and files of its own layer (no cycle).
"""
import ast
import os
import sys

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils._guard import RUNTIME_FILES
from helpers.ansible_run import REPO

MODULE_UTILS = os.path.join(REPO, 'plugins', 'module_utils')
PACKAGE = 'ansible_collections.gpuops.sglang.plugins.module_utils'
LAYERS = {
    'base': ('_command.py', '_http.py', '_files.py', '_polling.py', '_identity.py'),
    'readers': ('_procfs.py', '_pct.py', '_processes.py', '_nvidia.py', '_sockets.py', '_page_cache.py'),
    'domain': ('_patching.py', '_server.py', '_router.py', '_fleet.py', '_guard.py', '_release.py', '_lease.py',
               '_serving_benchmark.py', '_live_metrics.py'),
    'module': ('_module.py',),
}
ORDER = ('base', 'readers', 'domain', 'module')
LAYER_OF = dict((name, layer) for layer, names in LAYERS.items() for name in names)
# Run by the host-side guard with a bare interpreter, or imported by it: no Ansible, no third-party package.
STDLIB_ONLY = set(LAYERS['base'] + LAYERS['readers'] + RUNTIME_FILES)


def project_imports(name):
    """The module_utils files that file `name` imports, and every other top-level module it imports."""
    with open(os.path.join(MODULE_UTILS, name)) as handle:
        tree = ast.parse(handle.read(), name)
    own, other = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PACKAGE:
                own.update(alias.name + '.py' for alias in node.names)
            elif node.module.startswith(PACKAGE + '.'):
                own.add(node.module[len(PACKAGE) + 1:] + '.py')
            elif node.level == 0 and node.module != '__future__':
                other.add(node.module)
        elif isinstance(node, ast.Import):
            other.update(alias.name for alias in node.names)
    return own, other


def files():
    return sorted(name for name in os.listdir(MODULE_UTILS) if name.endswith('.py') and name != '__init__.py')


def test_every_module_utils_file_has_a_layer():
    assert [name for name in files() if name not in LAYER_OF] == []
    assert sorted(LAYER_OF) == files(), 'a layer names a file that does not exist'


@pytest.mark.parametrize('name', files())
def test_imports_go_down_the_layers_or_stay_within_one(name):
    own, dummy = project_imports(name)
    rank = ORDER.index(LAYER_OF[name])
    upward = sorted(target for target in own if ORDER.index(LAYER_OF[target]) > rank)
    assert upward == [], '%s (%s) imports %s from a layer above it' % (name, LAYER_OF[name], upward)


def test_no_import_cycle_within_a_layer():
    graph = dict((name, project_imports(name)[0]) for name in files())

    def reaches(start, goal, seen):
        for target in graph[start]:
            if target == goal or (target not in seen and reaches(target, goal, seen | {target})):
                return True
        return False
    assert [name for name in files() if reaches(name, name, {name})] == []


def test_only_the_modules_import_the_module_layer():
    importers = [name for name in files() if '_module.py' in project_imports(name)[0]]
    assert importers == []
    assert project_imports('_module.py')[0] == set()


@pytest.mark.parametrize('name', sorted(STDLIB_ONLY))
def test_what_the_guard_runs_imports_the_standard_library_alone(name):
    dummy, other = project_imports(name)
    outside = sorted(module for module in other if module.split('.')[0] not in sys.stdlib_module_names)
    assert outside == [], '%s imports %s, which a bare interpreter on the gpu host may lack' % (name, outside)


def test_the_guards_lib_holds_every_file_its_runtime_imports():
    missing = sorted(set(target for name in RUNTIME_FILES for target in project_imports(name)[0]) - set(RUNTIME_FILES))
    assert missing == [], 'the guard installs %s but not %s, which they import' % (sorted(RUNTIME_FILES), missing)


def test_the_layer_test_sees_imports_of_both_spellings():
    # The checks above are only as good as this parser: both import forms the collection uses are found.
    assert '_polling.py' in project_imports('_files.py')[0]
    assert '_nvidia.py' in project_imports('_guard.py')[0] and 'json' in project_imports('_guard.py')[1]
