"""What a dashboard request may hand Ansible as extra variables, and how it is handed over.

Extra variables beat every other variable and Ansible templates them: a free dict from an HTTP request is a
root shell on the controller (`{"x": "{{ lookup('pipe', 'id') }}"}`) and a way to any host
(`ansible_connection`, `ansible_ssh_common_args` with a ProxyCommand). So, as AWX does with
ALLOW_JINJA_IN_EXTRA_VARS=template:

- only the role's documented variables (roles/sglang/meta/argument_specs.yml, read at start so the list
  follows the role) and the playbook's documented `redeploy_*` variables are taken, each type-checked
  against its documented type and choices, and every time bound against its range (the plan's own table,
  _timing.TIME_BOUNDS: a deadline of 1e12 would leave a cancelled run's hosts down for good), and every list
  whose entries each add time to the window against its count (_timing.COUNT_BOUNDS); anything else
  (`ansible_*`, a typo) is refused, naming the key;
  documented variables that decide what runs as root on the GPU hosts, where the role writes, what it kills,
  which hosts make the fleet, where keys go, and the keys themselves are the inventory's alone (PINNED);
- sglang_patch_file, the one controller file a run ships to the GPU hosts, must be "" or a regular file inside
  the dashboard's patch folders (--patch-dir; default the collection's files/), resolved with realpath so that
  neither a symlink nor `..` leads out (`patch_file`);
- the values reach Ansible as a 0600 YAML file in the run's private data dir (ansible-runner passes
  env/extravars as `-e @file`, never on a command line) where every string, keys included, is tagged
  `!unsafe`: Ansible never templates them, a `{{ ... }}` arrives as those characters;
- what is stored or served back has every secret-like value replaced (`redact`).
"""
import math
import os
import re

import yaml

from ansible_collections.gpuops.sglang.plugins.plugin_utils._timing import COUNT_BOUNDS, TIME_BOUNDS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGUMENT_SPECS = os.path.join(REPO, 'roles', 'sglang', 'meta', 'argument_specs.yml')
REDACTED = '<redacted>'

# The playbook's rolling policy (playbooks/redeploy.yml, README "Rolling policy").
PLAYBOOK_VARIABLES = {
    'redeploy_serial': {'type': 'serial'},
    'redeploy_canary': {'type': 'int', 'minimum': 0},
    'redeploy_max_fail_percentage': {'type': 'float', 'minimum': 0, 'maximum': 100},
    'redeploy_max_unavailable': {'type': 'int', 'minimum': 0},
}

# The role's variables of type raw, checked as what they hold (their argument spec says it in words).
RAW_VARIABLES = {
    'sglang_rollback_deadline': {'type': 'seconds_or_auto'},
}

# The folders a request's sglang_patch_file may name a file in, unless the dashboard is given others (--patch-dir).
DEFAULT_PATCH_DIRS = (os.path.join(REPO, 'files'),)

_ROOT_WRITES = 'a path the role writes as root on the GPU hosts'
_IN_THE_VAULT = 'a key: it belongs in the inventory\'s vault, not in a request or its history'

