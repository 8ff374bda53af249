"""The built collection tarball holds what a user installs, installs, and its modules run from the installed copy."""
import json
import os
import subprocess
import sys
import tarfile

import pytest

from helpers.ansible_run import REPO, TARGET_PYTHON

BIN = os.path.dirname(sys.executable)
MODULES = ['gpu_release', 'pct_exec_kill', 'sglang_guard', 'sglang_patch', 'sglang_server']
# What a user installs, and nothing else at the top of the tarball.
SHIPPED_TOP = {'COPYING', 'README.md', 'MANIFEST.json', 'FILES.json', 'bindep.txt', 'changelogs', 'docs', 'files',
               'inventory', 'meta', 'playbooks', 'plugins', 'roles', 'tests', 'extensions'}
MUST_SHIP = ['COPYING', 'README.md', 'meta/runtime.yml', 'changelogs/changelog.yaml', 'changelogs/config.yaml',
             'playbooks/redeploy.yml', 'roles/sglang/tasks/main.yml', 'roles/sglang/meta/argument_specs.yml',
             'plugins/doc_fragments/attributes.py', 'plugins/filter/sglang_flags.py',
             'files/eagle_dynamic_spec_threshold.diff', 'inventory/example/hosts.yml',
             'tests/integration/targets/sglang_patch/tasks/main.yml',
             'tests/integration/targets/sglang_patch/aliases',
             # What ansible-builder reads from the installed collection (test_execution_environment.py).
             'meta/execution-environment.yml', 'meta/ee-requirements.txt', 'bindep.txt',
             # What ansible-rulebook finds as gpuops.sglang.undo_on_alert and gpuops.sglang.alertmanager.
             'extensions/eda/rulebooks/undo_on_alert.yml',
             'extensions/eda/plugins/event_source/alertmanager.py'] + ['plugins/modules/%s.py' % name for name in MODULES]
# Development of this checkout only: the lab and its inventory, molecule, bench, the pytest suites.
NEVER_SHIP = ['lab', 'molecule', 'bench', 'gpuops_dashboard', 'Makefile', 'ansible.cfg', 'pytest.ini', 'requirements',
              '.ci', '.cache', '.venv', '.gitignore', '.ansible-lint', 'inventory/lab', 'inventory/lab-multinode',
              'inventory/lab-colocated',
              'tests/lab', 'tests/unit', 'tests/helpers', 'tests/fixtures', 'tests/gpu', 'tests/conftest.py',
              'tests/integration/test_galaxy_build.py', 'tests/sanity/run-ansible-test.sh', 'tests/ansible-test.sh',
              'tests/galaxy-check.sh', 'tests/run_stages.py']


@pytest.fixture(scope='module')
def tarball(tmp_path_factory):
    out = tmp_path_factory.mktemp('build')
    subprocess.check_call([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'build', '--output-path',
                           str(out), REPO], stdout=subprocess.DEVNULL)
    names = [name for name in os.listdir(str(out)) if name.endswith('.tar.gz')]
    assert names == ['gpuops-sglang-0.1.0.tar.gz']
    return out / names[0]


@pytest.fixture(scope='module')
def members(tarball):
    with tarfile.open(str(tarball)) as archive:
        return {member.name.rstrip('/'): member for member in archive.getmembers()}


def test_tarball_holds_the_collection_license_and_docs(members):
    missing = [name for name in MUST_SHIP if name not in members]
    assert not missing, missing
    assert {name.split('/')[0] for name in members} <= SHIPPED_TOP


def test_tarball_leaves_out_the_lab_molecule_bench_and_build_files(members):
    shipped = [name for name in members
               if any(name == path or name.startswith(path + '/') for path in NEVER_SHIP)]
    assert not shipped, shipped
    stray_tests = [name for name in members if name.startswith('tests/') and members[name].isfile()
                   and not name.startswith('tests/integration/targets/')
                   and not (name.startswith('tests/sanity/ignore-') and name.endswith('.txt'))]
    assert not stray_tests, stray_tests


# What the tools this checkout runs leave in it (issue 47: `make matrix` ran the importer's check after a run of
# the importer by hand at the root, and its importer_result.json went into the tarball).
TOOL_LEFTOVERS = ['importer_result.json', '.ansible/collections/ansible_collections/gpuops/sglang/README.md',
                  'tests/output/.tmp/sanity.log', '.pytest_cache/v/cache/lastfailed', 'gpuops-sglang-0.1.0.tar.gz',
                  'bench/results/outage.json', '.cache/dashboard/runs.db', 'gpu-check-out/result.json',
                  'plugins/modules/__pycache__/gpu_release.cpython-311.pyc']


