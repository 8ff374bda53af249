"""The inventory's gpu hosts and what each runs now: health, speculative settings, patch, last report.

Host variables are resolved by Ansible itself (an ad-hoc `debug` through ansible-runner, nothing
connects to a host), so templated values such as `sglang_report_dir: "{{ lab_state_dir }}/reports"`
come out as the playbook sees them. The servers are then asked directly over HTTP.

The address asked is the one the role itself uses for a server (the collection's sglang_reachable_host
filter: the inventory address when the server listens on every address, never 0.0.0.0), and /server_info
gets the inventory's API key (sglang_api_key) as a bearer token. A key Ansible cannot give the dashboard
(vault-encrypted without a vault password, or templated from a variable it cannot resolve) is not guessed:
the card says so, as it says "unauthorized" when the server answers 401; neither reads as "no speculative
decoding". The key stays in this process: never in a card, an answer or a file.
"""
import json
import os
import tempfile
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import ansible_runner

from gpuops_dashboard import speculation
from gpuops_dashboard.redeploy import ansible_environment, _inventory_path

# What a dashboard shows of the running server's /server_info (the speculative settings and the cap).
SERVER_INFO_KEYS = ('speculative_algorithm', 'speculative_num_steps', 'speculative_eagle_topk',
                    'speculative_num_draft_tokens', 'speculative_adaptive', 'max_running_requests',
                    'disable_overlap_schedule')
DYNAMIC_SPEC_ENV = 'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE'
# The role's own rule for where a server is reached (plugins/filter/sglang_reachable_host.py).
_ADDRESS = ('sglang_host | default("127.0.0.1") | gpuops.sglang.sglang_reachable_host(ansible_host | '
            'default(inventory_hostname))')
_RESOLVE = ('{{ {"address": ' + _ADDRESS + ', "port": sglang_port | default(30000), '
            '"report_dir": sglang_report_dir | default(""), '
            '"rollback_deadline": sglang_rollback_deadline | default(1800), '
            '"service_manager": sglang_service_manager | default("auto"), '
            '"pve_node": pve_node | default(none), "pve_vmid": pve_vmid | default(none), '
            '"server_group": sglang_server_group | default(""), "node_rank": sglang_node_rank | default(none)'
            '%s} }}')
# No default(): it would turn a key templated from a missing (vault) variable into "no key". A host without
# the variable has no key; one whose value cannot be resolved fails, and is resolved again without it.
_API_KEY = (', "api_key": (sglang_api_key if "sglang_api_key" in hostvars[inventory_hostname] else "") '
            '| string')


def _resolve(inventory, pattern, template):
    """({host: variables}, {host: failure message}, runner) of one ad-hoc debug of `template`."""
    # A private dir of its own (0700, removed at once): the events hold the resolved API key.
    with tempfile.TemporaryDirectory(prefix='gpuops-inventory-') as private:
        runner = ansible_runner.run(
            private_data_dir=private, host_pattern=pattern, module='ansible.builtin.debug',
            module_args='msg=%s' % template, inventory=_inventory_path(inventory), cmdline='-c local',
            envvars=ansible_environment(), quiet=True, settings={'suppress_ansible_output': True})
        resolved, failed = {}, {}
        for event in runner.events:
            data = event.get('event_data') or {}
            if event.get('event') == 'runner_on_ok':
                resolved[data['host']] = data['res']['msg']
            elif event.get('event') in ('runner_on_failed', 'runner_on_unreachable'):
                failed[data['host']] = str((data.get('res') or {}).get('msg', ''))[:500]
        tail = '' if resolved or failed else runner.stdout.read()[-1000:]
    return resolved, failed, (runner.rc, tail)


