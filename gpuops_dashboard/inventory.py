"""The inventory's gpu hosts and what each runs now: health, speculative settings, patch, last report.

Host variables are resolved by Ansible itself (an ad-hoc `debug` through ansible-runner, nothing
connects to a host), so templated values such as `sglang_report_dir: "{{ lab_state_dir }}/reports"`
come out as the playbook sees them. The servers are then asked directly over HTTP.
"""
import json
import os
import tempfile
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import ansible_runner

from gpuops_dashboard.redeploy import ansible_environment, _inventory_path

# What a dashboard shows of the running server's /server_info (the speculative settings and the cap).
SERVER_INFO_KEYS = ('speculative_algorithm', 'speculative_num_steps', 'speculative_eagle_topk',
                    'speculative_num_draft_tokens', 'speculative_adaptive', 'max_running_requests',
                    'disable_overlap_schedule')
DYNAMIC_SPEC_ENV = 'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE'
_RESOLVE = ('{{ {"address": sglang_host | default("127.0.0.1"), "port": sglang_port | default(30000), '
            '"report_dir": sglang_report_dir | default(""), '
            '"rollback_deadline": sglang_rollback_deadline | default(1800), '
            '"service_manager": sglang_service_manager | default("auto"), '
            '"pve_node": pve_node | default(none), "pve_vmid": pve_vmid | default(none), '
            '"server_group": sglang_server_group | default(""), "node_rank": sglang_node_rank | default(none)} }}')


def resolve_hosts(inventory, pattern='gpu'):
    """{host: {address, port, report_dir, rollback_deadline, ...}} for the hosts of `pattern`."""
    with tempfile.TemporaryDirectory(prefix='gpuops-inventory-') as private:
        runner = ansible_runner.run(
            private_data_dir=private, host_pattern=pattern, module='ansible.builtin.debug',
            module_args='msg=%s' % _RESOLVE, inventory=_inventory_path(inventory), cmdline='-c local',
            envvars=ansible_environment(), quiet=True, settings={'suppress_ansible_output': True})
        hosts = {}
        for event in runner.events:
            if event.get('event') == 'runner_on_ok':
                data = event['event_data']
                hosts[data['host']] = data['res']['msg']
        if runner.rc != 0 or not hosts:
            raise RuntimeError('could not resolve the hosts of %s in %s (rc %s): %s'
                               % (pattern, inventory, runner.rc, runner.stdout.read()[-1000:]))
    return dict(sorted(hosts.items()))


def _get_json(url, timeout):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, json.load(response)


def server_state(address, port, timeout=2.0):
    """Ask the server itself: /health (200 = serving) and the settings /server_info reports."""
    base = 'http://%s:%s' % (address, port)
    state = {'url': base, 'healthy': False, 'health': None, 'settings': None, 'pid': None}
    try:
        with urllib.request.urlopen(base + '/health', timeout=timeout) as response:
            state['health'] = response.status
            state['healthy'] = response.status == 200
    except urllib.error.HTTPError as error:
        state['health'] = error.code
    except OSError as error:
        state['health'] = 'unreachable: %s' % getattr(error, 'reason', error)
        return state
    try:
        _, info = _get_json(base + '/server_info', timeout)
    except (OSError, ValueError):
        return state
    settings = dict((key, info.get(key)) for key in SERVER_INFO_KEYS if key in info)
    environment = info.get('environment') or {}
    if DYNAMIC_SPEC_ENV in environment:
        settings[DYNAMIC_SPEC_ENV] = environment[DYNAMIC_SPEC_ENV]
    state['settings'] = settings
    internal = info.get('internal_states') or [{}]
    state['pid'] = internal[0].get('pid') if isinstance(internal[0], dict) else None
    return state


def last_report(report_dir, host):
    """The host's last report file (written by every redeploy, also as the window opens), or None."""
    if not report_dir:
        return None
    path = os.path.join(report_dir, '%s.json' % host)
    try:
        with open(path) as handle:
            report = json.load(handle)
    except (OSError, ValueError):
        return None
    report['_mtime'] = os.path.getmtime(path)
    return report


class HostDirectory(object):
    """Resolves the inventory once (a second or two), then answers host state from the live servers."""

    def __init__(self, inventory, pattern='gpu'):
        self.inventory = inventory
        self.pattern = pattern
        self._hosts = None
        self._lock = threading.Lock()

    def hosts(self, refresh=False):
        with self._lock:
            if self._hosts is None or refresh:
                self._hosts = resolve_hosts(self.inventory, self.pattern)
            return self._hosts

    def state(self, refresh=False):
        hosts = self.hosts(refresh)

        def one(item):
            name, variables = item
            report = last_report(variables.get('report_dir'), name)
            server = server_state(variables['address'], variables['port'])
            return {'name': name, 'address': variables['address'], 'port': variables['port'],
                    'healthy': server['healthy'], 'health': server['health'], 'pid': server['pid'],
                    'settings': server['settings'],
                    'patch_sha256': (report or {}).get('patch_sha256'),
                    'pve_node': variables.get('pve_node'), 'pve_vmid': variables.get('pve_vmid'),
                    'rollback_deadline': variables.get('rollback_deadline'),
                    # A node of a server group (one server over several hosts; only rank 0 serves HTTP).
                    'server_group': variables.get('server_group') or '', 'node_rank': variables.get('node_rank'),
                    'last_report': report}
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(hosts)))) as pool:
            return list(pool.map(one, hosts.items()))

    def reports_since(self, names, since):
        """Report files written at or after `since` (epoch seconds): what a cancelled run left per host."""
        hosts = self.hosts()
        found = {}
        for name in names:
            report = last_report(hosts.get(name, {}).get('report_dir'), name)
            if report and report['_mtime'] >= since:
                found[name] = report
        return found