def test_what_the_tools_leave_in_a_checkout_never_ships(tmp_path):
    checkout = tmp_path / 'checkout'
    tracked = subprocess.check_output(['git', 'ls-files', '-z'], cwd=REPO).decode().split('\0')
    for name in filter(None, tracked):
        source = os.path.join(REPO, name)
        if os.path.isfile(source) and not os.path.islink(source):
            target = checkout / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(open(source, 'rb').read())
    for name in TOOL_LEFTOVERS:
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text('left by a tool\n')
    out = tmp_path / 'build'
    subprocess.check_call([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'build', '--output-path', str(out),
                           str(checkout)], stdout=subprocess.DEVNULL)
    with tarfile.open(str(out / 'gpuops-sglang-0.1.0.tar.gz')) as archive:
        names = {member.name for member in archive.getmembers()}
    assert not [name for name in TOOL_LEFTOVERS if name in names], sorted(names & set(TOOL_LEFTOVERS))
    assert {name.split('/')[0] for name in names} <= SHIPPED_TOP


def test_every_file_of_the_integration_targets_ships(members):
    # build_ignore's tests/*.py and tests/*.sh also match below tests/integration/targets (fnmatch's * crosses
    # folders): a target that grows a module or a script must still ship whole.
    targets = os.path.join(REPO, 'tests', 'integration', 'targets')
    files = [os.path.relpath(os.path.join(folder, name), REPO) for folder, _, names in os.walk(targets)
             for name in names if '__pycache__' not in folder and not name.endswith('.pyc')]
    assert files
    missing = [name for name in files if name not in members]
    assert not missing, missing


def test_copying_is_the_full_gpl3_text_and_the_manifest_names_no_placeholder(tarball):
    with tarfile.open(str(tarball)) as archive:
        copying = archive.extractfile('COPYING').read().decode()
        manifest = json.loads(archive.extractfile('MANIFEST.json').read().decode())
    assert 'GNU GENERAL PUBLIC LICENSE' in copying and 'Version 3, 29 June 2007' in copying
    assert 'END OF TERMS AND CONDITIONS' in copying and len(copying) > 30000
    info = manifest['collection_info']
    assert info['license'] == ['GPL-3.0-or-later']
    # The Galaxy importer refuses a collection without one; there is no public repository to name yet.
    assert info['repository']
    urls = [info[key] for key in ('repository', 'documentation', 'homepage', 'issues') if info.get(key)]
    assert not [url for url in urls if 'example' in url or 'invalid' in url], urls


@pytest.mark.slow
def test_built_tarball_installs_and_its_modules_run_through_the_action_group(tarball, tmp_path):
    installed = tmp_path / 'collections'
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(installed))
    env.pop('ANSIBLE_CONFIG', None)  # not the checkout's ansible.cfg: only the installed copy may resolve
    subprocess.check_call([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'install', '--force', '-p',
                           str(installed), str(tarball)], env=env, cwd=str(tmp_path), stdout=subprocess.DEVNULL)
    assert os.path.isfile(str(installed / 'ansible_collections/gpuops/sglang/plugins/modules/gpu_release.py'))
    run = subprocess.run([os.path.join(BIN, 'ansible'), 'localhost', '-c', 'local', '-e',
                          'ansible_python_interpreter=%s' % TARGET_PYTHON, '-m', 'gpuops.sglang.sglang_patch',
                          '-a', 'content="" site_packages=/nonexistent'],
                         env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
    assert run.returncode == 2, run.stdout
    assert 'refusing the diff, nothing was changed: the diff contains no hunks' in run.stdout, run.stdout
    # module_defaults for the action group reach the module: the options come only from there.
    play = [{'hosts': 'localhost', 'gather_facts': False,
             'module_defaults': {'group/gpuops.sglang.sglang': {'content': '', 'site_packages': '/nonexistent'}},
             'tasks': [{'name': 'patch with options from the group defaults', 'gpuops.sglang.sglang_patch': {},
                        'register': 'refused', 'ignore_errors': True},
                       {'ansible.builtin.assert': {'that': [
                           "refused is failed",
                           "'the diff contains no hunks' in refused.msg"]}}]}]
    (tmp_path / 'play.yml').write_text(json.dumps(play))
    run = subprocess.run([os.path.join(BIN, 'ansible-playbook'), '-i', 'localhost,', '-c', 'local', '-e',
                          'ansible_python_interpreter=%s' % TARGET_PYTHON, 'play.yml'],
                         env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
    assert run.returncode == 0, run.stdout
    assert str(installed) in subprocess.check_output(
        [os.path.join(BIN, 'ansible-doc'), '-t', 'module', 'gpuops.sglang.gpu_release'], env=env, cwd=str(tmp_path),
        universal_newlines=True)
