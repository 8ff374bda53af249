"""STAND-IN part: --speculative-adaptive read by the installed sglang release's own code.

The stand-in cannot import sglang (sglang/__init__ pulls in psutil, torch and the rest), but the file
that reads --speculative-adaptive-config, sglang/srt/speculative/adaptive_spec_params.py, is plain
Python over json, math and bisect. It imports a few helpers from modules that do need those packages;
this module loads that one file from the installed release, with exactly those helpers stubbed as a
lab server resolves them (no attention DP, no out-of-tree platform worker, one rank that logs), and
then follows the release's own start-up path:

- ``adaptive_unsupported_reason(server_args)``: a reason turns speculative_adaptive off with SGLang's
  warning, and /server_info then reports it off, as SGLang does;
- releases with batch-size tiers (0.5.23: ``resolve_candidate_steps_from_config`` while the server
  arguments resolve, with what its speculative_hook then derives from them: the draft steps must be a
  candidate, the draft tokens become steps + 1; then the worker's
  ``AdaptiveSpeculativeParams(initial_steps, cfg_path=...)``);
- releases with one flat list (0.5.12.post1: ``AdaptiveSpeculativeParams(initial_steps,
  config=load_adaptive_config(path))``), which ignore batch-size tiers.

A file the release rejects stops the start with the release's own error. What the release's code
decided is reported per batch size, so a test reads the draft steps the real parser gives a batch of
64 instead of trusting the JSON the role wrote. Batch sizes are routed as eager ones: the lab captures
no CUDA graphs, and with them SGLang pads a batch up to the next captured size before it routes it.
"""
import importlib.util
import logging
import os
import sys
import types

try:
    from importlib import metadata
except ImportError:  # pragma: no cover - Python < 3.8 is not a lab interpreter
    metadata = None

RELATIVE_PATH = os.path.join('srt', 'speculative', 'adaptive_spec_params.py')
logger = logging.getLogger('sglang_standin.adaptive')


class ArgsView(object):
    """SGLang's resolving_view/resolved_view over the stand-in's arguments: flags it lacks are off."""

    def __init__(self, resolved):
        self._resolved = resolved

    def __getattr__(self, name):
        return self._resolved.get(name)


class _Algorithm(object):
    @classmethod
    def from_string(cls, name):
        return cls()

    def get_platform_worker_cls(self):
        return None  # no out-of-tree platform plugin in the lab: the built-in EAGLE worker serves


def _log_info_on_rank0(log, message):
    log.info(message)


# Every name an adaptive_spec_params.py of a supported release imports from the rest of sglang.
STUBS = {
    'sglang.srt.utils': {'log_info_on_rank0': _log_info_on_rank0},
    'sglang.srt.arg_groups.overrides': {'resolving_view': lambda args: args, 'resolved_view': lambda args: args},
    'sglang.srt.runtime_context': {'attn_dp_enabled_of': lambda view: bool(view.enable_dp_attention)},
    'sglang.srt.speculative.spec_info': {'SpeculativeAlgorithm': _Algorithm},
}


def installed_source():
    """(path of the installed release's adaptive_spec_params.py or None, its sglang version or None)."""
    spec = importlib.util.find_spec('sglang')
    if spec is None or not spec.submodule_search_locations:
        return None, None
    path = os.path.join(list(spec.submodule_search_locations)[0], RELATIVE_PATH)
    version = None
    if metadata is not None:
        try:
            version = metadata.version('sglang')
        except metadata.PackageNotFoundError:
            pass
    return (path if os.path.exists(path) else None), version


