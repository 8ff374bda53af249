"""The undo rulebook (extensions/eda/rulebooks/undo_on_alert.yml) run by the real ansible-rulebook.

Alertmanager-shaped notifications are POSTed on loopback to this collection's alertmanager event source; the
rulebook's playbook is a stand-in that records, for every host it runs on, its limit and extra vars, and marks
a run in progress, so these tests prove the rulebook's rules (which alert undoes which host, when, one at a
time), not the undo itself (tests/lab/test_undo.py runs the rulebook with the real undo on the lab).
ansible-rulebook and its Java runtime start once per worker (about 5 s).
"""
import json
import sys

import pytest

from helpers.eda import Rulebook, alert
from helpers.simulated import wait_for

pytestmark = pytest.mark.slow

# The inventory's hosts, all of which the rulebook may undo; gpu9 is in neither.
HOSTS = ['gpu1', 'gpu2', 'gpu3', 'gpu4', 'gpu5']
# Each run appends a `start` line (with `overlap` when another run's mark was still there) and an `end` line.
RECORDER = r'''
import json, os, sys
record, marker, phase, fields = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
fields['phase'] = phase
if phase == 'start':
    try:
        os.mkdir(marker)
    except FileExistsError:
        fields['overlap'] = True
else:
    os.rmdir(marker)
with open(record, 'a') as handle:
    handle.write(json.dumps(fields) + '\n')
'''
STANDIN = '''
- name: Stand-in for playbooks/undo.yml
  hosts: all
  gather_facts: false
  tasks:
    - name: Record the start of this host's run
      ansible.builtin.command:
        argv: [{python}, {recorder}, {record}, {marker}, start, "{{{{ fields | to_json }}}}"]
      vars:
        fields: {{host: "{{{{ inventory_hostname }}}}", limit: "{{{{ ansible_limit }}}}",
                  trigger: "{{{{ gpuops_undo_trigger }}}}", rule: "{{{{ ansible_eda.rule }}}}"}}
    - name: Record its end
      ansible.builtin.command:
        argv: [{python}, {recorder}, {record}, {marker}, end, '{{{{ {{"host": inventory_hostname}} | to_json }}}}']
'''


class RecordingRulebook(Rulebook):
    """The rulebook with the stand-in for its playbook, on an inventory of HOSTS (local connection)."""

    def __init__(self, root):
        self.record = root / 'record.jsonl'
        (root / 'recorder.py').write_text(RECORDER)
        playbooks = root / 'standin'
        playbooks.mkdir()
        (playbooks / 'undo.yml').write_text(STANDIN.format(
            python=json.dumps(sys.executable), recorder=json.dumps(str(root / 'recorder.py')),
            record=json.dumps(str(self.record)), marker=json.dumps(str(root / 'undo-running'))))
        (root / 'hosts.yml').write_text(json.dumps({'all': {'hosts': {
            host: {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable} for host in HOSTS}}}))
        super().__init__(root, root / 'hosts.yml',
                         {'gpuops_undo_hosts': HOSTS, 'gpuops_undo_playbook': str(playbooks / 'undo.yml')})
        self.wait_listening()

    def records(self):
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines()]

    def wait_for_run_of(self, host, runs_before):
        """Wait until a run of `host` started after the first `runs_before` records has ended; the new records."""
        def ended():
            return any(line == {'host': host, 'phase': 'end'} for line in self.records()[runs_before:])
        wait_for(ended, timeout=60, what='the undo of %s to end (log: %s)' % (host, self.log))
        return self.records()[runs_before:]


@pytest.fixture(scope='module')
def rulebook(tmp_path_factory):
    running = RecordingRulebook(tmp_path_factory.mktemp('eda-undo'))
    yield running
    running.stop()


def test_a_firing_undo_alert_runs_the_undo_for_that_host_only(rulebook):
    before = len(rulebook.records())
    rulebook.notify(alert('gpu1'))
    runs = rulebook.wait_for_run_of('gpu1', before)
    assert runs == [{'host': 'gpu1', 'limit': 'gpu1', 'trigger': 'alertmanager', 'rule': 'Undo the server an alert names',
                     'phase': 'start'},
                    {'host': 'gpu1', 'phase': 'end'}]


def test_unknown_hosts_resolved_and_other_alerts_undo_nothing_and_unknown_hosts_are_logged(rulebook):
    before = len(rulebook.records())
    rulebook.notify(alert('gpu9', name='SGLangLatencyRegressed', fingerprint='9999aaaa'),
                    alert(None, name='SGLangNoHostLabel'),
                    alert('gpu2', status='resolved'),
                    alert('gpu2', action=None, name='SGLangPageOnly'),
                    alert('gpu2', action='redeploy'),
                    alert('gpu2:30000'),
                    alert('gpu2,gpu3'),
                    alert('all'))
    # Events are matched in the order they came and actions run one at a time in that order: once this later
    # alert's undo has ended, every alert above has been decided.
    rulebook.notify(alert('gpu3'))
    runs = rulebook.wait_for_run_of('gpu3', before)
    assert [run['host'] for run in runs] == ['gpu3', 'gpu3']
    log = rulebook.log.read_text()
    assert 'gpuops undo ignored: alert SGLangLatencyRegressed (9999aaaa) names host gpu9' in log
    assert 'names host (no gpuops_host label)' in log
    assert 'names host gpu2,gpu3, which is not in gpuops_undo_hosts' in log
    assert 'names host all, which is not in gpuops_undo_hosts' in log


def test_alerts_for_one_host_undo_it_once_and_undos_run_one_at_a_time(rulebook):
    before = len(rulebook.records())
    # Two alerts on gpu4 in one notification, then Alertmanager's repeat of the first, and gpu5 after them.
    rulebook.notify(alert('gpu4'), alert('gpu4', name='SGLangLatencyRegressed', fingerprint='77aa'))
    rulebook.notify(alert('gpu4'))
    rulebook.notify(alert('gpu5'))
    runs = rulebook.wait_for_run_of('gpu5', before)
    assert [(run['host'], run['phase']) for run in runs] == [('gpu4', 'start'), ('gpu4', 'end'),
                                                             ('gpu5', 'start'), ('gpu5', 'end')]
    assert not [run for run in runs if run.get('overlap')]
