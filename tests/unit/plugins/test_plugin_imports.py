"""A filter plugin is a Jinja entry point, never a library: what another plugin shares with a filter lives in
plugin_utils (the flags table: plugin_utils/_flags.py, used by the sglang_flags filter and the sglang_plan action)."""
import ast
import os

from helpers.ansible_run import REPO

PLUGINS = os.path.join(REPO, 'plugins')
FILTERS = 'ansible_collections.gpuops.sglang.plugins.filter'


def filter_imports(root):
    """(file, module) of every import of a filter plugin by a file outside plugins/filter/."""
    for folder, dummy, names in os.walk(root):
        if os.path.relpath(folder, root).split(os.sep)[0] == 'filter':
            continue
        for name in sorted(names):
            if not name.endswith('.py'):
                continue
            path = os.path.join(folder, name)
            with open(path) as handle:
                tree = ast.parse(handle.read(), path)
            for node in ast.walk(tree):
                modules = ([node.module or ''] if isinstance(node, ast.ImportFrom)
                           else [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
                for module in modules:
                    if module == FILTERS or module.startswith(FILTERS + '.'):
                        yield os.path.relpath(path, root), module


def test_no_plugin_imports_a_filter_plugin():
    assert list(filter_imports(PLUGINS)) == []


def test_an_import_of_a_filter_plugin_is_found(tmp_path):
    (tmp_path / 'action').mkdir()
    (tmp_path / 'filter').mkdir()
    (tmp_path / 'filter' / 'own.py').write_text('from %s.other import x\n' % FILTERS)
    (tmp_path / 'action' / 'plan.py').write_text('from %s.sglang_flags import sglang_flags\n' % FILTERS)
    assert list(filter_imports(str(tmp_path))) == [(os.path.join('action', 'plan.py'), FILTERS + '.sglang_flags')]