def load_release_module(path):
    """Execute the installed file under its own name with the STUBS in place, then take them away."""
    saved = dict((name, sys.modules.get(name)) for name in _stub_names())
    try:
        for name in _stub_names():
            stub = types.ModuleType(name)
            stub.__path__ = []
            stub.__dict__.update(STUBS.get(name, {}))
            sys.modules[name] = stub
        spec = importlib.util.spec_from_file_location('sglang.srt.speculative.adaptive_spec_params', path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous


def _stub_names():
    names = set()
    for dotted in STUBS:
        parts = dotted.split('.')
        names.update('.'.join(parts[:i]) for i in range(1, len(parts) + 1))
    return sorted(names)


def resolve_adaptive(resolved):
    """Apply the release's start-up path to the resolved arguments; return what it decided.

    Sets resolved['speculative_adaptive'] to False where the release would turn it off, and the draft
    steps and tokens where a release with tiers derives them. Raises SystemExit with the release's own
    message where the release would not start.
    """
    path, version = installed_source()
    report = {'sglang': version, 'parser': path, 'tiers': False, 'disabled_reason': None,
              'candidate_steps_by_batch_size': None, 'initial_steps_by_batch_size': None}
    if path is None:
        sys.exit('error: --speculative-adaptive: the installed sglang (%s) has no %s' % (version, RELATIVE_PATH))
    try:
        module = load_release_module(path)
    except Exception as error:  # a release whose file needs a name STUBS lacks: say so, not a traceback
        sys.exit('error: the stand-in cannot load %s of sglang %s: %s: %s' % (path, version, type(error).__name__, error))
    reason = module.adaptive_unsupported_reason(ArgsView(resolved))
    if reason is not None:
        logger.warning('speculative_adaptive disabled: %s. Falling back to static speculative params.', reason)
        resolved['speculative_adaptive'] = False
        report['disabled_reason'] = reason
        return report
    config_path = resolved.get('speculative_adaptive_config')
    try:
        if hasattr(module, 'resolve_candidate_steps_from_config'):
            report['tiers'] = True
            resolve_tiered_steps(resolved, module.resolve_candidate_steps_from_config(cfg_path=config_path))
            params = module.AdaptiveSpeculativeParams(initial_steps=resolved['speculative_num_steps'],
                                                      cfg_path=config_path)
            slot_of = params._route
        else:
            if resolved.get('speculative_num_steps') is None:
                sys.exit('error: the stand-in needs --speculative-num-steps with --speculative-adaptive on sglang %s'
                         % version)
            params = module.AdaptiveSpeculativeParams(initial_steps=resolved['speculative_num_steps'],
                                                      config=module.load_adaptive_config(config_path))
            slot_of = lambda batch_size: params  # noqa: E731 - one list for every batch size
    except (OSError, ValueError, AssertionError, AttributeError, KeyError, TypeError) as error:
        sys.exit('error: --speculative-adaptive-config %s: %s: %s' % (config_path, type(error).__name__, error))
    # Routed as eager batch sizes: the lab captures no CUDA graphs. With CUDA graphs on, SGLang first pads a
    # batch up to the next captured size (AdaptiveSpeculativeParams.set_cuda_graph_bs), so a tier takes
    # effect from the captured size at or below it.
    batch_sizes = range(1, (resolved.get('max_running_requests') or 64) + 1)
    report['candidate_steps_by_batch_size'] = dict(
        (str(size), list(slot_of(size).candidate_steps)) for size in batch_sizes)
    report['initial_steps_by_batch_size'] = dict(
        (str(size), slot_of(size).current_steps) for size in batch_sizes)
    return report


def resolve_tiered_steps(resolved, candidate_steps):
    """The server arguments a release with tiers resolves from them (0.5.23's
    speculative_hook._init_adaptive_speculative_params, which imports too much to load here)."""
    if resolved.get('speculative_eagle_topk') is None:
        resolved['speculative_eagle_topk'] = 1
    if resolved.get('speculative_num_steps') is None:
        resolved['speculative_num_steps'] = candidate_steps[len(candidate_steps) // 2]
    if resolved['speculative_num_steps'] not in candidate_steps:
        raise ValueError('--speculative-num-steps=%s is not in the adaptive config candidate_steps %s. Pass one of '
                         'those values.' % (resolved['speculative_num_steps'], candidate_steps))
    resolved['speculative_num_draft_tokens'] = resolved['speculative_num_steps'] + 1
