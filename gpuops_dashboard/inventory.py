"""The inventory's gpu hosts and what each runs now: health, speculative settings, patch, last report.

Host variables are resolved by Ansible itself (an ad-hoc `debug` through ansible-runner, nothing
connects to a host), so templated values such as `sglang_report_dir: "{{ lab_state_dir }}/reports"`
come out as the playbook sees them; a variable a host leaves unset is the role's default, read from the role's
defaults/main.yml. The servers are then asked directly over HTTP.

The address asked is the one the role itself uses for a server (the collection's sglang_reachable_host
filter: the inventory address when the server listens on every address, never 0.0.0.0), through the
collection's bounded reader (module_utils/base/_http.py): no redirect followed, no proxy, one deadline and caps
per request, JSON refused before it nests too deeply; the whole read of every host ends within READ_BOUND_S.
One host's bad answer marks that host's card only.

The dashboard never sends a server's API key: on the controller it cannot prove that whatever answers at
the server's port is the server (a local user on the GPU host may bind the port while the server is down or
loading; the modules prove it on the host, from the listening socket's owner). A server without a key is
asked /server_info; for one with a key (the inventory's sglang_api_key, vaulted or not, or a 401) the card
shows the settings its last report says the run verified on the host, with the report's time, and says so;
never what something at its port answers. The key's value is never resolved here: only whether there is one.
"""
import datetime
import json
import os
import re
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import ansible_runner
import yaml

from gpuops_dashboard import revisions as _revisions
from gpuops_dashboard import speculation
from gpuops_dashboard.redeploy import REPO, ansible_environment, _inventory_path
from ansible_collections.gpuops.sglang.plugins.plugin_utils._host_files import host_file
from ansible_collections.gpuops.sglang.plugins.module_utils.base._http import HttpError, JsonError, fetch, parse_json

# What a dashboard shows of the running server's /server_info (the speculative settings and the cap).
SERVER_INFO_KEYS = ('speculative_algorithm', 'speculative_num_steps', 'speculative_eagle_topk',
                    'speculative_num_draft_tokens', 'speculative_adaptive', 'max_running_requests',
                    'disable_overlap_schedule')
DYNAMIC_SPEC_ENV = 'SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE'
# The collection this dashboard ships in: its role's defaults are what a host that sets none of the variables below
# runs with, read from the role (not copied here) at each resolution of the inventory.
ROLE_DEFAULTS = os.path.join(REPO, 'roles', 'sglang', 'defaults', 'main.yml')
# What a card needs of each host: {key: the role variable}. A variable the host leaves unset is the role's default,
# none where the role has none (pve_node and pve_vmid on bare metal, sglang_node_rank off a server group).
HOST_VARIABLES = {
    'port': 'sglang_port', 'report_dir': 'sglang_report_dir', 'rollback_deadline': 'sglang_rollback_deadline',
    'service_manager': 'sglang_service_manager', 'pve_node': 'pve_node', 'pve_vmid': 'pve_vmid',
    'server_group': 'sglang_server_group', 'node_rank': 'sglang_node_rank',
}
# The role's own rule for where a server is reached (plugins/filter/sglang_reachable_host.py).
_ADDRESS = '%s | gpuops.sglang.sglang_reachable_host(ansible_host | default(inventory_hostname))'
# The machine a server runs on, as the inventory names it: its address (several servers of one machine share it),
# whatever address the server itself listens on (127.0.0.1 on every machine, say).
_MACHINE_ADDRESS = '"machine_address": ansible_host | default(inventory_hostname)'
# A role default the dashboard can copy into its template as a literal (_literal).
_PLAIN = re.compile(r'[^"\\{}\x00-\x1f]*\Z')
# Whether the server has a key, never the key: no default(), which would turn a key templated from a missing
# (vault) variable into "no key". A host without the variable has none; one whose value cannot be resolved here
# fails, and is resolved again without it, as keyed.
_HAS_API_KEY = (', "has_api_key": ((sglang_api_key | string | length) > 0) '
                'if "sglang_api_key" in hostvars[inventory_hostname] else false')
# Each request to a server, and the read of every host together: GET /api/hosts answers within READ_BOUND_S
# (and the inventory's resolution, the first time) whatever the servers do.
REQUEST_TIMEOUT_S = 2.0
READ_BOUND_S = 5.0


def _resolve(inventory, pattern, template):
    """({host: variables}, {host: failure message}, runner) of one ad-hoc debug of `template`."""
    # A private dir of its own (0700, removed at once): ansible-runner's artifacts hold the resolved variables.
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


def role_defaults():
    """{name: value} of the role's defaults/main.yml."""
    with open(ROLE_DEFAULTS) as handle:
        return yaml.safe_load(handle) or {}


