"""The preflight's rules, one case per broken rule, with the exact message the operator reads."""
import argparse
import os

import pytest
import yaml

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _performance, _rules, _speculation, _timing

TIERS_WITHOUT_3 = {'1': {'candidate_steps': [1, 2]}, '8': {'candidate_steps': [0]}, 'ema_alpha': 0.3}
ADAPTIVE = {'sglang_dynamic_spec_mode': 'adaptive'}
PVE = {'proxmox': ['pve1']}

RANGES = 'sglang_max_running_requests and sglang_tp_size must be positive, sglang_port within 1 to 65535.'
TIMEOUTS = 'sglang_health_timeout and sglang_gpu_release_timeout must be above 0, sglang_term_timeout not negative.'
FLEET = ('sglang_drain_timeout, sglang_router_timeout and sglang_fleet_wait_timeout must not be negative,'
         ' sglang_ready_checks and sglang_max_unavailable not negative, sglang_max_fail_percentage within 0 to 100.')
SPECULATIVE = ('sglang_speculative_num_steps, _eagle_topk and _num_draft_tokens must all be positive (SGLang wants all'
               ' three).')
KEYS = ('sglang_api_key and sglang_admin_api_key must be printable ASCII without spaces (they travel in an HTTP'
        ' header).')
SECRET_ARGS = ('sglang_extra_args must not carry --api-key, --admin-api-key or --config, nor an abbreviation of'
               ' them (every local user reads arguments in /proc/PID/cmdline): set sglang_api_key and sglang_admin_api_key, which the role hands'
               ' over in a 0600 file.')
GATE = {'sglang_perf_gate': True}
PERF_SIZES = ('sglang_perf_levels must be positive concurrencies, sglang_perf_requests at least the highest level (%d),'
              ' sglang_perf_max_new_tokens and sglang_perf_timeout positive.')
PERF_TOLERANCES = ('sglang_perf_throughput_tolerance must be within 0 to 1, sglang_perf_itl_tolerance not negative'
                   ' (fractions of the baseline).')
PERF_BASELINE = ('sglang_perf_baseline must be measure or stored; stored reads the last report in sglang_report_dir,'
                 ' which is empty.')
REVISIONS_KEPT = ('sglang_revisions_kept (%s) must be 0 (none recorded) or at least 2: an undo puts back an earlier'
                  ' revision, so 1 would record every run with nothing to undo to.')
PATTERNS = ('sglang_kill_patterns must list at least one pattern, and no empty one (an empty pattern matches every'
            ' process).')


@pytest.mark.parametrize('overrides', [
    {}, ADAPTIVE, dict(ADAPTIVE, sglang_speculative_num_steps=5, sglang_speculative_num_draft_tokens=6),
    {'sglang_speculative_algorithm': '', 'sglang_draft_model_path': '', 'sglang_speculative_num_steps': 0},
    {'sglang_port': '8080', 'sglang_term_timeout': '0', 'sglang_api_key': 'k3y:"quoted"#'},
    # The env mode never reads the tiers.
    {'sglang_dynamic_spec_adaptive_config': TIERS_WITHOUT_3},
    {'sglang_router_url': 'http://127.0.0.1:30080', 'sglang_rollback_deadline': 1680},
    dict(GATE, sglang_perf_levels=[1, 4, 32], sglang_perf_requests='32', sglang_rollback_deadline=1380),
    dict(GATE, sglang_router_url='http://127.0.0.1:30080'),
    dict(GATE, sglang_perf_baseline='stored', sglang_report_dir='/var/lib/reports'),
    {'sglang_perf_requests': 0, 'sglang_perf_throughput_tolerance': 2, 'sglang_perf_baseline': 'stored'},
    {'sglang_revisions_kept': 0}, {'sglang_revisions_kept': 2}, {'sglang_revisions_kept': '10'},
], ids=['env', 'adaptive', 'adaptive-5-steps', 'no-speculation', 'strings-from-extra-vars', 'env-ignores-tiers',
        'router-budget-just-fits', 'perf-gate', 'perf-gate-behind-a-router-fits-the-default-deadline', 'perf-gate-stored', 'perf-gate-off-ignores-its-values',
        'revisions-none', 'revisions-2', 'revisions-10-from-extra-vars'])
def test_consistent_settings_pass(settings, overrides):
    settings.update(overrides)
    assert _rules.variable_problems(settings, PVE) == []


