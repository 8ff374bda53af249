"""Every module through a real ansible-playbook, and run_task's own process giving what Ansible gives.

Most integration tests run a module as its own process, the way Ansible's module wrapper runs it on the target
(helpers.ansible_run.run_module_process: a seventh of ansible-playbook's CPU). What that leaves out is Ansible's
side: the wrapper's packing of each module with the module_utils it imports, the arguments a controller adds, the
result it reads back. Here each module goes through ansible-playbook once, and one real call is made both ways.
"""
import os

from helpers.ansible_run import ACTION_PLUGINS, COLLECTION, REPO, run_module_process, run_tasks
from helpers.trusted_folder import trusted_dir  # noqa: F401  (the fixture)

MODULES = sorted(os.path.splitext(name)[0] for name in os.listdir(os.path.join(REPO, 'plugins', 'modules'))
                 if name.endswith('.py') and not name.startswith('_'))


def test_every_module_is_packed_with_what_it_imports_and_checks_its_arguments_through_ansible(tmp_path):
    # An option no module has: each module must load whole on the target (every import of its module_utils shipped
    # by the wrapper) to get as far as its argument spec, whose refusal comes back with the arguments it read.
    assert len(MODULES) > 10
    tasks = [{'name': module, COLLECTION + module: {'no_such_option': 1}, 'ignore_errors': True}
             for module in MODULES]
    results = run_tasks(tmp_path, tasks, name='every-module')
    for module in MODULES:
        result = results[module]
        assert result.failed and 'module_stderr' not in result and result.get('msg'), (module, result)
        if module in ACTION_PLUGINS:
            # Its action plugin checks the arguments on the controller, in the module's words.
            assert 'no_such_option' in result['msg'] or 'missing required' in result['msg'], (module, result['msg'])
        else:
            assert 'module_args' in result.get('invocation', {}), (module, result)


def test_a_module_run_as_its_own_process_returns_what_ansible_returns(tmp_path, trusted_dir):
    args = {'state': 'listed', 'folder': str(trusted_dir / 'guard')}
    through_ansible = run_tasks(tmp_path, [{'name': 'list', COLLECTION + 'sglang_revisions': args}],
                                name='ansible')['list']
    direct = run_module_process(tmp_path, 'sglang_revisions', args, name='direct')
    assert not through_ansible.failed and not direct.failed, (through_ansible, direct)
    assert through_ansible['count'] == 0 and through_ansible['revisions'] == []
    # Ansible adds what it knows of the run (_ansible_no_log and the like); the module's own keys are the same.
    module_keys = set(direct)
    assert module_keys <= set(through_ansible), module_keys - set(through_ansible)
    assert {key: through_ansible[key] for key in module_keys} == dict(direct)
    # A failure and a check mode run, both ways.
    bad = dict(args, folder='relative/guard')
    failed = run_tasks(tmp_path, [{'name': 'bad', COLLECTION + 'sglang_revisions': bad, 'ignore_errors': True}],
                       name='ansible-bad', check=True)['bad']
    direct_failed = run_module_process(tmp_path, 'sglang_revisions', bad, check=True, name='direct-bad')
    assert failed.failed and direct_failed.failed and failed['msg'] == direct_failed['msg'], (failed, direct_failed)
