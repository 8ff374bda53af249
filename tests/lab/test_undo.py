"""playbooks/undo.yml and the undo rulebook against the embedded lab (docs/undo.md, issue 46), all of it under steady
load through the lab's router.

gpu2's old server (unpatched, as lab/seed.yml deploys it) starts without revision history, so the numbers are
absolute: redeployed with its patch and another launch setting (revisions 1, what it found, and 2), then with the
lab's own settings (3, the lab's state), then undone to revision 1 (4), byte for byte, through the same window as a
redeploy. An undo an alert starts is refused then (the latest revision is an undo: an alert never undoes an undo).
gpu2 is redeployed to the lab's state (5) and with another launch setting (6); then the real ansible-rulebook (its
Java runtime, this collection's alertmanager source, the lab's inventory) is fed Alertmanager's webhook: an alert for
a host not in the inventory runs nothing, one for gpu2 runs the real playbooks/undo.yml --limit gpu2 with its default
target, the revision before the latest (5), as revision 7. That leaves gpu2 as the lab left it (patched, the lab's
settings, in the router): seven windows in all.
"""
import json
import os
import re
import subprocess
import urllib.request

from helpers.ansible_run import REPO, run_playbook
from helpers.eda import Rulebook, alert
from helpers.lab_strays import PODMAN_ENV
from helpers.load import SteadyLoad
from helpers.simulated import wait_for
from helpers import lab_instance
# The rulebook as its own test starts it (with a stand-in playbook there): one way to run ansible-rulebook.

WORKER = 'srt/speculative/eagle_worker.py'
LAUNCH = '/etc/sglang/launch.json'
REVISIONS = '/var/lib/gpuops-sglang/sglang/revisions'
# lab/seed.yml's settings: the old server.
SEED = {'sglang_patch_file': '', 'sglang_dynamic_spec_enabled': False}
PATCH = os.path.join(REPO, 'files', 'eagle_dynamic_spec_threshold.diff')
ANSI = re.compile(r'\x1b\[[0-9;]*m')


def revisions(host):
    """The revision numbers kept on the host, oldest first."""
    return sorted(int(name) for name in host.exec_('ls', REVISIONS).split() if name.isdigit())


def report(name):
    with open(os.path.join(lab_instance.reports_dir(), name + '.json')) as handle:
        return json.load(handle)


def router_workers():
    with urllib.request.urlopen(lab_instance.router_url() + '/workers', timeout=10) as response:
        return sorted(worker['url'] for worker in json.load(response)['workers'])


def served(host):
    """The files an undo must put back, and how: the patched sglang file's and the launch file's bytes and stat."""
    worker = host.sglang_file(WORKER)
    return {path: (host.exec_('base64', '-w0', path), host.exec_('stat', '-c', '%a %U %G', path).strip())
            for path in (worker, LAUNCH)}


def unpatch(host):
    """The host's sglang as it ships (the lab's seeding redeploy patched it): the patch reverted by hand."""
    with open(PATCH, 'rb') as diff:
        subprocess.run(['podman', 'exec', '-i', host.container, 'patch', '-R', '-p1', '-s', '--no-backup-if-mismatch',
                       '-d', host.site_packages], stdin=diff, check=True, env=PODMAN_ENV)


def recaps(log):
    """Each playbook run's recap in ansible-rulebook's output: the host lines after each PLAY RECAP."""
    text = ANSI.sub('', log.read_text())
    return [[line.split()[0] for line in part.split('\n\n')[0].splitlines()[1:] if line.strip()]
            for part in text.split('PLAY RECAP ')[1:]]


