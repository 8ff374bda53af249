"""module_utils in layers that import downward only, and what the guard installs stays standard-library-only.

A file's folder is its layer (docs/architecture.md draws them):
  base/     the runner, HTTP, files, polling: no import of another layer
  readers/  what the host shows (/proc, pct, nvidia-smi) and the kill policy over it
  domain/   the server, router, fleet, patching, guard, gpu_release's decisions
  (top)     the module layer: how a module ends (only plugins/modules import it)
A file may import files of the layers below it and files of its own layer (no cycle). Files are named by their
path below module_utils ('base/_command.py'), as the guard's RUNTIME_FILES names them.
"""
import ast
import os
import sys

import pytest

from ansible_collections.gpuops.sglang.plugins.module_utils.domain._guard import RUNTIME_FILES
from helpers.ansible_run import REPO

MODULE_UTILS = os.path.join(REPO, 'plugins', 'module_utils')
PACKAGE = 'ansible_collections.gpuops.sglang.plugins.module_utils'
# Bottom to top; the module layer is the top of module_utils itself.
ORDER = ('base', 'readers', 'domain', 'module')
FOLDERS = ORDER[:-1]


def files():
    """Every module_utils file, by its path below module_utils."""
    found = []
    for folder, dummy, names in os.walk(MODULE_UTILS):
        below = os.path.relpath(folder, MODULE_UTILS)
        found.extend(name if below == '.' else '%s/%s' % (below.replace(os.sep, '/'), name)
                     for name in names if name.endswith('.py') and name != '__init__.py')
    return sorted(found)


def layer_of(name):
    """A file's layer: its folder, the module layer at the top."""
    folder = name.rpartition('/')[0]
    if not folder:
        return 'module'
    return folder if folder in FOLDERS else None


STDLIB_ONLY = set([name for name in files() if layer_of(name) in ('base', 'readers')] + list(RUNTIME_FILES))


def imports_in(source, name):
    """The module_utils files that `source` imports (paths below module_utils), and every other top-level module."""
    own, other = set(), set()
    for node in ast.walk(ast.parse(source, name)):
        if isinstance(node, ast.ImportFrom) and node.module:
            below = node.module[len(PACKAGE) + 1:] if node.module.startswith(PACKAGE + '.') else None
            if node.module == PACKAGE or below in FOLDERS:
                # from PACKAGE import _module, from PACKAGE.domain import _guard: the names are files
                own.update((below + '/' if below else '') + alias.name + '.py' for alias in node.names)
            elif below:
                own.add(below.replace('.', '/') + '.py')
            elif node.level == 0 and node.module != '__future__':
                other.add(node.module)
        elif isinstance(node, ast.Import):
            other.update(alias.name for alias in node.names)
    return own, other


def project_imports(name):
    """What module_utils file `name` (its path below module_utils) imports: see imports_in."""
    with open(os.path.join(MODULE_UTILS, *name.split('/'))) as handle:
        return imports_in(handle.read(), name)


def test_every_module_utils_file_has_a_layer():
    assert [name for name in files() if layer_of(name) is None] == [], 'a folder of module_utils is not a layer'
    assert [name for name in files() if layer_of(name) == 'module'] == ['_module.py'], 'only _module.py is at the top'


@pytest.mark.parametrize('name', files())
def test_imports_go_down_the_layers_or_stay_within_one(name):
    own, dummy = project_imports(name)
    rank = ORDER.index(layer_of(name))
    upward = sorted(target for target in own if ORDER.index(layer_of(target)) > rank)
    assert upward == [], '%s (%s) imports %s from a layer above it' % (name, layer_of(name), upward)


def test_no_import_cycle_within_a_layer():
    graph = {name: project_imports(name)[0] for name in files()}

    def reaches(start, goal, seen):
        for target in graph[start]:
            if target == goal or (target not in seen and reaches(target, goal, seen | {target})):
                return True
        return False
    assert [name for name in files() if reaches(name, name, {name})] == []


def test_only_the_modules_import_the_module_layer():
    module_layer = {name for name in files() if layer_of(name) == 'module'}
    assert module_layer == {'_module.py'}
    importers = [name for name in files() if module_layer & project_imports(name)[0]]
    assert importers == []
    assert project_imports('_module.py')[0] == set()


@pytest.mark.parametrize('name', sorted(STDLIB_ONLY))
def test_what_the_guard_runs_imports_the_standard_library_alone(name):
    dummy, other = project_imports(name)
    outside = sorted(module for module in other if module.split('.')[0] not in sys.stdlib_module_names)
    assert outside == [], '%s imports %s, which a bare interpreter on the gpu host may lack' % (name, outside)


def test_the_guards_lib_holds_every_file_its_runtime_imports():
    assert sorted(set(RUNTIME_FILES) - set(files())) == [], 'the guard installs a file that is not there'
    missing = sorted(set(target for name in RUNTIME_FILES for target in project_imports(name)[0]) - set(RUNTIME_FILES))
    assert missing == [], 'the guard installs %s but not %s, which they import' % (sorted(RUNTIME_FILES), missing)


def test_the_layer_test_sees_imports_of_every_spelling():
    # The checks above are only as good as this parser: the import forms the collection uses are found,
    # each as the file's path below module_utils.
    assert 'base/_polling.py' in project_imports('base/_files.py')[0]
    assert 'readers/_nvidia.py' in project_imports('domain/_guard.py')[0]
    assert 'json' in project_imports('domain/_guard.py')[1]
    source = ('from %s import _module\nfrom %s.domain import _guard\nfrom %s.base._files import (\n    write_atomic)\n'
              % (PACKAGE, PACKAGE, PACKAGE))
    assert imports_in(source, 'probe')[0] == {'_module.py', 'domain/_guard.py', 'base/_files.py'}
