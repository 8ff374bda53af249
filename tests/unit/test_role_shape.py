"""The roles stay readable: a task file reads as one list of steps (at most 120 lines: split a longer one along its
seams, as tune.yml and tune_window.yml are), and vars/main.yml holds names and paths, not decisions (at most 60)."""
from __future__ import annotations

import glob
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASK_FILE_LINES = 120
VARS_LINES = 60
TASK_FILES = sorted(glob.glob(os.path.join(REPO, 'roles', '*', 'tasks', '*.yml')))


def lines_of(path: str) -> int:
    with open(path) as handle:
        return sum(1 for dummy in handle)


def test_the_roles_have_task_files():
    assert TASK_FILES


@pytest.mark.parametrize('path', TASK_FILES, ids=lambda path: os.path.relpath(path, REPO))
def test_a_task_file_is_at_most_120_lines(path):
    assert lines_of(path) <= TASK_FILE_LINES, '%s has %d lines: split it along its seams (import_tasks)' % (
        os.path.relpath(path, REPO), lines_of(path))


def test_the_role_vars_are_at_most_60_lines():
    path = os.path.join(REPO, 'roles', 'sglang', 'vars', 'main.yml')
    assert lines_of(path) <= VARS_LINES, (
        'roles/sglang/vars/main.yml has %d lines: names and paths only' % lines_of(path))
