# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The files the role renders, rendered on the controller.

sglang_server_info compares them with the live files in the same round trip that reads the server;
the window writes each changed one as a candidate beside its live file, then moves it into place once
the server is stopped. Built here rather than with the template lookup, which deep-copies every
variable of the host for each file (about 0.05 s of controller time per file per host, on every run,
the no-op included).
"""

from __future__ import annotations

import json
import posixpath

import jinja2
from typing import Any

from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_bool, as_text
from ansible_collections.gpuops.sglang.plugins.plugin_utils._rules import adaptive, adaptive_config, role_folders


def paths(settings: Any) -> dict[str, Any]:
    """Where each file lives: the live file, its candidate, and the server's own run files."""
    config_dir, service = settings['sglang_config_dir'], settings['sglang_service_name']
    return {
        'launch_file': config_dir + '/launch.json',
        'launch_candidate': config_dir + '/launch.next.json',
        'unit_file': '/etc/systemd/system/%s.service' % service,
        'unit_candidate': '%s/%s.service.next' % (config_dir, service),
        'adaptive_file': config_dir + '/adaptive_spec.json',
        'adaptive_candidate': config_dir + '/adaptive_spec.next.json',
        # SGLang wants a .yaml name for --config.
        'keys_file': config_dir + '/server.yaml',
        'keys_candidate': config_dir + '/server.next.yaml',
        'launcher': config_dir + '/launcher.py',
        # What sglang_patch records after a verified apply; sglang_server_info reads it so a no-op needs no dry run.
        'patch_stamp': config_dir + '/patch.stamp.json',
        'pidfile': '%s/%s.pid' % (settings['sglang_run_dir'], service),
        'stop_marker': '%s/%s.stopped_at' % (settings['sglang_run_dir'], service),
        'guard_dir': '%s/%s' % (settings['sglang_guard_dir'], service),
        'base_url': 'http://%s:%s' % (settings['sglang_host'], as_text(settings['sglang_port'])),
        'folders': role_folders(settings),
        # What sglang_prefetch makes (the server user's, 0700) or refuses before anything stops.
        'cache_folders': sorted(set(cache_environment(settings).values())),
    }


def keyed(settings: Any) -> bool:
    """Without a key there is no keys file and no --config: the launch configuration stays what it was."""
    return len(settings['sglang_api_key']) > 0 or len(settings['sglang_admin_api_key']) > 0


def secret_labels(settings: dict[str, Any]) -> list[Any]:
    """The files whose content is secret, by label: the API keys file, and the launch configuration when it carries
    a secret environment. A dry run shows no diff of them (the unit and the flags carry no secret)."""
    return ((['launch configuration'] if settings['sglang_secret_environment'] else [])
            + (['API keys'] if keyed(settings) else []))


# The compile caches kept across restarts (issue 45): (tool, the variables that name its folder). Left alone,
# TorchInductor's lies under /tmp (torchinductor_USER), which a reboot or a unit with PrivateTmp empties, and the
# others under the server user's home. SGLang sets DG_JIT_CACHE_DIR from SGLANG_DG_CACHE_DIR when it loads DeepGEMM
# (0.5.12.post1 and 0.5.23), so DeepGEMM's folder is named by both. FLASHINFER_WORKSPACE_BASE is the folder FlashInfer
# keeps its JIT cache under (in .cache/flashinfer).
CACHES = (
    ('triton', ('TRITON_CACHE_DIR',)),
    ('torchinductor', ('TORCHINDUCTOR_CACHE_DIR',)),
    ('flashinfer', ('FLASHINFER_WORKSPACE_BASE',)),
    ('deep_gemm', ('SGLANG_DG_CACHE_DIR', 'DG_JIT_CACHE_DIR')),
)


def cache_environment(settings: dict[str, Any]) -> dict[str, str]:
    """The cache variables the launch sets: each tool's folder sglang_cache_dir/SERVICE/TOOL, but for a tool whose
    variables the operator named any of (sglang_environment, sglang_secret_environment: theirs is kept, and one of
    DeepGEMM's two alone is not overridden through the other); none when sglang_cache_dir is ""."""
    root = as_text(settings['sglang_cache_dir'])
    if not root:
        return {}
    named = set(settings['sglang_environment']) | set(settings['sglang_secret_environment'])
    folder = posixpath.join(posixpath.normpath(root), as_text(settings['sglang_service_name']))
    return {name: posixpath.join(folder, tool) for tool, names in CACHES if not named & set(names) for name in names}