# Documented, but the inventory's alone. The token opens a redeploy button, not a shell: whoever holds it may
# vary what a redeploy varies (models, speculation, timeouts, the rollout), never what runs as root on the GPU
# hosts and with which environment, what gets killed, where the role writes, which hosts are which or make the
# fleet, where traffic and keys go, nor the keys themselves.
PINNED = {
    'sglang_python': 'the interpreter the server runs as root on the GPU hosts',
    'sglang_launch_module': 'the module the server runs as root on the GPU hosts',
    'sglang_environment': 'the environment of a root process (LD_PRELOAD, PYTHONPATH, ... run code)',
    'sglang_secret_environment': 'the environment of a root process, and secrets belong in the vault',
    'sglang_dynamic_spec_env_name': 'names a variable of a root process\'s environment (the patch defines it)',
    'sglang_dynamic_spec_env_read_by': 'states what the installed sglang reads; it lifts the refusal of env mode'
                                       ' that nothing reads',
    'sglang_rollout_policy': 'playbooks/redeploy.yml decides it from redeploy_serial, redeploy_canary,'
                             ' redeploy_max_unavailable and redeploy_max_fail_percentage: set those',
    'sglang_kill_patterns': 'what the run kills on the GPU hosts',
    'sglang_gpus': 'the GPUs a server owns beside its neighbours, and so what its release ends (the machine\'s layout)',
    'sglang_gpu_driver_info': 'where the release reads which device files are the server\'s GPUs (what it ends)',
    'sglang_undo_to': 'playbooks/undo.yml sets it, with its own --limit and checks: an undo is not a redeploy\'s option',
    'sglang_revisions_kept': 'how much history the hosts keep: a lower number prunes the older revisions at the next'
                             ' confirmation, so a request could wipe what the operators can undo to',
    'sglang_config_dir': _ROOT_WRITES,
    'sglang_run_dir': _ROOT_WRITES,
    'sglang_log_file': _ROOT_WRITES,
    'sglang_guard_dir': _ROOT_WRITES,
    'sglang_cache_dir': _ROOT_WRITES + ' (and gives to the server user), whose code the server loads',
    'sglang_service_name': 'the unit and pid file the role writes and stops as root',
    'sglang_service_manager': 'how the server is run as root',
    'sglang_user': 'the user the server runs as on the GPU hosts (root by default)',
    'sglang_group': 'the group the server runs as, and may read its launch configuration and keys',
    'sglang_fleet_hosts': 'the fleet\'s membership',
    'sglang_fleet_group': 'the fleet\'s membership',
    'sglang_router_worker_url': 'where the router sends this server\'s traffic',
    'sglang_dist_init_addr': 'where the ranks of a server group meet',
    'sglang_dist_init_port': 'where the ranks of a server group meet',
    'sglang_host': 'where the run sends the server\'s API key and whose answers confirm the new server',
    'sglang_port': 'where the run sends the server\'s API key and whose answers confirm the new server',
    'sglang_extra_args': 'server arguments: they can move the server (--host), its ranks (--dist-init-addr), '
                         'the files it writes, or let its clients run code (--enable-custom-logit-processor)',
    'sglang_api_key': _IN_THE_VAULT,
    'sglang_admin_api_key': _IN_THE_VAULT,
    'pve_node': 'each host\'s own Proxmox node',
    'pve_vmid': 'each host\'s own container',
    'sglang_server_group': 'each host\'s own server group',
    'sglang_node_rank': 'each host\'s own rank',
    'sglang_report_dir': 'a folder the run writes on the controller (and the page reads)',
    'sglang_fleet_slot_dir': 'a folder the run writes on the controller',
    'sglang_router_url': 'where the run sends the router\'s API key',
    'sglang_router_api_key': _IN_THE_VAULT,
}

# Names whose value is a secret: never stored in clear, never served back.
# Whole words between underscores: sglang_api_key, HF_TOKEN, DB_PASSWORD, but not sglang_perf_max_new_tokens.
_SECRET_NAME = re.compile(r'(^|_)(key|password|passwd|secret|token|credentials?|auth)(_|$)', re.I)
# Every value of these dicts is a secret, whatever its name (HF_TOKEN, ...).
SECRET_DICTS = ('sglang_secret_environment',)


class InvalidExtraVars(ValueError):
    """A refused extra variable: `key` names it, the message says why."""

    def __init__(self, key, reason):
        super(InvalidExtraVars, self).__init__('extra_vars.%s: %s' % (key, reason))
        self.key = key


def role_variables(path=ARGUMENT_SPECS):
    """{name: spec} of the role's documented variables (argument_specs.yml, entry point main)."""
    with open(path) as handle:
        return dict(yaml.safe_load(handle)['argument_specs']['main']['options'])


def allowed_variables(path=ARGUMENT_SPECS):
    """{name: spec} a request may set: the role's documented variables but PINNED, and the playbook's."""
    allowed = dict((name, spec) for name, spec in role_variables(path).items() if name not in PINNED)
    allowed.update((name, dict(allowed[name], **spec)) for name, spec in RAW_VARIABLES.items() if name in allowed)
    allowed.update((name, dict(allowed[name], seconds=bound)) for name, bound in TIME_BOUNDS.items() if name in allowed)
    allowed.update((name, dict(allowed[name], count=bound)) for name, bound in COUNT_BOUNDS.items() if name in allowed)
    allowed.update(PLAYBOOK_VARIABLES)
    return allowed


