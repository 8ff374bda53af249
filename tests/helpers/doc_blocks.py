"""The shell blocks of the docs/ pages per use, run as written by the tests that name them.

A block is a fenced ```sh block right after `<!-- doc-test: NAME -->`; every ```sh block of these pages must
carry one, so a command cannot be added to them untested. NAME says which test runs it (`in-make-test`: make
targets that `make test` itself runs).
"""
import os
import re
import subprocess

from helpers import lab_instance
from helpers.ansible_run import REPO

PAGES = ('docs/terminal.md', 'docs/ansible-runner.md', 'docs/molecule.md')
MARKED = re.compile(r'<!-- doc-test: ([\w-]+) -->\n```sh\n(.*?)^```$', re.S | re.M)
FENCE = re.compile(r'^```sh$', re.M)


def page_text(page):
    with open(os.path.join(REPO, page)) as handle:
        return handle.read()


def marked_blocks(page):
    """[(name, block text)] of one page, in order."""
    return MARKED.findall(page_text(page))


def doc_block(name):
    """The text of the one block named NAME on any of the pages."""
    found = [text for page in PAGES for marked, text in marked_blocks(page) if marked == name]
    assert len(found) == 1, 'expected one block marked doc-test: %s, found %d' % (name, len(found))
    return found[0]


def command_lines(text):
    return [line for line in text.splitlines() if line.strip() and not line.startswith('#')]


def user_shell_env():
    """A user's shell: none of the ANSIBLE_* variables the Makefile or the tests set."""
    env = dict((key, value) for key, value in os.environ.items() if not key.startswith('ANSIBLE_'))
    env['NO_COLOR'] = '1'
    return env


def run_block(name, cwd=REPO, timeout=540, lab=False):
    """Runs the block as one bash script (-e: its first failing line fails it); stdout and stderr together.
    lab: the block uses the lab, run on the test's own (lab_instance.as_written_on_this_lab)."""
    text, env = doc_block(name), user_shell_env()
    if lab:
        text, env = lab_instance.as_written_on_this_lab(text, env)
    return subprocess.run(['bash', '-euo', 'pipefail', '-c', text], cwd=str(cwd), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=timeout)


def recap(output):
    """{host: {'ok': n, 'changed': n, ...}} for every PLAY RECAP line, a list per host in run order."""
    found = {}
    for host, counts in re.findall(r'^(\S+)\s+: (ok=.*)$', output, re.M):
        found.setdefault(host, []).append(dict((key, int(value)) for key, value in re.findall(r'(\w+)=(\d+)', counts)))
    return found