@pytest.mark.parametrize('overrides, inventory, message', [
    ({'sglang_model_path': ''}, PVE, 'sglang_model_path is empty; set the model the server loads.'),
    ({'sglang_draft_model_path': ''}, PVE, 'sglang_draft_model_path is empty; EAGLE-3 needs the draft model.'),
    (dict(ADAPTIVE, sglang_speculative_eagle_topk=2), PVE,
     '--speculative-adaptive supports only sglang_speculative_eagle_topk 1.'),
    (dict(ADAPTIVE, sglang_speculative_num_steps=5), PVE,
     'In adaptive mode SGLang (0.5.23) sets --speculative-num-draft-tokens to the draft steps + 1, and /server_info'
     ' would report that: set sglang_speculative_num_draft_tokens to 6.'),
    (dict(ADAPTIVE, sglang_dynamic_spec_adaptive_config=TIERS_WITHOUT_3), PVE,
     'In adaptive mode SGLang (0.5.23) refuses to start unless sglang_speculative_num_steps (3) is among the'
     ' candidate steps of its tiers (0, 1, 2).'),
    ({}, dict(PVE, pve_vmid=101),
     'pve_node and pve_vmid go together (the Proxmox node and the container VMID); set both or neither.'),
    ({}, dict(PVE, pve_node='pve9', pve_vmid=101), 'pve_node pve9 is not in the proxmox inventory group.'),
    # None: the container kill could never run (the stop would see no strays); '': every process would match.
    ({'sglang_kill_patterns': []}, PVE, PATTERNS),
    ({'sglang_kill_patterns': ['sglang::', '']}, PVE, PATTERNS),
    ({'sglang_health_poll_interval': 0}, PVE,
     'sglang_health_poll_interval must be above 0 seconds (0.25 polls four times a second).'),
    ({'sglang_health_timeout': 0}, PVE, TIMEOUTS),
    ({'sglang_gpu_release_timeout': 'soon'}, PVE, TIMEOUTS),
    ({'sglang_term_timeout': -1}, PVE, TIMEOUTS),
    ({'sglang_max_running_requests': 0}, PVE, RANGES),
    ({'sglang_tp_size': -2}, PVE, RANGES),
    ({'sglang_port': 65536}, PVE, RANGES),
    ({'sglang_port': 0}, PVE, RANGES),
    ({'sglang_speculative_eagle_topk': 0}, PVE, SPECULATIVE),
    ({'sglang_speculative_num_draft_tokens': '0'}, PVE, SPECULATIVE),
    ({'sglang_drain_timeout': -1}, PVE, FLEET),
    ({'sglang_router_timeout': -0.5}, PVE, FLEET),
    ({'sglang_fleet_wait_timeout': -1}, PVE, FLEET),
    ({'sglang_ready_checks': -1}, PVE, FLEET),
    ({'sglang_max_unavailable': '-1'}, PVE, FLEET),
    ({'sglang_max_fail_percentage': 101}, PVE, FLEET),
    ({'sglang_max_fail_percentage': -1}, PVE, FLEET),
    ({'sglang_api_key': 'two words'}, PVE, KEYS),
    ({'sglang_admin_api_key': 'caf\u00e9'}, PVE, KEYS),
    ({'sglang_extra_args': ['--api-key=abc']}, PVE, SECRET_ARGS),
    ({'sglang_extra_args': ['--log-level', 'info', '--config']}, PVE, SECRET_ARGS),
    ({'sglang_extra_args': ['--admin-api-key', 'x']}, PVE, SECRET_ARGS),
    # SGLang's argparse parser allows abbreviations: each of these reaches it as the full flag.
    ({'sglang_extra_args': ['--api-ke', 'x']}, PVE, SECRET_ARGS),
    ({'sglang_extra_args': ['--api=x']}, PVE, SECRET_ARGS),
    ({'sglang_extra_args': ['--admin', 'x']}, PVE, SECRET_ARGS),
    ({'sglang_extra_args': ['--admin-api-k=x']}, PVE, SECRET_ARGS),
    ({'sglang_extra_args': ['--conf', '/tmp/keys.yaml']}, PVE, SECRET_ARGS),
    ({'sglang_dynamic_spec_batch_size_threshold': 0}, PVE, 'sglang_dynamic_spec_batch_size_threshold must be a positive'
                                                          ' batch size.'),
    ({'sglang_rollback_deadline': 1000}, PVE,
     'sglang_rollback_deadline (1000 s) is shorter than the outage window may last (1020.0 s: 2 x sglang_term_timeout'
     ' + sglang_gpu_release_timeout + sglang_health_timeout); the guard would roll back a server that is still'
     ' loading.'),
    ({'sglang_router_url': 'http://127.0.0.1:30080', 'sglang_rollback_deadline': '1300'}, PVE,
     'sglang_rollback_deadline (1300 s) is shorter than the outage window may last (1380.0 s: 2 x sglang_term_timeout'
     ' + sglang_gpu_release_timeout + sglang_health_timeout + sglang_drain_timeout + 2 x sglang_router_timeout);'
     ' the guard would roll back a server that is still loading.'),
    (dict(GATE, sglang_perf_levels=[1, 0]), PVE, PERF_SIZES % 1),
    (dict(GATE, sglang_perf_requests=15), PVE, PERF_SIZES % 16),
    (dict(GATE, sglang_perf_levels=[64]), PVE, PERF_SIZES % 64),
    (dict(GATE, sglang_perf_max_new_tokens=0), PVE, PERF_SIZES % 16),
    (dict(GATE, sglang_perf_timeout='0'), PVE, PERF_SIZES % 16),
    (dict(GATE, sglang_perf_throughput_tolerance=1), PVE, PERF_TOLERANCES),
    (dict(GATE, sglang_perf_throughput_tolerance=-0.1), PVE, PERF_TOLERANCES),
    (dict(GATE, sglang_perf_itl_tolerance=-0.1), PVE, PERF_TOLERANCES),
    (dict(GATE, sglang_perf_baseline='stored'), PVE, PERF_BASELINE),
    (dict(GATE, sglang_perf_baseline='last'), PVE, PERF_BASELINE),
    ({'sglang_revisions_kept': 1}, PVE, REVISIONS_KEPT % 1),
    ({'sglang_revisions_kept': '1'}, PVE, REVISIONS_KEPT % 1),
    ({'sglang_revisions_kept': -2}, PVE, REVISIONS_KEPT % -2),
    (dict(GATE, sglang_rollback_deadline=1200), PVE,
     'sglang_rollback_deadline (1200 s) is shorter than the outage window may last (1260.0 s: 2 x sglang_term_timeout'
     ' + sglang_gpu_release_timeout + sglang_health_timeout + 2 x levels x sglang_perf_timeout); the guard would roll'
     ' back a server that is still loading.'),
])
def test_each_broken_rule_says_its_message(settings, overrides, inventory, message):
    settings.update(overrides)
    assert _rules.variable_problems(settings, inventory) == [message]


