"""The ansible-runner example of docs/dashboard.md (once the README's), run exactly as written from a clean shell at the repository root.

The lab is shared: run under `flock /tmp/gpuops-lab.lock`.
"""
import os
import re
import subprocess

from gpuops_dashboard.redeploy import REPO

from helpers import lab_instance

CLEAN_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'


def readme_example():
    with open(os.path.join(REPO, 'docs', 'dashboard.md')) as handle:
        text = handle.read()
    found = re.search(r'<!-- runner-example: start -->\n```sh\n(.*?)```\n<!-- runner-example: end -->', text, re.S)
    assert found, 'docs/dashboard.md lost its runner example markers'
    return found.group(1)


def test_readme_runner_example_works_as_written_from_a_clean_shell(lab_serving):
    # Nothing from this test's environment: no venv on PATH, no ANSIBLE_* variables.
    text, env = lab_instance.as_written_on_this_lab(readme_example(),
                                                    {'HOME': os.environ.get('HOME', '/root'), 'PATH': CLEAN_PATH})
    run = subprocess.run(['bash', '-euo', 'pipefail', '-c', text], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=540)
    assert run.returncode == 0, run.stdout[-3000:]
    lines = run.stdout.strip().splitlines()
    assert lines[-1] == 'successful 0', run.stdout[-3000:]
    for host in ('gpu1', 'gpu2'):
        assert any(re.match(r'%s (unchanged|redeployed) healthy ' % host, line) for line in lines), run.stdout[-3000:]
