#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_benchmark
short_description: A bounded serving benchmark against one SGLang server
version_added: 0.3.0
description:
  - Sends, for each concurrency level in O(levels), O(requests) streamed C(/generate) requests (fixed prompt,
    O(max_new_tokens) tokens, greedy, C(ignore_eos)) with that many in flight at once, straight to one server
    (never through a router), and measures output tokens per second, time to first token and inter-token
    latency (p50, p95), errors and whether the level ran out of time.
  - Where the server exports Prometheus figures (SGLang's C(--enable-metrics)), RV(metrics) adds its own
    C(sglang:gen_throughput) and C(sglang:spec_accept_length); otherwise RV(metrics) is null and the
    figures measured from outside stand alone.
  - Runs on the gpu host against the server's own address, like its health checks. The
    C(gpuops.sglang.sglang) role's performance gate runs it on the old and the new server and judges them
    (docs/performance-gate.md).
  - Given the server's identity (O(manager) with O(service_name), O(launch_file) and O(pidfile), as
    M(gpuops.sglang.sglang_server_info) takes it; the role always gives it), it sends nothing (no drain read, no
    request, no API key) until the socket listening where O(url) connects is held by the server's own processes,
    and checks that again before each level and before the C(/metrics) read. Another process holding the port
    (a local user may bind it once the server is gone) is named, by PID, user and command, and the module fails
    with nothing measured.
  - Without O(manager) (an ad-hoc call with O(url) alone), nothing says whose port it is, and the URL is
    trusted as given - whoever listens there gets the load, and the API key of O(launch_file) when one is given.
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
  - gpuops.sglang.server
  - gpuops.sglang.server_api_key
  - gpuops.sglang.guard_lease
attributes:
  check_mode:
    support: full
    details: Measures nothing (a benchmark is load on a server) and says so in RV(measured); never changes anything.
  diff_mode:
    support: none
    details: Not applicable.
  platform:
    platforms: posix