BAKE = {'sglang_canary_bake': 300, 'sglang_router_url': 'http://127.0.0.1:30080', 'sglang_canary': 1,
        'sglang_fleet_hosts': ['gpu1', 'gpu2'], 'sglang_rollback_deadline': 1800}
BAKE_TOLERANCES = ('sglang_canary_min_requests must be at least 1, sglang_canary_latency_tolerance at least 0, and'
                   ' sglang_canary_error_tolerance from 0 to 1.')


@pytest.mark.parametrize('overrides, messages', [
    (BAKE, []),
    # Off: none of its settings is checked.
    ({'sglang_canary_bake': '0', 'sglang_canary_min_requests': 0}, []),
    (dict(BAKE, sglang_router_url=''), ['sglang_canary_bake needs sglang_router_url: the bake judges the canary on'
                                        ' the live traffic a router sends it, against the servers still on the'
                                        ' previous version behind the same router.']),
    (dict(BAKE, sglang_canary='0'), ['sglang_canary_bake needs a canary (redeploy_canary or sglang_canary of at least'
                                     ' 1): the bake holds the rollout after the canary batch.']),
    (dict(BAKE, sglang_canary_bake=-5), ['sglang_canary_bake (-5) must not be negative (0 turns the bake off).']),
    (dict(BAKE, sglang_canary_min_requests=0), [BAKE_TOLERANCES]),
    (dict(BAKE, sglang_canary_error_tolerance=1.5), [BAKE_TOLERANCES]),
    (dict(BAKE, sglang_canary_latency_tolerance=-0.1), [BAKE_TOLERANCES]),
    # The bake lies inside the guard's deadline: 1380 s of window behind a router, the hold and four readings.
    (dict(BAKE, sglang_rollback_deadline=1700),
     ['sglang_rollback_deadline (1700 s) is shorter than the outage window may last (1720.0 s: 2 x sglang_term_timeout'
      ' + sglang_gpu_release_timeout + sglang_health_timeout + sglang_drain_timeout + 2 x sglang_router_timeout +'
      ' sglang_canary_bake and its /metrics readings); the guard would roll back a server that is still loading.']),
], ids=['consistent', 'off', 'no-router', 'no-canary', 'negative', 'min-requests', 'error-tolerance',
        'latency-tolerance', 'deadline'])
