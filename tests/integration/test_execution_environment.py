"""The execution environment: what ansible-builder 3 finds in the BUILT collection, and the build context it
writes for the example EE definition (docs/ee-example). No image is pulled or built here (no registry can be
reached): the test stops where the image build would start, and replays the two steps of that build that
concern this collection with the files ansible-builder wrote: the galaxy stage's collection install from
_build/requirements.yml, and the builder stage's introspect.py over what it installed.
"""
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from helpers.ansible_run import REPO

BIN = os.path.dirname(sys.executable)
TARBALL = 'gpuops-sglang-0.1.0.tar.gz'
EXAMPLE = os.path.join(REPO, 'docs', 'ee-example')
# What meta/ee-requirements.txt and bindep.txt declare, as introspect reports it (ansible-core is the EE's
# own choice: ansible-builder drops it from a collection's list).
PYTHON_FOUND = ['jinja2>=3.1.6  # from collection gpuops.sglang']
SYSTEM_FOUND = ['openssh-client [platform:dpkg]  # from collection gpuops.sglang',
                'openssh-clients [platform:rpm]  # from collection gpuops.sglang',
                'patch [target]  # from collection gpuops.sglang',
                'coreutils [target]  # from collection gpuops.sglang',
                'python3 [target]  # from collection gpuops.sglang']


def run(argv, **kwargs):
    env = dict(os.environ)
    env.pop('ANSIBLE_CONFIG', None)  # not the checkout's ansible.cfg: only what is installed may resolve
    return subprocess.run(argv, env=env, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, **kwargs).stdout


@pytest.fixture(scope='module')
def tarball(tmp_path_factory):
    out = tmp_path_factory.mktemp('build')
    run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'build', '--output-path', str(out), REPO])
    return out / TARBALL


def installed_from(tarball, root):
    run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'install', '--force', '-p', str(root), str(tarball)])
    return root


def introspected(output):
    """The YAML document introspect prints after its '---'."""
    return yaml.safe_load(output[output.index('---'):])


def test_introspect_finds_the_built_collections_python_and_system_dependencies(tarball, tmp_path):
    collections = installed_from(tarball, tmp_path / 'collections')
    assert (collections / 'ansible_collections/gpuops/sglang/meta/execution-environment.yml').is_file()
    found = introspected(run([os.path.join(BIN, 'ansible-builder'), 'introspect', '--sanitize', str(collections)]))
    assert found == {'python': PYTHON_FOUND, 'system': SYSTEM_FOUND}


def test_create_writes_a_context_that_installs_the_collection_and_its_dependencies(tarball, tmp_path):
    definition = tmp_path / 'ee'
    shutil.copytree(EXAMPLE, str(definition))
    shutil.copy(str(tarball), str(definition))
    # The file's name would follow the container runtime found on PATH (Dockerfile where there is no podman, as
    # in make matrix-2.21's container): named, so that the test reads what it asserts on every controller.
    run([os.path.join(BIN, 'ansible-builder'), 'create', '--file', 'execution-environment.yml', '--context',
         'context', '--output-filename', 'Containerfile'], cwd=str(definition))
    build = definition / 'context' / '_build'
    containerfile = (definition / 'context' / 'Containerfile').read_text()
    assert 'ARG EE_BASE_IMAGE="localhost/gpuops-ee-base:stream9"' in containerfile
    assert 'ARG ANSIBLE_INSTALL_REFS="ansible-core>=2.19,<2.20 ansible-runner>=2.4,<2.5"' in containerfile
    install = 'ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml'
    assert install in containerfile and 'COPY _build /build\nWORKDIR /build' in containerfile
    assert 'introspect.py introspect --write-bindep=/tmp/src/bindep.txt --write-pip=/tmp/src/requirements.txt' \
        in containerfile
    requirements = yaml.safe_load((build / 'requirements.yml').read_text())
    assert requirements == {'collections': [{'name': 'collections/' + TARBALL, 'type': 'file'}]}
    assert (build / 'collections' / TARBALL).read_bytes() == tarball.read_bytes()

    # The galaxy stage, from /build (here _build): the collection installs from the context alone.
    collections = tmp_path / 'usr-share-ansible-collections'
    run([os.path.join(BIN, 'ansible-galaxy'), 'collection', 'install', '--force', '-r', 'requirements.yml',
         '--collections-path', str(collections)], cwd=str(build))
    assert (collections / 'ansible_collections/gpuops/sglang/playbooks/redeploy.yml').is_file()
    # The builder stage: the context's own introspect.py writes the files the image installs from.
    run([sys.executable, str(build / 'scripts' / 'introspect.py'), 'introspect', str(collections),
         '--write-bindep=%s' % (tmp_path / 'bindep.txt'), '--write-pip=%s' % (tmp_path / 'requirements.txt')])
    assert (tmp_path / 'requirements.txt').read_text().splitlines() == PYTHON_FOUND
    assert (tmp_path / 'bindep.txt').read_text().splitlines() == SYSTEM_FOUND


def test_the_image_installs_only_the_ssh_client_of_the_system_packages(tmp_path):
    """bindep's default profile (what the image's install-from-bindep selects) names only the ssh client;
    the managed hosts' packages sit under the "target" profile."""
    listed = subprocess.run([os.path.join(BIN, 'bindep'), '--file', os.path.join(REPO, 'bindep.txt'), '--list_all',
                             'newline'], stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.split()
    assert listed == ['openssh-client']
    on_hosts = subprocess.run([os.path.join(BIN, 'bindep'), '--file', os.path.join(REPO, 'bindep.txt'),
                               '--list_all', 'newline', 'target'],
                              stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.split()
    assert on_hosts == ['openssh-client', 'patch', 'coreutils', 'python3']
