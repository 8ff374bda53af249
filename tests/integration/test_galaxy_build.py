"""The built collection tarball installs, and its modules run from the installed copy."""
import os
import subprocess
import sys

from helpers.ansible_run import REPO, TARGET_PYTHON

BIN = os.path.dirname(sys.executable)


def test_built_tarball_installs_and_its_module_runs(tmp_path):
    subprocess.check_call([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'build', '--output-path',
                           str(tmp_path), REPO], stdout=subprocess.DEVNULL)
    tarball = [name for name in os.listdir(str(tmp_path)) if name.endswith('.tar.gz')]
    assert tarball == ['gpuops-sglang-0.1.0.tar.gz']
    installed = tmp_path / 'collections'
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(installed))
    env.pop('ANSIBLE_CONFIG', None)  # not the checkout's ansible.cfg: only the installed copy may resolve
    subprocess.check_call([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'install', '--force', '-p',
                           str(installed), str(tmp_path / tarball[0])], env=env, cwd=str(tmp_path),
                          stdout=subprocess.DEVNULL)
    assert os.path.isfile(str(installed / 'ansible_collections/gpuops/sglang/plugins/modules/gpu_release.py'))
    run = subprocess.run([os.path.join(BIN, 'ansible'), 'localhost', '-c', 'local', '-e',
                          'ansible_python_interpreter=%s' % TARGET_PYTHON, '-m', 'gpuops.sglang.sglang_patch',
                          '-a', 'content="" site_packages=/nonexistent'],
                         env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert run.returncode == 2, run.stdout
    assert 'refusing the diff, nothing was changed: the diff contains no hunks' in run.stdout, run.stdout
    assert str(installed) in subprocess.check_output(
        [os.path.join(BIN, 'ansible-doc'), '-t', 'module', 'gpuops.sglang.gpu_release'], env=env, cwd=str(tmp_path),
        universal_newlines=True)