def test_the_canary_bake_needs_a_router_a_canary_and_room_in_the_deadline(settings, overrides, messages):
    settings.update(overrides)
    assert _rules.variable_problems(settings, PVE) == messages


@pytest.mark.parametrize('given, messages', [
    ('auto', []),
    ('0', ['sglang_rollback_deadline (0) must be a number of seconds above 0, or auto (what the window may last with'
           ' these settings).']),
    ('soon', ['sglang_rollback_deadline (soon) must be a number of seconds above 0, or auto (what the window may last'
              ' with these settings).']),
])
def test_the_deadline_is_seconds_or_auto(settings, given, messages):
    settings.update(GATE, sglang_rollback_deadline=given)
    assert _rules.variable_problems(settings, PVE) == messages


def test_extra_args_that_only_look_like_secrets_pass(settings):
    settings['sglang_extra_args'] = ['--api-key-file-is-not-a-flag', '--configure', '--log-level=info', '--', '-a']
    assert _rules.variable_problems(settings, PVE) == []


def test_every_broken_rule_is_said_once_in_the_preflight_order(settings):
    settings.update(sglang_model_path='', sglang_kill_patterns=[], sglang_port=0, sglang_rollback_deadline=10)
    found = _rules.variable_problems(settings, {'pve_node': 'pve9'})
    assert [message.split(' ')[0] for message in found] == [
        'sglang_model_path', 'pve_node', 'pve_node', 'sglang_kill_patterns', 'sglang_max_running_requests',
        'sglang_rollback_deadline']


@pytest.mark.parametrize('overrides, tiers', [
    ({}, {'1': {'candidate_steps': [1, 3]}, '8': {'candidate_steps': [0]}}),
    ({'sglang_speculative_num_steps': 1, 'sglang_dynamic_spec_batch_size_threshold': '16'},
     {'1': {'candidate_steps': [1]}, '16': {'candidate_steps': [0]}}),
    ({'sglang_dynamic_spec_adaptive_config': TIERS_WITHOUT_3}, TIERS_WITHOUT_3),
], ids=['derived', 'one-step', 'given'])
def test_adaptive_tiers_derive_from_the_steps_and_threshold(settings, overrides, tiers):
    settings.update(overrides)
    assert _rules.adaptive_config(settings) == tiers


def test_candidate_steps_read_only_batch_size_keys():
    assert _rules.candidate_steps(dict(TIERS_WITHOUT_3, ema={'candidate_steps': [9]}, x7={'candidate_steps': [7]},
                                       **{'4': {'candidate_steps': ['5']}})) == [0, 1, 2, 5]


IDLE_TOO_SHORT = ('sglang_rollback_idle ({idle} s) is shorter than what may pass on the controller between two renewals'
                  ' of the guard ({gap} s: the connection timeout {timeout} s x (1 + {retries} retries) + 30.0 s to'
                  ' build and send the next module on a loaded controller); the guard would roll back a run that is'
                  ' alive.')
FORKS = ('the batch has {batch} hosts but forks is {forks} under the free strategy: a host would wait for a fork as'
         ' long as another host waits for its server to load, which sglang_rollback_idle does not bound; raise forks'
         ' (-f) to the batch size or make the batches smaller (redeploy_serial).')


def controller(**keys):
    found = {'connect_timeout': 10, 'retries': 0, 'forks': 16, 'strategy': 'free', 'batch': 2}
    found.update(keys)
    return dict(PVE, controller=found)