def dynamic_environment(settings: dict[str, Any]) -> dict[str, str]:
    """The patch's switch: the batch size from which the patched server stops drafting (env mode only)."""
    if as_bool(settings['sglang_dynamic_spec_enabled']) and settings['sglang_dynamic_spec_mode'] == 'env':
        return {settings['sglang_dynamic_spec_env_name']: as_text(settings['sglang_dynamic_spec_batch_size_threshold'])}
    return {}


def nice_json(data: dict[str, Any]) -> str:
    """Ansible's to_nice_json(indent=2), with the newline a text file ends with."""
    return json.dumps(data, indent=2, sort_keys=True, separators=(',', ': ')) + '\n'


def render(template_text: str, variables: dict[str, Any]) -> str:
    """A role template as the template lookup renders it (trim_blocks, the trailing newline kept)."""
    environment = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    environment.filters['to_json'] = json.dumps
    return environment.from_string(template_text).render(variables)


def launch(settings: dict[str, Any], args: list[Any], gpu_environment: dict[str, str] | None = None) -> dict[str, Any]:
    """What launcher.py reads: interpreter, module, argv and environment (the secret one included). The GPUs a
    server owns (`gpu_environment`, _colocated.gpu_environment) are named by no other variable (the rules see to it)."""
    environment = cache_environment(settings)
    environment.update(settings['sglang_environment'])
    environment.update(dynamic_environment(settings))
    environment.update(settings['sglang_secret_environment'])
    environment.update(gpu_environment or {})
    return {'python': settings['sglang_python'], 'module': settings['sglang_launch_module'], 'args': args,
            'environment': environment}


def secret_mode(settings: dict[str, Any]) -> str:
    """The mode of the files that hold secrets and that the server reads (the launch configuration, its keys): root's
    alone, or also its group's (the role writes them with group sglang_group) when the server runs as another user."""
    return '0600' if settings['sglang_user'] == 'root' else '0640'


def configs(settings: dict[str, Any], args: list[Any], templates: dict[str, str],
            gpu_environment: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """[{label, path, candidate, mode, content, systemd_only}], in the order the role has always listed them.

    `templates` holds the text of the role's sglang.service.j2 and server_keys.yaml.j2 by name.
    """
    where = paths(settings)
    # The templates' own names for the two paths the plan computed (beside the role's settings).
    variables = dict(settings, launcher=where['launcher'], launch_file=where['launch_file'])
    secret = secret_mode(settings)
    files = [
        {'label': 'launch configuration', 'path': where['launch_file'], 'candidate': where['launch_candidate'],
         'mode': secret, 'content': nice_json(launch(settings, args, gpu_environment)), 'systemd_only': False},
        {'label': 'systemd unit', 'path': where['unit_file'], 'candidate': where['unit_candidate'], 'mode': '0644',
         'content': render(templates['sglang.service.j2'], variables), 'systemd_only': True},
    ]
    if adaptive(settings):
        files.append({'label': 'adaptive tiers', 'path': where['adaptive_file'], 'candidate': where['adaptive_candidate'],
                      'mode': '0644', 'content': nice_json(adaptive_config(settings)), 'systemd_only': False})
    if keyed(settings):
        files.append({'label': 'API keys', 'path': where['keys_file'], 'candidate': where['keys_candidate'],
                      'mode': secret, 'content': render(templates['server_keys.yaml.j2'], variables),
                      'systemd_only': False})
    return files


def pairs(files: list[dict[str, Any]], manager: str) -> list[dict[str, str]]:
    """Candidate and live path of each file, without its content (loop items are shown, secrets inside);
    the systemd unit only where systemd manages the server."""
    return [{'label': entry['label'], 'mode': entry['mode'], 'candidate': entry['candidate'], 'live': entry['path']}
            for entry in files if manager == 'systemd' or not entry['systemd_only']]
