"""The real ansible-rulebook running this collection's undo rulebook (extensions/eda/rulebooks/undo_on_alert.yml) on a
loopback port, and Alertmanager-shaped alerts to POST to it: tests/integration/test_eda_undo_rulebook.py (with a
stand-in for the undo playbook) and tests/lab/test_undo.py (with the lab's inventory and the real undo)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

from helpers.ansible_run import ANSIBLE_ENV, REPO
from helpers.simulated import free_port, wait_for

RULEBOOK = os.path.join(REPO, 'extensions', 'eda', 'rulebooks', 'undo_on_alert.yml')
BIN = os.path.dirname(sys.executable)


class Rulebook:
    """The real ansible-rulebook running the undo rulebook on a free loopback port, with `inventory` and the rulebook
    variables `variables` (gpuops_eda_port added), its output in `log`. tests/lab/test_undo.py starts it too, with
    the lab's inventory and the real playbooks/undo.yml; start it early and wait_listening() before the first
    notify(): the Java runtime's start (about 5 s) then overlaps other work."""

    def __init__(self, root, inventory, variables):
        self.port = free_port()
        self.log = root / 'ansible-rulebook.log'
        (root / 'vars.yml').write_text(json.dumps(dict(variables, gpuops_eda_port=self.port)))
        env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get('PATH', ''), **ANSIBLE_ENV)
        with open(self.log, 'w') as log:
            self.process = subprocess.Popen(
                [os.path.join(BIN, 'ansible-rulebook'), '--rulebook', RULEBOOK, '--inventory', str(inventory),
                 '--vars', str(root / 'vars.yml')],
                cwd=str(root), env=env, stdout=log, stderr=subprocess.STDOUT)

    def wait_listening(self):
        wait_for(self.listening, timeout=90, what='ansible-rulebook listening (log: %s)' % self.log)

    def listening(self):
        assert self.process.poll() is None, self.log.read_text()
        try:
            with urllib.request.urlopen('http://127.0.0.1:%d/' % self.port, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def notify(self, *alerts):
        """POST one Alertmanager webhook notification (version 4) holding `alerts`."""
        body = {'version': '4', 'groupKey': '{}:{alertname="SGLangRegressed"}', 'truncatedAlerts': 0,
                'status': 'firing' if any(alert['status'] == 'firing' for alert in alerts) else 'resolved',
                'receiver': 'gpuops-undo', 'groupLabels': {}, 'commonLabels': {}, 'commonAnnotations': {},
                'externalURL': 'http://alertmanager.invalid', 'alerts': list(alerts)}
        request = urllib.request.Request('http://127.0.0.1:%d/alerts' % self.port, data=json.dumps(body).encode(),
                                         headers={'Content-Type': 'application/json'}, method='POST')
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 202

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def alert(host=None, status='firing', action='undo', name='SGLangThroughputRegressed', fingerprint='3f2a1c0d9e8b7a65'):
    labels = {'alertname': name, 'severity': 'critical', 'instance': '10.0.0.12:30000'}
    if host is not None:
        labels['gpuops_host'] = host
    if action is not None:
        labels['gpuops_action'] = action
    return {'status': status, 'labels': labels,
            'annotations': {'summary': 'gen_throughput fell below the last revision\'s'},
            'startsAt': '2026-12-05T10:00:00Z', 'endsAt': '0001-01-01T00:00:00Z' if status == 'firing' else
            '2026-12-05T10:20:00Z', 'generatorURL': 'http://prometheus.invalid/graph', 'fingerprint': fingerprint}