_KINDS = {'str': 'a string', 'path': 'a string', 'int': 'a whole number', 'float': 'a number',
          'bool': 'true or false', 'list': 'a list', 'dict': 'an object with string keys',
          'serial': 'a positive count or a percentage "N%"', 'seconds_or_auto': 'a number of seconds or "auto"'}


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


# How deep a dict variable's values may nest (sglang_dynamic_spec_adaptive_config is {tier: {name: [steps]}}).
DATA_DEPTH = 3


def _check_data(key, value, depth):
    """A value inside a dict variable: JSON data (strings, finite numbers, booleans, and lists or objects of
    them with string keys) nested at most `depth` levels."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidExtraVars(key, 'must be a finite number, not %r' % value)
    if isinstance(value, (str, int, float, bool)):
        return
    if depth <= 0 or not isinstance(value, (list, dict)):
        raise InvalidExtraVars(key, 'must be a string, number, boolean, or a list or object of them '
                                    '(at most %d levels deep)' % DATA_DEPTH)
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_data('%s[%d]' % (key, index), item, depth - 1)
        return
    for name, item in value.items():
        if not isinstance(name, str):
            raise InvalidExtraVars(key, 'must have string keys, not %r' % (name,))
        _check_data('%s.%s' % (key, name), item, depth - 1)


def _check(key, value, spec):
    kind = spec.get('type', 'str')
    if kind in ('str', 'path'):
        ok = isinstance(value, str)
    elif kind == 'int':
        ok = _is_int(value)
    elif kind == 'float':
        # NaN and infinity compare false with every bound, so they would pass a minimum and turn a gate off.
        ok = _is_int(value) or (isinstance(value, float) and math.isfinite(value))
    elif kind == 'bool':
        ok = isinstance(value, bool)
    elif kind == 'list':
        ok = isinstance(value, list)
    elif kind == 'dict':
        ok = isinstance(value, dict) and all(isinstance(name, str) for name in value)
    elif kind == 'seconds_or_auto':
        # Its range is its time bound's (below).
        ok = value == 'auto' or _is_int(value) or (isinstance(value, float) and math.isfinite(value))
    elif kind == 'serial':
        # Ansible's serial: a count, or a share of the hosts as "N%".
        ok = (_is_int(value) and value > 0) or (isinstance(value, str) and re.match(r'^[1-9][0-9]{0,2}%?$', value))
    else:
        raise InvalidExtraVars(key, 'has a type (%s) the dashboard cannot check' % kind)
    if not ok:
        raise InvalidExtraVars(key, 'must be %s, not %r' % (_KINDS.get(kind, kind), value))
    count = spec.get('count')
    if kind == 'list' and count is not None and not count.holds(value):
        raise InvalidExtraVars(key, 'must have %s, not %d (%s)' % (count.words(), len(value), count.why))
    if kind == 'list' and spec.get('elements'):
        for index, item in enumerate(value):
            _check('%s[%d]' % (key, index), item, {'type': spec['elements']})
    if kind == 'dict':
        for name, item in value.items():
            _check_data('%s.%s' % (key, name), item, DATA_DEPTH)
    if spec.get('choices') is not None and value not in spec['choices']:
        raise InvalidExtraVars(key, 'must be one of %s, not %r' % (', '.join(repr(c) for c in spec['choices']), value))
    bound = spec.get('seconds')
    # "auto" (the deadline's other form) is no number of seconds: the plan computes it from the bounded others.
    if bound is not None and not isinstance(value, str) and not bound.holds(value):
        raise InvalidExtraVars(key, 'must be %s, not %r (%s)' % (bound.words(), value, bound.why))
    if 'minimum' in spec and value < spec['minimum']:
        raise InvalidExtraVars(key, 'must be at least %s' % spec['minimum'])
    if 'maximum' in spec and value > spec['maximum']:
        raise InvalidExtraVars(key, 'must be at most %s' % spec['maximum'])


def patch_folders(folders):
    """The real paths of the folders patch files may come from; ValueError naming one that is not a folder."""
    resolved = []
    for folder in folders:
        real = os.path.realpath(folder)
        if not os.path.isdir(real):
            raise ValueError('patch folder %s is not a folder' % folder)
        resolved.append(real)
    return tuple(resolved)


def patch_file(value, folders):
    """The file sglang_patch_file names, as the run must read it: "" (no patch), or the real path of a regular
    file inside one of `folders` (real paths, patch_folders). Anything else raises InvalidExtraVars: the run
    copies this controller file to every GPU host, so a free path would ship any file the dashboard's user can
    read (an ssh key, the vault password file). A relative path is refused too: Ansible's file lookup would
    search the role's and the playbook's folders for it."""
    if value == '':
        return value
    allowed = ', '.join(folders) or 'none'
    if not os.path.isabs(value):
        raise InvalidExtraVars('sglang_patch_file', 'must be "" or an absolute path inside the dashboard\'s patch '
                                                    'folders (%s; --patch-dir), not %r' % (allowed, value))
    real = os.path.realpath(value)
    if not any(os.path.commonpath([real, folder]) == folder and real != folder for folder in folders):
        raise InvalidExtraVars('sglang_patch_file', 'must be a file inside the dashboard\'s patch folders (%s; '
                                                    '--patch-dir): %r leads elsewhere' % (allowed, value))
    if not os.path.isfile(real):
        raise InvalidExtraVars('sglang_patch_file', 'must be a regular file inside the dashboard\'s patch folders '
                                                    '(%s; --patch-dir): %r is not one' % (allowed, value))
    return real


def validate(extra_vars, allowed=None, patch_dirs=None):
    """The request's extra variables, checked: returns them, or raises InvalidExtraVars naming the first key
    that is not a documented variable a request may set, or whose value has the wrong type. With `patch_dirs`
    (real paths, patch_folders), sglang_patch_file is also held to them and handed on resolved (patch_file)."""
    allowed = allowed_variables() if allowed is None else allowed
    if not isinstance(extra_vars, dict):
        raise InvalidExtraVars('', 'must be an object')
    for key in sorted(extra_vars):
        if key in PINNED:
            raise InvalidExtraVars(key, 'is set by the inventory only (%s)' % PINNED[key])
        if key not in allowed:
            raise InvalidExtraVars(key, 'is not a documented variable of the role (roles/sglang/meta/argument_specs.yml) '
                                        'or the playbook (redeploy_serial, redeploy_canary, '
                                        'redeploy_max_fail_percentage, redeploy_max_unavailable)')
        _check(key, extra_vars[key], allowed[key])
    checked = dict(extra_vars)
    if patch_dirs is not None and 'sglang_patch_file' in checked:
        checked['sglang_patch_file'] = patch_file(checked['sglang_patch_file'], patch_dirs)
    return checked


def is_secret(name):
    return bool(_SECRET_NAME.search(str(name)))


def redact(value, secret=False, name=None):
    """A copy of `value` in which every secret (a key, password or token-like name, or any value of
    sglang_secret_environment) reads REDACTED; an empty secret stays empty (it says "none set")."""
    if isinstance(value, dict):
        return dict((key, redact(item, secret or is_secret(key) or key in SECRET_DICTS, key))
                    for key, item in value.items())
    if isinstance(value, list):
        return [redact(item, secret, name) for item in value]
    if secret and value not in ('', None):
        return REDACTED
    return value


class _Unsafe(str):
    """A string written with the !unsafe tag: Ansible keeps it as it is, never templated."""


class _UnsafeDumper(yaml.SafeDumper):
    pass


_UnsafeDumper.add_representer(_Unsafe, lambda dumper, value: dumper.represent_scalar('!unsafe', str(value),
                                                                                   style='"'))


def _tag(value):
    if isinstance(value, str):
        return _Unsafe(value)
    if isinstance(value, dict):
        return dict((_tag(key), _tag(item)) for key, item in value.items())
    if isinstance(value, list):
        return [_tag(item) for item in value]
    return value


def unsafe_yaml(extra_vars):
    """The extra variables as YAML with every string (keys too) tagged !unsafe."""
    return yaml.dump(_tag(extra_vars), Dumper=_UnsafeDumper, default_flow_style=False, allow_unicode=True)


def write_unsafe(path, extra_vars):
    """Write `unsafe_yaml(extra_vars)` to `path`, mode 0600 from its creation (it may hold keys)."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, 'w') as handle:
        handle.write(unsafe_yaml(extra_vars))
    os.chmod(path, 0o600)
    return path