@pytest.mark.parametrize('idle, inventory, messages', [
    # The defaults: 10 s x 1 + 30 s = 40 s of gap, well under the 90 s default.
    (90, controller(), []),
    (40, controller(), []),
    (39, controller(), [IDLE_TOO_SHORT.format(idle=39, gap=40.0, timeout=10, retries=0)]),
    # Retries multiply the connect timeout: 30 x 3 + 30 = 120.
    (90, controller(connect_timeout=30, retries=2), [IDLE_TOO_SHORT.format(idle=90, gap=120.0, timeout=30, retries=2)]),
    (120, controller(connect_timeout=30, retries=2), []),
    ('90', controller(connect_timeout='10'), []),
    # More hosts than forks under free: a host waits for a fork as long as another's health wait.
    (90, controller(batch=17, forks=16), [FORKS.format(batch=17, forks=16)]),
    (90, controller(batch=16, forks=16), []),
    # Forks bound a batch only under free (linear waits for every host between two steps anyway: docs/guard.md).
    (90, controller(strategy='linear', batch=17, forks=16), []),
    # No controller facts (a caller that has none): the connection's defaults, no fork rule.
    (39, PVE, [IDLE_TOO_SHORT.format(idle=39, gap=40.0, timeout=10, retries=0)]),
    (90, PVE, []),
], ids=['default', 'at-the-gap', 'below-the-gap', 'retries', 'retries-covered', 'strings', 'forks-short',
        'forks-enough', 'linear', 'no-facts-short', 'no-facts'])
def test_the_idle_bound_must_cover_the_controllers_gap_between_two_renewals(settings, idle, inventory, messages):
    settings['sglang_rollback_idle'] = idle
    assert _rules.variable_problems(settings, inventory) == messages


@pytest.mark.parametrize('args, dest', [
    (['--api-ke', 'k'], 'api_key'), (['--api=k'], 'api_key'), (['--admin', 'k'], 'admin_api_key'),
    (['--conf', 'f.yaml'], 'config'),
])
def test_an_abbreviation_argparse_takes_for_a_secret_flag_is_refused(args, dest):
    # SGLang builds its parser as argparse.ArgumentParser(prog="sglang serve"): abbreviations allowed.
    parser = argparse.ArgumentParser(prog='sglang serve')
    for flag in ('--api-key', '--admin-api-key', '--config', '--log-level', '--context-length'):
        parser.add_argument(flag)
    assert getattr(parser.parse_args(args), dest) is not None
    assert _rules.secret_flag(args[0])


FOLDERS = ('%s: the role keeps its files (launch configuration, keys, pid file, log) in folders of its own, which it'
           ' makes with mode 0750 when missing; use a dedicated subfolder, such as /etc/sglang, /run/sglang or'
           ' /var/log/sglang/server.log.')


@pytest.mark.parametrize('overrides, refusals', [
    # What the review ran: each left the system folder 0750 on both lab hosts.
    ({'sglang_run_dir': '/run'}, 'sglang_run_dir /run is the system folder /run'),
    ({'sglang_config_dir': '/etc'}, 'sglang_config_dir /etc is the system folder /etc'),
    ({'sglang_log_file': '/var/log/sglang.log'}, "sglang_log_file's folder /var/log is the system folder /var/log"),
    ({'sglang_run_dir': '/run/'}, 'sglang_run_dir /run/ is the system folder /run'),
    ({'sglang_run_dir': '/run/sglang/..'}, 'sglang_run_dir /run/sglang/.. is the system folder /run'),
    ({'sglang_config_dir': '//'}, 'sglang_config_dir // is the system folder /'),
    ({'sglang_config_dir': '/usr/local/bin'}, 'sglang_config_dir /usr/local/bin is the system folder /usr/local/bin'),
    ({'sglang_run_dir': '/tmp'}, 'sglang_run_dir /tmp is the system folder /tmp'),
    ({'sglang_run_dir': '/proc/sglang'}, 'sglang_run_dir /proc/sglang is under /proc, a kernel file system'),
    ({'sglang_run_dir': 'run/sglang'}, 'sglang_run_dir run/sglang is not an absolute path'),
    ({'sglang_run_dir': '/run', 'sglang_config_dir': '/etc', 'sglang_log_file': '/var/log/x.log'},
     "sglang_config_dir /etc is the system folder /etc; sglang_run_dir /run is the system folder /run;"
     " sglang_log_file's folder /var/log is the system folder /var/log"),
])
def test_a_system_folder_as_one_of_the_roles_folders_is_refused(settings, overrides, refusals):
    settings.update(overrides)
    assert _rules.variable_problems(settings, PVE) == [FOLDERS % refusals]