def test_an_undo_puts_revision_1_back_byte_for_byte_and_an_alert_undoes_the_last_redeploy_only_under_load(lab, redeploy, tmp_path):
    gpu1, gpu2 = lab['gpu1'], lab['gpu2']
    neighbour = gpu1.server_pid()
    (tmp_path / 'eda').mkdir()
    # Started now, so that its Java runtime's start overlaps the redeploys; it listens on a port of its own.
    rulebook = Rulebook(tmp_path / 'eda', os.path.join(REPO, lab_instance.inventory()), {
        'gpuops_undo_hosts': ['gpu1', 'gpu2'], 'gpuops_undo_playbook': os.path.join(REPO, 'playbooks', 'undo.yml')})

    def undo(extravars=None, name='undo', limit='gpu2', cmdline=None):
        return run_playbook(tmp_path, 'playbooks/undo.yml', lab_instance.inventory(), extravars, name=name,
                            limit=limit, cmdline=cmdline)

    try:
        with SteadyLoad([lab_instance.router_url()]) as load:
            # The old server, as lab/seed.yml deploys it (sglang unpatched, no dynamic speculation), with no history.
            unpatch(gpu2)
            seeded = redeploy(SEED, name='seed', limit='gpu2')
            assert seeded.rc == 0, seeded.stdout[-3000:]
            gpu2.exec_('rm', '-rf', REVISIONS)
            before = served(gpu2)

            patched = redeploy({'sglang_max_running_requests': 48}, name='patch', limit='gpu2')
            assert patched.rc == 0, patched.stdout[-3000:]
            assert report('gpu2')['status'] == 'redeployed' and report('gpu2')['patch'] == 'applied now'
            assert gpu2.server_info()['max_running_requests'] == 48
            assert revisions(gpu2) == [1, 2]
            lab_settings = redeploy(name='lab-settings', limit='gpu2')
            assert lab_settings.rc == 0, lab_settings.stdout[-3000:]
            assert gpu2.server_info()['max_running_requests'] == 64
            assert revisions(gpu2) == [1, 2, 3]
            as_the_lab_left_it = served(gpu2)
            assert all(as_the_lab_left_it[path] != before[path] for path in before), 'the redeploys changed neither file'
            pid = gpu2.server_pid()

            # Without --limit: refused before anything runs, naming what to do.
            everything = undo(name='no-limit', limit=None)
            assert everything.rc != 0 and 'give --limit' in everything.stdout, everything.stdout[-3000:]
            # Check mode: says what it would put back, and changes nothing.
            dry = undo({'sglang_undo_to': 1}, name='check', cmdline='--check')
            assert dry.rc == 0, dry.stdout[-3000:]
            said = [event['event_data']['res'].get('msg', '') for event in dry.events
                    if event.get('event') == 'runner_on_ok'
                    and event['event_data'].get('task', '').startswith("Show each server's undo")]
            assert len(said) == 1 and said[0].startswith('gpu2: would put back revision 1 (the latest was 3): write '), said
            assert served(gpu2) == as_the_lab_left_it and gpu2.server_pid() == pid and revisions(gpu2) == [1, 2, 3]

            undone = undo({'sglang_undo_to': 1})
            assert undone.rc == 0, undone.stdout[-3000:]
            written = report('gpu2')
            assert written['status'] == 'undone' and written['healthy'] is True, written['reason']
            assert written['undo']['target'] == 1 and written['undo']['latest'] == 3
            assert set(written['undo']['files']) >= set(before)
            assert written['reasons'] == ['undo to revision 1']
            assert served(gpu2) == before
            assert gpu2.healthy() and gpu2.server_pid() != pid
            assert gpu2.server_info()['max_running_requests'] == 64
            assert lab_instance.server_url('gpu2') in router_workers()
            # The undo is a revision of its own, so it can be undone in turn; revisions.yml lists it.
            assert revisions(gpu2) == [1, 2, 3, 4]
            listed = run_playbook(tmp_path, 'playbooks/revisions.yml', lab_instance.inventory(), name='listed',
                                  limit='gpu2')
            summed = [event['event_data']['res'].get('msg', '') for event in listed.events
                      if event.get('event') == 'runner_on_ok' and event['event_data'].get('task') == 'Sum it up']
            assert listed.rc == 0 and len(summed) == 1 and summed[0].startswith(
                'gpu2: 4 revision(s) (1, 2, 3, 4), the latest 4 of'), summed

            # An alert never undoes an undo (the rulebook would otherwise flip a server between two releases while
            # its alert keeps firing): refused before anything stops, naming the latest revision.
            pid = gpu2.server_pid()
            flipped = undo({'gpuops_undo_trigger': 'alertmanager'}, name='alert-after-undo')
            assert flipped.rc != 0 and 'an alert undoes a redeploy, never an undo: the latest revision 4' in \
                flipped.stdout, flipped.stdout[-3000:]
            assert gpu2.server_pid() == pid and revisions(gpu2) == [1, 2, 3, 4] and served(gpu2) == before

            # The lab's state again (5), then another launch setting (6): what the alert below undoes.
            again = redeploy(name='lab-settings-again', limit='gpu2')
            assert again.rc == 0, again.stdout[-3000:]
            assert served(gpu2) == as_the_lab_left_it
            other = redeploy({'sglang_max_running_requests': 48}, name='before-the-alert', limit='gpu2')
            assert other.rc == 0, other.stdout[-3000:]
            # The last sglang_revisions_kept (5) are kept: revision 1 is pruned now.
            assert revisions(gpu2) == [2, 3, 4, 5, 6]

            # The rulebook, fed Alertmanager's webhook: a host not in the inventory, then gpu2. Actions run one at
            # a time in the order the alerts came, so once gpu2's undo has ended the first alert has been decided.
            rulebook.wait_listening()
            pid = gpu2.server_pid()
            rulebook.notify(alert('gpu9', fingerprint='9999aaaa'))
            rulebook.notify(alert('gpu2'))
            wait_for(lambda: recaps(rulebook.log), timeout=240, what='the undo of gpu2 to end (log: %s)' % rulebook.log)
            assert recaps(rulebook.log) == [['gpu2']], rulebook.log.read_text()[-3000:]
            assert 'gpuops undo ignored: alert SGLangThroughputRegressed (9999aaaa) names host gpu9' in \
                rulebook.log.read_text()
            alerted = report('gpu2')
            assert alerted['status'] == 'undone' and alerted['healthy'] is True, alerted['reason']
            assert alerted['undo']['target'] == 5 and alerted['undo']['latest'] == 6
            assert revisions(gpu2) == [3, 4, 5, 6, 7]
            assert served(gpu2) == as_the_lab_left_it
            assert gpu2.healthy() and gpu2.server_pid() != pid
            assert gpu2.server_info()['max_running_requests'] == 64
            assert lab_instance.server_url('gpu2') in router_workers()
            assert gpu1.server_pid() == neighbour
    finally:
        rulebook.stop()
    assert sum(load.answered.values()) > 0 and not load.failed, (dict(load.answered), dict(load.failed), load.failures)