options:
  manager:
    description:
      - How the server runs (the same option as M(gpuops.sglang.sglang_server)'s); V(auto) picks V(systemd) where
        the host runs it, V(detached) elsewhere.
      - Given, the server's identity is O(manager), O(service_name), O(launch_file) and O(pidfile) (all required
        then), and the socket listening at O(url) must be the server's own before anything is sent.
      - Left out, O(url) is trusted as given (O(pidfile) must be left out too), and O(launch_file) is optional (it
        only gives the API key).
    type: str
    choices: [auto, systemd, detached]
  url:
    description:
      - Base URL the server answers at, for example V(http://127.0.0.1:30000).
      - With O(manager), nothing is sent to it (no drain read, no request, no API key) until the socket listening
        where it connects is held by the server's own processes, as M(gpuops.sglang.sglang_server_info) checks it;
        without O(manager), it is trusted as given.
  launch_file:
    # Where the server's API key is read (none without it); optional without O(manager).
    required: false
  pidfile:
    required: false
  levels:
    description: Concurrency levels, each measured in turn.
    type: list
    elements: int
    required: true
  requests:
    description: Requests per level.
    type: int
    default: 32
  max_new_tokens:
    description: Tokens each request generates.
    type: int
    default: 64
  prompt:
    description: The prompt every request sends.
    type: str
    default: Write a short story about a lighthouse keeper who finds a message in a bottle.
  timeout:
    description:
      - Seconds each level may take; a level cut off by it is marked RV(levels[].timed_out).
      - It bounds each request's whole exchange too, however the server paces its answer, and a request's
        event line over 1 MiB is an error, so a broken or hostile server can neither hold the benchmark nor
        grow its memory.
    type: float
    default: 60
  read_metrics:
    description: Read the server's C(/metrics) after the load.
    type: bool
    default: true
  drain_timeout:
    description:
      - Seconds to wait first until the server holds no request (its C(/v1/loads) or C(/get_load)), so that the
        figures are the benchmark's own; V(0) does not wait. Taken out of a router, a server still finishes what
        was routed to it.
    type: float
    default: 0
seealso:
  - module: gpuops.sglang.sglang_server
'''

EXAMPLES = r'''
- name: Benchmark the server at concurrency 1 and 16 (only while its port is its own, as the role runs it)
  gpuops.sglang.sglang_benchmark:
    manager: systemd
    service_name: sglang
    launch_file: /etc/sglang/launch.json
    pidfile: /run/sglang/sglang.pid
    url: http://127.0.0.1:30000
    levels: [1, 16]
    requests: 32
    max_new_tokens: 64
  register: benchmark

- name: Benchmark whatever answers at a URL (trusted as given, no API key)
  gpuops.sglang.sglang_benchmark:
    url: http://127.0.0.1:30000
    levels: [1]

- name: Show the throughput per level
  ansible.builtin.debug:
    msg: "{{ benchmark.levels | map(attribute='output_tok_s') | list }}"
'''

RETURN = r'''
measured:
  description: Whether anything was measured (false in check mode).
  returned: always
  type: bool
levels:
  description: One entry per level, in the order of O(levels) (empty in check mode).
  returned: always
  type: list
  elements: dict
  contains:
    concurrency:
      description: Requests in flight at once.
      type: int
    requests:
      description: Requests sent.
      type: int
    completed:
      description: Requests that streamed to their end.
      type: int
    errors:
      description: Requests that failed (an error status, a broken stream).
      type: int
    output_tokens:
      description: Tokens generated by the completed requests.
      type: int
    wall_s:
      description: Seconds the level took.
      type: float
    output_tok_s:
      description: Output tokens per second over the level.
      type: float
    ttft_p50_s:
      description: Median time to first token (null without a completed request).
      type: float
    ttft_p95_s:
      description: 95th percentile time to first token.
      type: float
    itl_p50_s:
      description: Median inter-token latency (null when no request streamed two tokens).
      type: float
    itl_p95_s:
      description: 95th percentile inter-token latency.
      type: float
    timed_out:
      description: Whether O(timeout) cut the level off.
      type: bool
    first_error:
      description: Why the first failed request of the level failed (null without an error).
      type: str
metrics:
  description:
    - The server's own Prometheus figures after the load (null without C(/metrics) or O(read_metrics), and where
      one of them is not a finite number, such as C(NaN), since such a reading is not believed).
  returned: always
  type: dict
  contains:
    gen_throughput:
      description: C(sglang:gen_throughput), tokens per second.
      type: float
    spec_accept_length:
      description: C(sglang:spec_accept_length), accepted tokens per draft step (null without speculation).
      type: float
elapsed_s:
  description: Seconds the benchmark took (0 when nothing was measured).
  returned: always
  type: float
drain:
  description: The wait for an idle server (O(drain_timeout)); null when not asked.
  returned: always
  type: dict
msg:
  description:
    - What was measured, or why nothing was (with O(manager), a port held by another process names it by PID, user
      and command).
  returned: always
  type: str