@pytest.mark.parametrize('overrides', [
    {'sglang_run_dir': '/run/sglang-b', 'sglang_config_dir': '/etc/sglang/b', 'sglang_log_file': '/var/log/b/s.log'},
    {'sglang_run_dir': '/srv/models/run', 'sglang_config_dir': '/opt/sglang', 'sglang_log_file': '/tmp/sglang/s.log'},
])
def test_a_dedicated_subfolder_of_a_system_folder_passes(settings, overrides):
    settings.update(overrides)
    assert _rules.variable_problems(settings, PVE) == []


def bound_message(name, given):
    bound = _timing.TIME_BOUNDS[name]
    return '%s (%s) must be %s: %s.' % (name, given, bound.words(), bound.why)


# A bound's relations (the deadline covers the window, the bake needs a router and a canary) are other rules': each
# case sets what they need, so that only the range speaks.
ROOM = {'sglang_rollback_deadline': 'auto', 'sglang_router_url': 'http://127.0.0.1:30080', 'sglang_canary': 1}


@pytest.mark.parametrize('name', sorted(_timing.TIME_BOUNDS))
@pytest.mark.parametrize('given', [1e12, '1e12', 'nan', float('nan'), 'inf', '1e309', 'most+1'],
                         ids=['1e12', '1e12-from-e', 'nan-from-e', 'nan', 'inf-from-e', 'overflow-from-e', 'just-over'])
def test_a_time_bound_over_its_maximum_is_refused_naming_it_its_value_and_its_range(settings, name, given):
    if given == 'most+1':
        given = _timing.TIME_BOUNDS[name].most + 1
    settings.update(ROOM, **{name: given})
    assert bound_message(name, given) in _rules.variable_problems(settings, PVE)


@pytest.mark.parametrize('name', sorted(_timing.TIME_BOUNDS))
def test_a_time_bound_at_its_maximum_passes(settings, name):
    settings.update(ROOM, **{name: _timing.TIME_BOUNDS[name].most})
    assert _rules.variable_problems(settings, PVE) == []


@pytest.mark.parametrize('name', sorted(_timing.TIME_BOUNDS))
def test_a_time_bound_under_its_floor_is_refused_by_the_plan(settings, name):
    """The table's floors (what the dashboard and the argument spec say) are the rules' own."""
    bound = _timing.TIME_BOUNDS[name]
    # The gate on (its timeout is checked with it), the tuner's folder set (its timeout is the tuner's).
    settings.update(ROOM, sglang_perf_gate=True, sglang_report_dir='/var/lib/reports',
                    **{name: bound.least - (1 if bound.least_allowed else 0)})
    found = _rules.variable_problems(settings, PVE) + _speculation.problems(settings)
    assert any(name in message for message in found), found
    if name in ('sglang_rollback_deadline', 'sglang_rollback_idle'):
        return  # just above the floor is still refused: the window and the renewal gap ask more (other rules)
    settings[name] = bound.least if bound.least_allowed else bound.least + 0.5
    assert _rules.variable_problems(settings, PVE) + _speculation.problems(settings) == []


def test_the_deadlines_maximum_covers_the_longest_window_the_other_maxima_allow(settings):
    settings.update({name: bound.most for name, bound in _timing.TIME_BOUNDS.items()})
    settings.update(ROOM, sglang_perf_gate=True, sglang_perf_levels=[1, 2, 4, 8, 16, 32, 64],
                    sglang_perf_requests=64, sglang_fleet_hosts=['gpu%d' % n for n in range(16)])
    assert _timing.window_budget(settings) <= _timing.TIME_BOUNDS['sglang_rollback_deadline'].most


def test_the_argument_spec_states_every_time_bounds_range_from_the_table():
    specs_file = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'roles', 'sglang', 'meta',
                              'argument_specs.yml')
    with open(specs_file) as handle:
        entry_points = yaml.safe_load(handle)['argument_specs']
    stated = {}
    for entry in entry_points.values():
        for name, spec in entry['options'].items():
            if name in _timing.TIME_BOUNDS:
                description = spec['description']
                stated.setdefault(name, []).append(' '.join(description if isinstance(description, list)
                                                            else [description]))
    assert sorted(stated) == sorted(_timing.TIME_BOUNDS)
    # A new time variable (documented in seconds) gets its row in the table, or this fails.
    in_seconds = set(name for entry in entry_points.values() for name, spec in entry['options'].items()
                     if str(spec['description']).lstrip("['\"").startswith('Seconds'))
    assert in_seconds <= set(_timing.TIME_BOUNDS), in_seconds - set(_timing.TIME_BOUNDS)
    for name, descriptions in stated.items():
        for description in descriptions:
            assert 'Range: %s' % _timing.TIME_BOUNDS[name].words() in description, (name, description)