def resolve_hosts(inventory, pattern='gpu'):
    """{host: {address, port, report_dir, rollback_deadline, ..., api_key, api_key_error}} for `pattern`.

    api_key is the inventory's sglang_api_key ('' for none); where Ansible cannot give it (a vault without
    its password, a variable it cannot resolve), api_key is None and api_key_error says why.
    """
    hosts, failed, (rc, tail) = _resolve(inventory, pattern, _RESOLVE % _API_KEY)
    if failed:
        # The key is the only part that may need what the dashboard lacks: the rest again without it.
        again, still, (rc, tail) = _resolve(inventory, ','.join(sorted(failed)), _RESOLVE % '')
        for name, variables in again.items():
            variables.update(api_key=None, api_key_error='the inventory\'s sglang_api_key cannot be read here '
                             '(vault-encrypted, or templated from a variable the dashboard cannot resolve): %s'
                             % failed[name].split("resolving value for 'msg': ")[-1])
        hosts.update(again)
        failed = still
    if failed or not hosts:
        raise RuntimeError('could not resolve the hosts of %s in %s (rc %s): %s'
                           % (pattern, inventory, rc, '; '.join('%s: %s' % item for item in sorted(failed.items()))
                              or tail))
    for variables in hosts.values():
        variables.setdefault('api_key_error', None)
    return dict(sorted(hosts.items()))


def _get_json(url, timeout, api_key=None):
    request = urllib.request.Request(url)
    if api_key:
        request.add_header('Authorization', 'Bearer ' + api_key)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, json.load(response)


def _url_host(address):
    return '[%s]' % address if ':' in str(address) else address


def server_state(address, port, timeout=2.0, api_key=None, api_key_error=None):
    """Ask the server itself: /health (200 = serving) and the settings /server_info reports.

    /server_info gets `api_key` as a bearer token when there is one. `settings` is None when they are not
    known, and `settings_error` then says why (not serving, unauthorized, ...).
    """
    base = 'http://%s:%s' % (_url_host(address), port)
    state = {'url': base, 'healthy': False, 'health': None, 'settings': None, 'settings_error': None, 'pid': None}
    try:
        with urllib.request.urlopen(base + '/health', timeout=timeout) as response:
            state['health'] = response.status
            state['healthy'] = response.status == 200
    except urllib.error.HTTPError as error:
        state['health'] = error.code
    except OSError as error:
        state['health'] = 'unreachable: %s' % getattr(error, 'reason', error)
        state['settings_error'] = 'not asked: the server is unreachable'
        return state
    try:
        _, info = _get_json(base + '/server_info', timeout, api_key)
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            state['settings_error'] = 'unauthorized: /server_info answered %d (%s)' % (error.code, api_key_error or (
                'the API key from the inventory was refused' if api_key else 'the inventory gives no sglang_api_key'))
        else:
            state['settings_error'] = '/server_info answered %d' % error.code
        return state
    except (OSError, ValueError) as error:
        state['settings_error'] = '/server_info could not be read: %s' % getattr(error, 'reason', error)
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


def last_speculation(report_dir, host):
    """The host's last speculation tuning table (playbooks/tune_speculation.yml), or None."""
    if not report_dir:
        return None
    try:
        with open(os.path.join(report_dir, '%s.speculation.json' % host)) as handle:
            # NaN and Infinity are no JSON (the API could not answer with them): a table holding one is refused.
            table = json.load(handle, parse_constant=_refuse_constant)
    except (OSError, ValueError, RecursionError):
        return None
    return table if isinstance(table, dict) else None


def _refuse_constant(name):
    raise ValueError('%s is not JSON' % name)


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
            server = server_state(variables['address'], variables['port'], api_key=variables.get('api_key'),
                                  api_key_error=variables.get('api_key_error'))
            return {'name': name, 'address': variables['address'], 'port': variables['port'],
                    'healthy': server['healthy'], 'health': server['health'], 'pid': server['pid'],
                    'settings': server['settings'], 'settings_error': server['settings_error'],
                    'api_key_error': variables.get('api_key_error'),
                    'patch_sha256': (report or {}).get('patch_sha256'),
                    'pve_node': variables.get('pve_node'), 'pve_vmid': variables.get('pve_vmid'),
                    'rollback_deadline': variables.get('rollback_deadline'),
                    # A node of a server group (one server over several hosts; only rank 0 serves HTTP).
                    'server_group': variables.get('server_group') or '', 'node_rank': variables.get('node_rank'),
                    'last_report': report,
                    'speculation': speculation.summary(last_speculation(variables.get('report_dir'), name))}
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
