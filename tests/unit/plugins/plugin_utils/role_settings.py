"""The role's defaults as the plan reads them: defaults/main.yml, its few templated values rendered."""
import os

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
DEFAULTS = os.path.join(REPO, 'roles', 'sglang', 'defaults', 'main.yml')
# What Ansible renders the templated defaults to without redeploy_* extra vars, on a host of group gpu, in a play
# of the role's own (sglang_rollout_policy's default: playbooks/redeploy.yml passes its first play's policy).
RENDERED = {
    'sglang_canary': 1, 'sglang_max_fail_percentage': 0, 'sglang_max_unavailable': 0,
    'sglang_fleet_hosts': ['gpu1', 'gpu2'], 'sglang_router_worker_url': 'http://127.0.0.1:30000',
}
# What a host must set beyond the defaults: the model, and (env mode being the default, with no patch) who reads the
# dynamic speculation variable; the tests of that rule set sglang_dynamic_spec_env_read_by back to patch.
NEEDED = {'sglang_model_path': '/models/m', 'sglang_draft_model_path': '/models/draft',
          'sglang_dynamic_spec_env_read_by': 'installed'}


def role_defaults():
    with open(DEFAULTS) as handle:
        values = yaml.safe_load(handle)
    values.update(RENDERED)
    values['sglang_kill_patterns'] = [pattern for pattern in values['sglang_kill_patterns'] if '{{' not in pattern]
    values['sglang_kill_patterns'].append('sglang\\.launch_server')
    return values