SHIPPED_PATCH = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'files',
                             'eagle_dynamic_spec_threshold.diff')
READS_IT = ('--- a/w.py\n+++ b/w.py\n@@ -1 +1,2 @@\n import os\n'
            '+LIMIT = int(os.environ.get("SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE", "0"))\n')
# Named only in context (unchanged) or removed lines, or as part of a longer name: nothing the patch adds reads it.
CONTEXT_ONLY = ('--- a/w.py\n+++ b/w.py\n@@ -1,2 +1,2 @@\n # SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE\n'
                '-x = "SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE"\n+x = "SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE_OLD"\n')
HEADER_ONLY = '--- a/SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE\n+++ b/SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE\n@@ -1 +1 @@\n-a\n+b\n'


@pytest.mark.parametrize('overrides, patch, reader', [
    ({'sglang_dynamic_spec_env_read_by': 'patch'}, READS_IT, 'patch'),
    ({'sglang_dynamic_spec_env_read_by': 'patch'}, 'shipped', 'patch'),
    ({'sglang_dynamic_spec_env_read_by': 'patch'}, None, None),
    ({'sglang_dynamic_spec_env_read_by': 'patch'}, CONTEXT_ONLY, None),
    ({'sglang_dynamic_spec_env_read_by': 'patch'}, HEADER_ONLY, None),
    ({'sglang_dynamic_spec_env_read_by': 'patch', 'sglang_dynamic_spec_env_name': 'MY_SWITCH'}, READS_IT, None),
    ({'sglang_dynamic_spec_env_read_by': 'installed'}, None, 'installed'),
    ({'sglang_dynamic_spec_env_read_by': 'patch', 'sglang_dynamic_spec_mode': 'adaptive'}, None, ''),
    ({'sglang_dynamic_spec_env_read_by': 'patch', 'sglang_dynamic_spec_enabled': 'false'}, None, ''),
], ids=['added-line-reads-it', 'shipped-patch', 'no-patch', 'only-context-or-removed', 'only-file-header',
        'other-variable', 'installed-by-the-operators-word', 'adaptive-mode', 'dynamic-speculation-off'])
def test_who_reads_the_dynamic_speculation_variable(settings, overrides, patch, reader):
    settings.update(overrides)
    if patch == 'shipped':
        with open(SHIPPED_PATCH) as handle:
            patch = handle.read()
    assert _rules.dynamic_spec_env_reader(settings, patch) == reader
    assert bool(_rules.dynamic_spec_env_problems(settings, patch)) == (reader is None)


def test_env_mode_that_nothing_reads_is_refused_saying_what_to_do(settings):
    settings.update(sglang_dynamic_spec_env_read_by='patch', sglang_patch_file='files/other.diff')
    assert _rules.dynamic_spec_env_problems(settings, CONTEXT_ONLY) == [
        'sglang_dynamic_spec_mode env sets SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE on the server, but nothing is known'
        ' to read it: sglang_patch_file files/other.diff adds no line naming it, and upstream SGLang ignores it, so'
        ' dynamic speculation would be silently off while the report says healthy. Use a patch whose added lines read'
        " it, or sglang_dynamic_spec_mode: adaptive (upstream's, sglang 0.5.23 or later), or"
        ' sglang_dynamic_spec_enabled: false; set sglang_dynamic_spec_env_read_by: installed only when the installed'
        ' sglang already reads it.']
    settings.update(sglang_patch_file='', sglang_dynamic_spec_env_read_by='maybe')
    assert _rules.dynamic_spec_env_problems(settings, None) == [
        'sglang_dynamic_spec_env_read_by (maybe) must be patch or installed.']


# The longest window each variable's own range allows: 16 levels of an hour, a day's bake, four hours of load.
LONG_WINDOW = dict(ROOM, sglang_perf_gate=True, sglang_perf_levels=list(range(1, 17)), sglang_perf_requests=16,
                   sglang_perf_timeout=3600, sglang_canary_bake=86400, sglang_health_timeout=14400,
                   sglang_fleet_hosts=['gpu1', 'gpu2'])
