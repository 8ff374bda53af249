"""Runs the collection's action plugins in-process: a real templar over the task variables, a stand-in task."""
import os
from unittest import mock

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.template import Templar

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))


@pytest.fixture
def run_action():
    def run(action_class, task_vars, args=None, check_mode=False):
        task = mock.MagicMock(args=args or {}, check_mode=check_mode, async_val=0, diff=False)
        loader = DataLoader()
        action = action_class(task, mock.MagicMock(), PlayContext(), loader, Templar(loader=loader, variables=task_vars),
                              None)
        # As Ansible's search: a path as given, a name in the role's folder of that kind.
        action._find_needle = lambda folder, name: (name if os.path.isabs(name)
                                                    else os.path.join(REPO, 'roles', 'sglang', folder, name))
        return action.run(task_vars=task_vars)
    return run
