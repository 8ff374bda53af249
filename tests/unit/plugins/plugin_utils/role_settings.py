"""The role's defaults as the plan reads them: defaults/main.yml, its few templated values rendered."""
import os

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
DEFAULTS = os.path.join(REPO, 'roles', 'sglang', 'defaults', 'main.yml')
# What Ansible renders the templated defaults to without redeploy_* extra vars, on a host of group gpu.
RENDERED = {
    'sglang_canary': 0, 'sglang_max_fail_percentage': 100, 'sglang_max_unavailable': 0,
    'sglang_fleet_hosts': ['gpu1', 'gpu2'], 'sglang_router_worker_url': 'http://127.0.0.1:30000',
}
NEEDED = {'sglang_model_path': '/models/m', 'sglang_draft_model_path': '/models/draft'}


def role_defaults():
    with open(DEFAULTS) as handle:
        values = yaml.safe_load(handle)
    values.update(RENDERED)
    values['sglang_kill_patterns'] = [pattern for pattern in values['sglang_kill_patterns'] if '{{' not in pattern]
    values['sglang_kill_patterns'].append('sglang\\.launch_server')
    return values
