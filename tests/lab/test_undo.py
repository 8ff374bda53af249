"""playbooks/undo.yml against the embedded lab (docs/undo.md): gpu2's old server (unpatched, as lab/seed.yml deploys it)
redeployed with its patch, then with another launch setting, then undone to the revision before both, byte for byte,
through the same window as a redeploy.

The lab's revisions already hold what lab/lab up's seeding redeploy and earlier lab files recorded: the numbers here
are relative to the latest found. The file leaves gpu2 as the lab left it (patched, the lab's settings, in the
router): a last plain redeploy patches it again.
"""
import json
import os
import subprocess
import urllib.request

from helpers.ansible_run import run_playbook
from helpers.lab_strays import PODMAN_ENV
from helpers import lab_instance

WORKER = 'srt/speculative/eagle_worker.py'
LAUNCH = '/etc/sglang/launch.json'
REVISIONS = '/var/lib/gpuops-sglang/sglang/revisions'
# lab/seed.yml's settings: the old server.
SEED = {'sglang_patch_file': '', 'sglang_dynamic_spec_enabled': False}
PATCH = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                     'files', 'eagle_dynamic_spec_threshold.diff')


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
    """The host's sglang as it ships (lab/lab up's seeding redeploy patched it): the patch reverted by hand."""
    with open(PATCH, 'rb') as diff:
        subprocess.run(['podman', 'exec', '-i', host.container, 'patch', '-R', '-p1', '-s', '--no-backup-if-mismatch',
                        '-d', host.site_packages], stdin=diff, check=True, env=PODMAN_ENV)


def test_an_undo_puts_the_revision_before_two_redeploys_back_byte_for_byte(lab, redeploy, tmp_path):
    gpu2 = lab['gpu2']

    def undo(extravars=None, name='undo', limit='gpu2', cmdline=None):
        return run_playbook(tmp_path, 'playbooks/undo.yml', lab_instance.inventory(), extravars, name=name,
                            limit=limit, cmdline=cmdline)

    # The old server, as lab/seed.yml deploys it: sglang unpatched, no dynamic speculation.
    unpatch(gpu2)
    seeded = redeploy(SEED, name='seed', limit='gpu2')
    assert seeded.rc == 0, seeded.stdout[-3000:]
    before = served(gpu2)
    target = revisions(gpu2)[-1]
    patched = redeploy(name='patch', limit='gpu2')
    assert patched.rc == 0, patched.stdout[-3000:]
    assert report('gpu2')['status'] == 'redeployed' and report('gpu2')['patch'] == 'applied now'
    first = revisions(gpu2)[-1]
    assert first == target + 1
    redeployed = served(gpu2)
    flags = redeploy({'sglang_max_running_requests': 48}, name='flags', limit='gpu2')
    assert flags.rc == 0, flags.stdout[-3000:]
    assert gpu2.server_info()['max_running_requests'] == 48
    assert revisions(gpu2)[-1] == first + 1
    changed = served(gpu2)
    assert all(changed[path] != before[path] for path in before), 'the redeploys changed neither file'
    pid = gpu2.server_pid()

    # Without --limit: refused before anything runs, naming what to do.
    everything = undo(name='no-limit', limit=None)
    assert everything.rc != 0 and 'give --limit' in everything.stdout, everything.stdout[-3000:]
    # Check mode: says what it would put back, and changes nothing.
    dry = undo({'sglang_undo_to': target}, name='check', cmdline='--check')
    assert dry.rc == 0, dry.stdout[-3000:]
    said = [event['event_data']['res'].get('msg', '') for event in dry.events if event.get('event') == 'runner_on_ok'
            and event['event_data'].get('task', '').startswith("Show each server's undo")]
    assert len(said) == 1 and said[0].startswith('gpu2: would put back revision %d (the latest was %d): write '
                                                 % (target, first + 1)), said
    assert served(gpu2) == changed and gpu2.server_pid() == pid and revisions(gpu2)[-1] == first + 1

    undone = undo({'sglang_undo_to': target})
    assert undone.rc == 0, undone.stdout[-3000:]
    written = report('gpu2')
    assert written['status'] == 'undone' and written['healthy'] is True, written['reason']
    assert written['undo']['target'] == target and written['undo']['latest'] == first + 1
    assert set(written['undo']['files']) >= set(before)
    assert written['reasons'] == ['undo to revision %d' % target]
    assert served(gpu2) == before
    assert gpu2.healthy() and gpu2.server_pid() != pid
    assert gpu2.server_info()['max_running_requests'] == 64
    assert lab_instance.server_url('gpu2') in router_workers()
    # The undo is a revision of its own, so it can be undone in turn; revisions.yml lists it.
    assert revisions(gpu2)[-1] == first + 2
    listed = run_playbook(tmp_path, 'playbooks/revisions.yml', lab_instance.inventory(), name='listed', limit='gpu2')
    summed = [event['event_data']['res'].get('msg', '') for event in listed.events if event.get('event') == 'runner_on_ok'
              and event['event_data'].get('task') == 'Sum it up']
    assert listed.rc == 0 and len(summed) == 1 and 'the latest %d of' % (first + 2) in summed[0], summed

    # As the lab was: patched again by a plain redeploy.
    back = redeploy(name='back', limit='gpu2')
    assert back.rc == 0, back.stdout[-3000:]
    assert report('gpu2')['status'] == 'redeployed' and served(gpu2) == redeployed