def _literal(name, value):
    """A role default as a Jinja literal: a number, or a string of plain characters (no template, and nothing Ansible
    would read otherwise inside the quotes of a literal: it keeps a backslash as it is)."""
    if value is None:
        return 'none'
    if isinstance(value, (int, float)) or (isinstance(value, str) and _PLAIN.match(value)):
        return json.dumps(value)
    raise RuntimeError('the dashboard reads %s from the role\'s defaults (%s) and takes a number or a string without '
                       'quotes, backslashes or braces there, not %r' % (name, ROLE_DEFAULTS, value))


def resolve_template(has_api_key, defaults):
    """The debug message that resolves a host's HOST_VARIABLES and address, and with `has_api_key` whether its
    server has a key: each variable the host leaves unset as `defaults` (the role's) have it."""
    def variable(name):
        return '%s | default(%s)' % (name, _literal(name, defaults.get(name)))
    entries = ['"address": ' + _ADDRESS % variable('sglang_host'), _MACHINE_ADDRESS]
    entries.extend('"%s": %s' % (key, variable(name)) for key, name in HOST_VARIABLES.items())
    return '{{ {' + ', '.join(entries) + (_HAS_API_KEY if has_api_key else '') + '} }}'


def revisions_arguments(defaults):
    """sglang_revisions' arguments (JSON) for the listing of each host's revisions, templated per host by Ansible: the
    folder the role keeps them in (sglang_guard_dir/sglang_service_name, `defaults` (the role's) where unset)."""
    folder = '{{ sglang_guard_dir | default(%s) }}/{{ sglang_service_name | default(%s) }}' % (
        _literal('sglang_guard_dir', defaults.get('sglang_guard_dir')),
        _literal('sglang_service_name', defaults.get('sglang_service_name')))
    return json.dumps({'state': 'listed', 'folder': folder})


def resolve_hosts(inventory, pattern='gpu'):
    """{host: {address, port, report_dir, rollback_deadline, ..., has_api_key}} for `pattern`.

    has_api_key: whether the inventory gives the server a key (sglang_api_key not empty); a key Ansible
    cannot resolve here (a vault without its password, a variable the dashboard lacks) counts as one.
    """
    defaults = role_defaults()
    hosts, failed, (rc, tail) = _resolve(inventory, pattern, resolve_template(True, defaults))
    if failed:
        # The key is the only part that may need what the dashboard lacks: the rest again without it.
        again, still, (rc, tail) = _resolve(inventory, ','.join(sorted(failed)), resolve_template(False, defaults))
        for variables in again.values():
            variables['has_api_key'] = True
        hosts.update(again)
        failed = still
    if failed or not hosts:
        raise RuntimeError('could not resolve the hosts of %s in %s (rc %s): %s'
                           % (pattern, inventory, rc, '; '.join('%s: %s' % item for item in sorted(failed.items()))
                              or tail))
    return dict(sorted(hosts.items()))


def _url_host(address):
    return '[%s]' % address if ':' in str(address) else address


def _shown(info):
    """The settings a card shows, from a /server_info document."""
    settings = {key: info.get(key) for key in SERVER_INFO_KEYS if key in info}
    environment = info.get('environment')
    if isinstance(environment, dict) and DYNAMIC_SPEC_ENV in environment:
        settings[DYNAMIC_SPEC_ENV] = environment[DYNAMIC_SPEC_ENV]
    return settings


def _report_time(report):
    return datetime.datetime.fromtimestamp(report['_mtime'], datetime.timezone.utc).strftime('%Y-%m-%d %H:%M:%S UTC')


def reported_settings(report, why):
    """{settings, settings_source, settings_error} for a server the dashboard does not ask /server_info (`why`):
    the settings its last report says the run verified on the host, or why there are none."""
    verified = (report or {}).get('verified_settings')
    if not report:
        return {'settings': None, 'settings_source': None,
                'settings_error': 'not asked (%s), and no report of a run verified them yet' % why}
    if not isinstance(verified, dict) or not isinstance(verified.get('server_info'), dict):
        return {'settings': None, 'settings_source': None,
                'settings_error': 'not asked (%s), and the last report (%s, %s) verified none'
                                  % (why, _report_time(report), report.get('status'))}
    settings = _shown(dict(verified['server_info'], environment=verified.get('environment') or {}))
    return {'settings': settings, 'settings_error': None,
            'settings_source': 'as the last run verified them on the host (its report of %s), not asked now: %s'
                               % (_report_time(report), why)}


