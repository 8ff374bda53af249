# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where drafting stops paying: the speculation tuner's table (playbooks/tune_speculation.yml) and the
recommendation drawn from it. Pure functions; test_speculation.py.

The tuner measures one server in several modes over the same concurrency levels: ``plain`` (no drafting),
``eagle3`` (EAGLE-3 with the configured draft steps, drafting at every batch size) and, when asked,
``eagle3_steps_K`` for other step counts. Each mode's benchmark gives per level ``output_tok_s``,
``itl_p95_s`` and ``ttft_p95_s`` (module_utils/domain/_serving_benchmark.py); a level cut off by its timeout has
no figures.

The recommendation:
- ``threshold``: the first measured level at which plain decoding's output tok/s is at least EAGLE-3's (the
  configured steps), as the dynamic-speculation patch reads SGLANG_DYNAMIC_SPEC_DISABLE_BATCH_SIZE (drafting
  stops once the running batch reaches it); None when EAGLE-3 is ahead at every level (drafting always pays:
  nothing to stop). A level where EAGLE-3 is ahead again above the threshold is noted, never hidden: the
  threshold stays the first crossing, the note says the table is noisy or crosses twice.
- ``adaptive_config``: sglang 0.5.23's ``--speculative-adaptive-config`` (batch-size tiers, each with its
  ``candidate_steps``; 0 steps is no drafting): a tier at the first level and at each level where the best
  mode's steps change, with that one step count, so each tier runs what measured best from its batch size
  on. None when no mode drafts anywhere in it (plain decoding wins everywhere: no drafting to tier).
  ``num_steps``: the server's --speculative-num-steps that goes with it (0.5.23 refuses to start unless it
  is among the tiers' steps, and sets the draft tokens to it + 1): the configured steps when a tier has
  them, else the largest step count of the tiers.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.gpuops.sglang.plugins.plugin_utils._coerce import as_bool, as_float, as_int, as_text

PLAIN, CONFIGURED = 'plain', 'eagle3'
FIGURES = ('output_tok_s', 'itl_p95_s', 'ttft_p95_s')


def _positive_ints(values: list[Any]) -> bool:
    try:
        return bool(values) and all(as_int(value) > 0 for value in values)
    except (TypeError, ValueError):
        return False


def problems(settings: dict[str, Any]) -> list[Any]:
    """Why a tuning run with these settings cannot measure anything worth recommending ([] when it can)."""
    levels, steps = settings['sglang_tune_levels'] or [], settings['sglang_tune_steps'] or []
    found = []
    if not as_text(settings['sglang_speculative_algorithm']):
        found.append('sglang_speculative_algorithm is empty: the server does not draft, there is no threshold to tune.')
    if as_text(settings['sglang_server_group']):
        found.append('The tuner measures one single-node server at a time; %s is a node of the server group %s.'
                     % ('this host', as_text(settings['sglang_server_group'])))
    if not as_text(settings['sglang_report_dir']):
        found.append('sglang_report_dir is empty: the tuner writes its table and the vars file that applies it there.')
    if not _positive_ints(levels):
        found.append('sglang_tune_levels must be a list of concurrency levels above 0.')
    elif as_int(settings['sglang_tune_requests']) < max(as_int(level) for level in levels):
        found.append('sglang_tune_requests (%s) must be at least the highest level (%s): a level of N concurrent '
                     'requests needs N requests.' % (settings['sglang_tune_requests'], max(as_int(level) for level in levels)))
    if steps and not _positive_ints(steps):
        found.append('sglang_tune_steps must be draft step counts above 0.')
    elif steps and as_int(settings['sglang_speculative_eagle_topk']) != 1:
        found.append('sglang_tune_steps needs sglang_speculative_eagle_topk 1 (each step count runs with steps + 1 '
                     'draft tokens).')
    if as_int(settings['sglang_tune_max_new_tokens']) <= 0:
        found.append('sglang_tune_max_new_tokens must be above 0.')
    if as_float(settings['sglang_tune_timeout']) <= 0:
        found.append('sglang_tune_timeout must be above 0.')
    return found


def modes(configured_steps: int, candidate_steps: list[int] | tuple[()] = ()) -> list[dict[str, Any]]:
    """The modes a tuning run measures, in this order: [{name, steps}]."""
    configured = as_int(configured_steps)
    found = [{'name': PLAIN, 'steps': 0}, {'name': CONFIGURED, 'steps': configured}]
    for steps in sorted({as_int(steps) for steps in candidate_steps or ()}):
        if steps > 0 and steps != configured:
            found.append({'name': 'eagle3_steps_%d' % steps, 'steps': steps})
    return found