'''

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native

from ansible_collections.gpuops.sglang.plugins.module_utils.base._command import CommandRunner
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._lease import GUARD_OPTION, LeaseError, Renewer
from ansible_collections.gpuops.sglang.plugins.module_utils._module import fail, new_result, require_positive, run_module
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._server import SERVER_OPTIONS, Server, ServerError
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._serving_benchmark import run_benchmark

ARGUMENT_SPEC = dict(
    SERVER_OPTIONS,
    # The server's identity, as sglang_server_info takes it; all of it or none (an ad-hoc call knows only the URL).
    manager=dict(type='str', choices=['auto', 'systemd', 'detached']),
    launch_file=dict(SERVER_OPTIONS['launch_file'], required=False),
    pidfile=dict(SERVER_OPTIONS['pidfile'], required=False),
    levels=dict(type='list', elements='int', required=True),
    requests=dict(type='int', default=32),
    # A count of tokens, not a secret.
    max_new_tokens=dict(type='int', default=64, no_log=False),
    prompt=dict(type='str', default='Write a short story about a lighthouse keeper who finds a message in a bottle.'),
    timeout=dict(type='float', default=60),
    read_metrics=dict(type='bool', default=True),
    drain_timeout=dict(type='float', default=0),
    guard=GUARD_OPTION,
)
# Without the manager the rest of the identity is no check, and a pid file alone would look like one.
REQUIRED_BY = {'manager': ['launch_file', 'pidfile'], 'pidfile': ['manager']}


def bound(params: dict[str, Any]) -> float:
    """The longest the benchmark may take: the drain, each level's timeout, the /metrics read."""
    return params['drain_timeout'] + len(params['levels']) * params['timeout'] + 10


def server_of(module: AnsibleModule) -> Server:
    """The server the benchmark talks to (only its HTTP side and whose port it is: nothing is started or stopped)."""
    params = module.params
    if params['manager'] is None:
        # An ad-hoc call with the URL alone: nothing names the server's processes, so whose port it is cannot be
        # checked, and the URL is trusted as given (documented).
        return Server('detached', params['service_name'], params['launch_file'] or os.devnull, os.devnull,
                      os.devnull, params['url'], check_listener=False)
    manager = params['manager']
    if manager == 'auto':
        manager = 'systemd' if os.path.isdir('/run/systemd/system') else 'detached'
    # One deadline per command (systemctl show): a wedged systemd must not hang the benchmark.
    return Server(manager, params['service_name'], params['launch_file'], params['pidfile'], os.devnull,
                  params['url'], runner=CommandRunner(module, 30).as_runner(), user=params['user'], group=params['group'])


def level_line(level: dict[str, Any]) -> str:
    return 'concurrency %d: %.1f output tok/s, %d error(s)%s%s' % (
        level['concurrency'], level['output_tok_s'], level['errors'],
        ' (first: %s)' % level['first_error'] if level.get('first_error') else '',
        ' (timed out)' if level['timed_out'] else '')


def measure(module: AnsibleModule, result: dict[str, Any], lease: Renewer) -> None:
    params = module.params
    server = server_of(module)
    for name in ('requests', 'max_new_tokens', 'timeout'):
        require_positive(params, name)
    if not params['levels'] or min(params['levels']) <= 0:
        fail('levels must list positive concurrencies')
    if module.check_mode:
        result['msg'] = 'check mode: nothing was measured (a benchmark is load on the server)'
        return
    # Issue 41: a local user holding the server's port (bound once the server was gone) would get the load and the
    # key. Nothing is sent, not even the drain's read, unless the socket listening at the URL is the server's own.
    not_ours = server.listener_not_ours()
    if not_ours is not None:
        fail('%s: nothing was measured or sent (the server must hold its own port: see whether it still runs, and'
             ' what else holds the port)' % not_ours)
    # Inside the window the guard's lease is held for the whole bounded benchmark, and renewed while it runs.
    lease.renew(bound(params))
    if params['drain_timeout'] > 0:
        server.progress = lease.tick
        result['drain'] = server.wait_idle(params['drain_timeout'])
    try:
        found = run_benchmark(params['url'], params['levels'], params['requests'], params['max_new_tokens'],
                              params['prompt'], params['timeout'], api_key=server.api_key(),
                              read_metrics=params['read_metrics'],
                              on_progress=lambda: lease.tick(bound(params)), listener_check=server.listener_not_ours)
    except (OSError, ValueError, RuntimeError) as exc:
        fail('benchmarking the server at %s failed: %s' % (params['url'], to_native(exc)))
    result.update(measured=True, levels=found['levels'], metrics=found['metrics'], elapsed_s=found['elapsed_s'])
    lease.done()
    result['msg'] = 'measured %s: %s' % (params['url'], ', '.join(level_line(level) for level in found['levels']))


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_by=REQUIRED_BY, supports_check_mode=True)
    # msg is set by measure() on success, by the failure otherwise.
    result = new_result(measured=False, levels=[], metrics=None, elapsed_s=0.0, drain=None)
    lease = Renewer.from_option(None if module.check_mode else module.params['guard'], 'sglang_benchmark')
    # LeaseError: the guard restored while this ran; its message says so. ServerError: systemd did not say whether
    # the server runs, so whose port it is is unknown; its message says what failed.
    run_module(module, result, lambda: measure(module, result, lease), errors=(LeaseError, ServerError))


if __name__ == '__main__':
    main()