def server_state(address, port, has_api_key=False, report=None, deadline=None):
    """/health (200 = serving), and the settings: /server_info for a server without a key, else the last report's.

    No request carries a key. `deadline` (time.monotonic()) bounds both requests; default READ_BOUND_S from now.
    `settings` is None when they are not known, and `settings_error` then says why; `settings_source` says where
    they come from when not from /server_info itself (None when they do).
    """
    base = 'http://%s:%s' % (_url_host(address), port)
    deadline = time.monotonic() + READ_BOUND_S if deadline is None else deadline
    state = {'url': base, 'healthy': False, 'health': None, 'settings': None, 'settings_error': None,
             'settings_source': None, 'pid': None}
    try:
        state['health'], dummy = fetch('GET', base + '/health', _time_left(deadline))
    except HttpError as error:
        state['health'] = 'no answer: %s' % error
        state['settings_error'] = 'not asked: /health had no answer'
        return state
    state['healthy'] = state['health'] == 200
    if has_api_key:
        state.update(reported_settings(report, 'the server has an API key, which the dashboard never sends'))
        return state
    try:
        status, body = fetch('GET', base + '/server_info', _time_left(deadline))
        info = parse_json(body) if status == 200 else None
    except (HttpError, JsonError) as error:
        state['settings_error'] = '/server_info could not be read: %s' % error
        return state
    if status in (401, 403):
        state.update(reported_settings(report, '/server_info answered %d: the server has an API key the '
                                               'inventory does not give, and the dashboard never sends one' % status))
    elif status != 200:
        state['settings_error'] = '/server_info answered %d' % status
    elif not isinstance(info, dict):
        state['settings_error'] = '/server_info answered JSON that is not an object'
    else:
        state['settings'] = _shown(info)
        internal = info.get('internal_states') or [{}]
        state['pid'] = internal[0].get('pid') if isinstance(internal, list) and isinstance(internal[0], dict) else None
    return state


def _time_left(deadline):
    """A request's timeout: REQUEST_TIMEOUT_S, or what is left of the read of every host; HttpError when none is."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise HttpError('not asked: the read of every host ran out of its %s s' % READ_BOUND_S)
    return min(REQUEST_TIMEOUT_S, left)


def last_report(report_dir, host):
    """The host's last report file (written by every redeploy, also as the window opens), or None."""
    if not report_dir:
        return None
    path = os.path.join(report_dir, host_file(host, 'report'))
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
        with open(os.path.join(report_dir, host_file(host, 'speculation'))) as handle:
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
        # Each server's revisions, read on the hosts through Ansible on a thread of their own (revisions.py).
        self.revisions = _revisions.RevisionReader(lambda names, stop, on_answer: _revisions.read(
            inventory, names, revisions_arguments(role_defaults()), stop, on_answer))

    def hosts(self, refresh=False):
        with self._lock:
            if self._hosts is None or refresh:
                self._hosts = resolve_hosts(self.inventory, self.pattern)
            return self._hosts

    def state(self, refresh=False):
        """One card per host; the servers' reads all end within READ_BOUND_S of the start of this one, and so does
        the wait for their revisions (the last listing, or why there is none, when the read takes longer)."""
        hosts = self.hosts(refresh)
        deadline = time.monotonic() + READ_BOUND_S
        # Started first, waited for last: the ssh connections overlap the HTTP reads.
        listings = ThreadPoolExecutor(max_workers=1, thread_name_prefix='revisions-wait')
        revisions = listings.submit(self.revisions.listings, list(hosts), deadline)
        listings.shutdown(wait=False)

        def one(item):
            name, variables = item
            report = last_report(variables.get('report_dir'), name)
            server = server_state(variables['address'], variables['port'], has_api_key=variables.get('has_api_key'),
                                  report=report, deadline=deadline)
            return {'name': name, 'address': variables['address'], 'port': variables['port'],
                    'healthy': server['healthy'], 'health': server['health'], 'pid': server['pid'],
                    'settings': server['settings'], 'settings_error': server['settings_error'],
                    'settings_source': server['settings_source'], 'has_api_key': bool(variables.get('has_api_key')),
                    'patch_sha256': (report or {}).get('patch_sha256'),
                    'pve_node': variables.get('pve_node'), 'pve_vmid': variables.get('pve_vmid'),
                    'machine_address': variables.get('machine_address'),
                    'rollback_deadline': variables.get('rollback_deadline'),
                    # A node of a server group (one server over several hosts; only rank 0 serves HTTP).
                    'server_group': variables.get('server_group') or '', 'node_rank': variables.get('node_rank'),
                    'last_report': report,
                    'speculation': speculation.summary(last_speculation(variables.get('report_dir'), name))}
        # A host waiting for a worker gets what is left of the one deadline: many hosts read in parallel.
        with ThreadPoolExecutor(max_workers=max(1, min(32, len(hosts)))) as pool:
            cards = list(pool.map(one, hosts.items()))
        listed = revisions.result()
        for card in cards:
            card['revisions'] = listed[card['name']]
        return cards

    def reports_since(self, names, since):
        """Report files written at or after `since` (epoch seconds): what a cancelled run left per host."""
        hosts = self.hosts()
        found = {}
        for name in names:
            report = last_report(hosts.get(name, {}).get('report_dir'), name)
            if report and report['_mtime'] >= since:
                found[name] = report
        return found