def mode_settings(mode: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The speculation settings a mode's server runs with: plain decoding none; the configured EAGLE-3 its own;
    another step count that many steps with steps + 1 draft tokens (top-k 1)."""
    if mode['steps'] == 0:
        return {'sglang_speculative_algorithm': '', 'sglang_speculative_num_steps': settings['sglang_speculative_num_steps'],
                'sglang_speculative_num_draft_tokens': settings['sglang_speculative_num_draft_tokens']}
    if mode['name'] == CONFIGURED:
        return {key: settings[key] for key in ('sglang_speculative_algorithm', 'sglang_speculative_num_steps',
                                               'sglang_speculative_num_draft_tokens')}
    return {'sglang_speculative_algorithm': settings['sglang_speculative_algorithm'],
            'sglang_speculative_num_steps': mode['steps'], 'sglang_speculative_num_draft_tokens': mode['steps'] + 1}


def overridden(mode: dict[str, Any], settings: dict[str, Any]) -> str:
    """Why a mode's plan is not that mode's server ('' when it is): the settings the plan read differ from the
    mode's own (an extra variable, -e, wins over the tuner's task variables), or drafting is not off at every
    batch size (dynamic speculation left on by an extra variable)."""
    differ = sorted(key for key, value in mode['settings'].items() if as_text(settings[key]) != as_text(value))
    if as_bool(settings['sglang_dynamic_spec_enabled']):
        differ.append('sglang_dynamic_spec_enabled')
    if not differ:
        return ''
    return ('The speculation tuner cannot measure the mode %s: %s %s given as extra variables (-e), which win over '
            'the mode\'s own settings; run the tuner without them.' % (
                mode['name'], ', '.join(differ), 'is' if len(differ) == 1 else 'are'))


def table(measured: dict[str, Any]) -> list[dict[str, Any]]:
    """The levels table from each mode's benchmark: {mode name: [benchmark level, ...]} ->
    [{concurrency, <mode>: {output_tok_s, itl_p95_s, ttft_p95_s} or None}], by concurrency."""
    rows = {}
    for name, levels in measured.items():
        for level in levels or []:
            row = rows.setdefault(int(level['concurrency']), {'concurrency': int(level['concurrency'])})
            # A level counts only when every request completed without an error (the gate's rule): a level of
            # failed requests reads 0 tok/s, which is no throughput to compare.
            usable = (not level.get('timed_out') and level.get('output_tok_s') is not None and not level.get('errors')
                      and level.get('completed', level.get('requests')) == level.get('requests'))
            row[name] = {key: level.get(key) for key in FIGURES} if usable else None
    names = list(measured)
    for row in rows.values():
        for name in names:
            row.setdefault(name, None)
    return [rows[concurrency] for concurrency in sorted(rows)]


def _throughput(row: dict[str, Any], name: str) -> int | None:
    figures = row.get(name)
    return None if not figures else figures.get('output_tok_s')


def best(row: dict[str, Any], mode_list: list[dict[str, Any]]) -> str | None:
    """The mode with the most output tok/s at this level (on a tie the one drafting fewer steps); None when
    no mode has figures here."""
    ranked = [(_throughput(row, mode['name']), -mode['steps'], mode['name']) for mode in mode_list
              if _throughput(row, mode['name']) is not None]
    return max(ranked)[2] if ranked else None


def recommend(levels: list[dict[str, Any]], mode_list: list[dict[str, Any]]) -> dict[str, Any]:
    """{threshold, adaptive_config, num_steps, best: [{concurrency, mode, steps}], notes: [...]}."""
    steps_of = {mode['name']: mode['steps'] for mode in mode_list}
    configured = steps_of[CONFIGURED]
    notes, threshold, best_rows, compared = [], None, [], 0
    for row in levels:
        plain, eagle = _throughput(row, PLAIN), _throughput(row, CONFIGURED)
        winner = best(row, mode_list)
        if winner is not None:
            best_rows.append({'concurrency': row['concurrency'], 'mode': winner, 'steps': steps_of[winner]})
        if plain is None and eagle is None:
            notes.append('concurrency %d: neither plain decoding nor EAGLE-3 served every request in time: not '
                         'compared' % row['concurrency'])
            continue
        if plain is None or eagle is None:
            # One mode served the level and the other did not (timed out, errors): the one that served is ahead.
            notes.append('concurrency %d: only %s served every request in time: counted as ahead'
                         % (row['concurrency'], 'plain decoding' if eagle is None else 'EAGLE-3'))
            plain, eagle = (1.0, 0.0) if eagle is None else (0.0, 1.0)
        compared += 1
        if threshold is None and plain >= eagle:
            threshold = row['concurrency']
        elif threshold is not None and eagle > plain:
            notes.append('concurrency %d: EAGLE-3 ahead again (%.1f against %.1f tok/s) above the threshold %s: '
                         'a noisy table or a second crossing; the threshold is the first crossing'
                         % (row['concurrency'], eagle, plain, threshold))
    if threshold is None and compared:
        notes.append('EAGLE-3 was ahead at every measured level: drafting never stops (no threshold)')
    tiers, previous = {}, None
    for row in best_rows:
        if row['steps'] != previous:
            tiers[str(row['concurrency'])] = {'candidate_steps': [row['steps']]}
            previous = row['steps']
    steps = sorted({tier['candidate_steps'][0] for tier in tiers.values()})
    if not any(steps):
        if tiers:
            notes.append('plain decoding was ahead at every measured level: no drafting to tier')
        tiers, num_steps = None, None
    else:
        num_steps = configured if configured in steps else max(steps)
    if tiers and min(int(key) for key in tiers) != 1:
        # 0.5.23 routes a batch below the lowest tier to the lowest tier: say so rather than guess level 1.
        notes.append('the lowest level measured is %s: its tier serves every smaller batch too' % min(tiers, key=int))
    # Plain decoding ahead from the first level compared on: drafting never pays on this host.
    never_draft = threshold is not None and compared > 0 and all(
        row['steps'] == 0 for row in best_rows) and threshold == min(row['concurrency'] for row in best_rows)
    return {'threshold': threshold, 'adaptive_config': tiers, 'num_steps': num_steps, 'best': best_rows,
            'notes': notes, 'compared': compared, 'never_draft': never_draft}


def vars_for(recommended: dict[str, Any], configured_steps: int, configured_draft_tokens: int,
             dynamic_mode: str) -> dict[str, Any]:
    """The role variables that apply a recommendation (the vars file passed to the redeploy with -e @FILE), for the
    host's sglang_dynamic_spec_mode: env (the patch reads the threshold, at the steps it was measured with) or
    adaptive (the release reads the tiers, with the steps they need). Plain decoding ahead everywhere: no drafting."""
    if recommended['never_draft']:
        return {'sglang_speculative_algorithm': ''}
    if dynamic_mode == 'adaptive':
        if not recommended['adaptive_config']:
            return {'sglang_dynamic_spec_enabled': False}
        steps = recommended['num_steps']
        draft_tokens = as_int(configured_draft_tokens) if steps == as_int(configured_steps) else steps + 1
        return {'sglang_dynamic_spec_enabled': True, 'sglang_dynamic_spec_adaptive_config': recommended['adaptive_config'],
                'sglang_speculative_num_steps': steps, 'sglang_speculative_num_draft_tokens': draft_tokens}
    # The threshold compares plain decoding with the configured steps: it holds for them only.
    found = {'sglang_speculative_num_steps': as_int(configured_steps),
             'sglang_speculative_num_draft_tokens': as_int(configured_draft_tokens)}
    if recommended['threshold'] is None:
        found['sglang_dynamic_spec_enabled'] = False
    else:
        found.update(sglang_dynamic_spec_enabled=True, sglang_dynamic_spec_batch_size_threshold=recommended['threshold'])
    return found


def lines(levels: list[dict[str, Any]], mode_list: list[dict[str, Any]], recommended: dict[str, Any]) -> list[str]:
    """The table as text, one line per level: each mode's output tok/s, the best marked with *."""
    names = [mode['name'] for mode in mode_list]
    width = max([len(name) for name in names] + [12])
    out = ['%-11s ' % 'concurrency' + ' '.join('%*s' % (width, name) for name in names)]
    winners = {row['concurrency']: row['mode'] for row in recommended['best']}
    for row in levels:
        cells = []
        for name in names:
            value = _throughput(row, name)
            text = '-' if value is None else '%.1f%s' % (value, '*' if winners.get(row['concurrency']) == name else '')
            cells.append('%*s' % (width, text))
        out.append('%-11d ' % row['concurrency'] + ' '.join(cells))
    out.append('output tok/s per mode (* the best at that level); threshold: %s' % (
        recommended['threshold'] if recommended['threshold'] is not None else 'none (EAGLE-3 ahead everywhere)'))
    return out


def restore_outcome(host: str, armed: bool, fired: Any, was_in_router: bool) -> str:
    """What a stopped tuning run says of the host after its rescue: nothing stopped (the guard was never armed), the
    previous server restored (healthy, and back in its router where it was in one), not restored yet, or restored
    only in part; the last two name the command that finishes it. `fired` is this run's restore (the guard's report
    of it), None when none was done."""
    if not armed:
        return 'Nothing was stopped (the guard was not armed).'
    finish = 'playbooks/rollback.yml --limit %s' % host
    if not fired:
        return 'The guard has not restored the previous server: %s does.' % finish
    readmitted = bool(fired.get('router_readmitted')) or not was_in_router
    if fired.get('status') == 'rolled_back' and readmitted:
        return 'The guard restored the previous server (healthy%s).' % (', back in the router' if was_in_router else '')
    problem = fired.get('router_problem')
    return 'The guard could not restore the previous server fully (%s%s): %s finishes it.' % (
        fired.get('status'), ', ' + problem if problem else '', finish)
