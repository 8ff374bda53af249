"""playbooks/undo.yml's --limit through real Ansible (issue 46 review, item 5): an undo acts on the servers it names,
so a limit that is not a list of inventory host names (a group, all, a pattern) is refused in its first play, on
every host it matched, before anything of the redeploy's plays runs; host names pass on to the next rule (a server
group undone as a whole). Local connections; nothing is stopped or read."""
import json

import pytest

from helpers.ansible_run import TARGET_PYTHON, run_playbook

pytestmark = pytest.mark.slow

NOT_HOSTS = ('--limit %s is not a list of inventory host names (%s: not the name of one host). Give the servers to undo'
             ' by their inventory names, separated by commas (--limit gpu2, or --limit gpu2a,gpu2b for a server group),'
             ' never a group, all, or a pattern (gpu*, !x, x:&y, x:y, x[0:2], ~regex, @file); nothing was stopped')


def inventory(tmp_path):
    local = {'ansible_connection': 'local', 'ansible_python_interpreter': TARGET_PYTHON}
    path = tmp_path / 'hosts.json'
    path.write_text(json.dumps({'gpu': {'hosts': {
        'gpu1': local, 'gpu2a': dict(local, sglang_server_group='g2'), 'gpu2b': dict(local, sglang_server_group='g2')}}}))
    return str(path)


def refusals(run):
    return {host: run.failure_messages(host) for host in ('gpu1', 'gpu2a', 'gpu2b') if run.failure_messages(host)}


@pytest.mark.parametrize('limit, matched, named', [
    ('all', ['gpu1', 'gpu2a', 'gpu2b'], 'all'),
    ('gpu', ['gpu1', 'gpu2a', 'gpu2b'], 'gpu'),
    ('gpu2*', ['gpu2a', 'gpu2b'], 'gpu2*'),
    ('gpu1,!gpu2a', ['gpu1'], '!gpu2a'),
    ('gpu2a:&gpu', ['gpu2a'], 'gpu2a:&gpu'),
    ('gpu2a:gpu2b', ['gpu2a', 'gpu2b'], 'gpu2a:gpu2b'),
    ('gpu[1:2]', ['gpu2a', 'gpu2b'], 'gpu[1:2]'),
    ('~gpu2.*, gpu1', ['gpu1', 'gpu2a', 'gpu2b'], '~gpu2.*'),
    ('gpu1,gpu2*,gpu', ['gpu1', 'gpu2a', 'gpu2b'], 'gpu2*, gpu'),
])
def test_a_limit_that_is_not_host_names_is_refused_in_the_first_play_naming_what_to_give(tmp_path, limit, matched, named):
    run = run_playbook(tmp_path, 'playbooks/undo.yml', inventory(tmp_path), limit=limit)
    assert run.rc != 0
    found = refusals(run)
    assert sorted(found) == matched, found
    assert all(messages == [NOT_HOSTS % (limit, named)] for messages in found.values()), found
    assert not [event for event in run.events if event.get('event') == 'playbook_on_play_start'
                and event['event_data'].get('play') != 'Refuse an undo that is not asked for servers by name'], \
        'only the first play started'


def test_host_names_pass_to_the_next_rule(tmp_path):
    run = run_playbook(tmp_path, 'playbooks/undo.yml', inventory(tmp_path), limit='gpu2a')
    assert run.rc != 0
    assert refusals(run) == {'gpu2a': ['server group g2 is undone as a whole, but --limit gpu2a leaves out its node(s)'
                                       ' gpu2b: add them to --limit; nothing was stopped']}