WINDOW_HEAD = ("The outage window (timing.window_budget, the guard's deadline with sglang_rollback_deadline auto) lasts"
               " %s s (%s days), longer than a rollback guard may keep a host off its previous server (172800 s,"
               " sglang_rollback_deadline's maximum: ")


@pytest.mark.parametrize('overrides, group, found', [
    # Each within its range, together 2.5 days: the auto deadline is that long, refused naming the largest terms.
    ({}, None, [(WINDOW_HEAD % ('216520', '2.5'),
                 '2 benchmarks x 16 levels (sglang_perf_levels) x sglang_perf_timeout 3600 s: 115200 s, sglang_canary'
                 '_bake 86400 s and 2 /metrics readings of the canary and each of 1 other fleet servers: 86440 s,')]),
    # A deadline given at its maximum cannot cover it either: the window is named, not "raise the deadline".
    ({'sglang_rollback_deadline': 172800}, None, [(WINDOW_HEAD % ('216520', '2.5'), '115200 s')]),
    # The fleet's size: a bake reads every other server twice, 10 s each, and a rank > 0 waits for rank 0's bake.
    ({'sglang_perf_gate': False, 'sglang_fleet_hosts': ['gpu%d' % n for n in range(9000)]}, {'rank': 1},
     [("What this rank waits for after its start without renewing its guard (timing.ranks_started_after) lasts"
       " 280860 s (3.3 days)", "rank 0's start (sglang_health_timeout): 14400 s"),
      (WINDOW_HEAD % ('281280', '3.3'), 'sglang_canary_bake 86400 s and 2 /metrics readings of the canary and each'
                                       ' of 8999 other fleet servers: 266400 s')]),
], ids=['auto-deadline', 'given-deadline', 'fleet-of-9000-rank-1'])
def test_a_window_longer_than_a_guard_may_hold_a_host_is_refused_naming_what_made_it_long(settings, overrides,
                                                                                          group, found):
    settings.update(LONG_WINDOW, **overrides)
    levels = _performance.levels_to_measure(settings['sglang_perf_levels'], 8)
    problems = _rules.window_problems(settings, group, levels)
    assert len(problems) == len(found), problems
    for problem, (head, term) in zip(problems, found):
        assert problem.startswith(head) and term in problem and problem.endswith('Shorten the longest of these.')
    # The per-variable rules have nothing to say: each is within its range, and no "shorter deadline" advice.
    assert _rules.variable_problems(settings, PVE) == []


def test_a_window_within_the_maximum_and_a_variable_out_of_its_own_range_leave_the_window_rule_silent(settings):
    settings.update(LONG_WINDOW, sglang_perf_levels=list(range(1, 8)))
    assert _rules.window_problems(settings, {'rank': 1}, list(range(1, 8))) == []
    settings.update(sglang_perf_timeout=1e9)
    assert _rules.window_problems(settings, {'rank': 1}, list(range(1, 8))) == []
    assert bound_message('sglang_perf_timeout', 1e9) in _rules.variable_problems(settings, PVE)


@pytest.mark.parametrize('name', sorted(_timing.COUNT_BOUNDS))
def test_a_list_that_multiplies_time_is_held_to_its_count(settings, name):
    count = _timing.COUNT_BOUNDS[name]
    settings.update(ROOM, sglang_perf_gate=True, sglang_perf_requests=2000, sglang_perf_timeout=60)
    settings[name] = list(range(1, 2001))  # 2000 levels of an hour once made an auto deadline of 168 days
    assert ('%s has 2000 entries; it must have %s: %s.' % (name, count.words(), count.why)
            in _rules.variable_problems(settings, PVE))
    settings[name] = list(range(1, count.most + 1))
    assert _rules.variable_problems(settings, PVE) == []


def test_the_argument_spec_states_every_lists_count_from_the_table():
    specs_file = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', 'roles', 'sglang', 'meta',
                              'argument_specs.yml')
    with open(specs_file) as handle:
        options = yaml.safe_load(handle)['argument_specs']['main']['options']
    for name, count in _timing.COUNT_BOUNDS.items():
        description = options[name]['description']
        assert 'Count: %s' % count.words() in ' '.join(description if isinstance(description, list)
                                                       else [description]), (name, description)
