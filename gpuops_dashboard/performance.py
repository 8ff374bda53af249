"""The performance gate's and the canary bake's verdicts as a picture.

From the run's per-host reports: for the gate (their `performance` block, the role's sglang_performance verdict)
one panel per host with a pair of bars per concurrency level (before: the baseline, after: the new server), the
p95 inter-token latencies written under each pair and the verdict's reason above; for the bake (their `bake`
block, sglang_canary_verdict's) one panel per canary with a pair of bars per latency (the servers still on the
previous version, the canary), p95 over the same window, and the requests each side served. Pure: the summary in,
SVG text out (every text escaped), as the timeline is.
"""
from gpuops_dashboard.timeline import escape

VERDICT_COLOURS = {'pass': '#2d6a4f', 'fail': '#c0392b', 'skipped': '#52606d'}
BEFORE = '#9aa5b1'
AFTER = '#0984e3'
PANEL_W = 300
PANEL_H = 190
PLOT_TOP = 52
PLOT_H = 100
BAR_W = 22


def judged_hosts(hosts_summary):
    """{host: performance} of the hosts whose gate measured something (levels reported)."""
    found = {}
    for host, report in sorted((hosts_summary or {}).items()):
        block = (report or {}).get('performance') or {}
        if block.get('levels'):
            found[host] = block
    return found


def baked_hosts(hosts_summary):
    """{host: bake} of the canaries whose bake read figures on both sides."""
    found = {}
    for host, report in sorted((hosts_summary or {}).items()):
        block = (report or {}).get('bake') or {}
        if block.get('canary') and block.get('baseline'):
            found[host] = block
    return found


BAKE_FIGURES = (('ttft_p95_s', 'TTFT'), ('itl_p95_s', 'ITL'), ('e2e_p95_s', 'E2E'))


def _bake_panel(parts, left, host, block):
    canary, baseline = block['canary'], block['baseline']
    _open_panel(parts, left, 'host-bake', host, host + ' bake', block.get('verdict', 'inconclusive'), block)
    slot = (PANEL_W - 20) / len(BAKE_FIGURES)
    for index, (name, label) in enumerate(BAKE_FIGURES):
        # Each latency on its own scale: TTFT and end-to-end latency are tenths of seconds, ITL milliseconds.
        theirs, mine = _figure(baseline, name), _figure(canary, name)
        top_value = max(theirs or 0, mine or 0) or 1.0
        x = left + 10 + index * slot + (slot - 2 * BAR_W - 4) / 2
        _bar(parts, x, theirs and theirs * 1000, top_value * 1000, BEFORE, 'p95 %s, previous version: %s s' % (label, theirs))
        _bar(parts, x + BAR_W + 4, mine and mine * 1000, top_value * 1000, AFTER, 'p95 %s, canary: %s s' % (label, mine))
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%s p95 ms</text>'
                     % (x + BAR_W + 2, PLOT_TOP + PLOT_H + 14, label))
    parts.append('<text x="%d" y="%d" font-size="9" fill="#52606d">requests: %s previous version, %s canary; errors %s / %s'
                 '</text>' % (left + 10, PLOT_TOP + PLOT_H + 26, baseline.get('requests'), canary.get('requests'),
                              baseline.get('errors'), canary.get('errors')))
    parts.append('</g>')


def _open_panel(parts, left, kind, host, heading, verdict, block):
    """A panel's group (class `kind`, its host and verdict as data), its heading and the verdict's reason."""
    parts.append('<g class="%s" data-host="%s" data-verdict="%s">' % (kind, escape(host), escape(verdict)))
    parts.append('<text x="%d" y="16" font-size="12" font-weight="bold">%s: <tspan fill="%s">%s</tspan></text>'
                 % (left, escape(heading), VERDICT_COLOURS.get(verdict, '#52606d'), escape(verdict)))
    reason = block.get('reason') or ''
    parts.append('<text x="%d" y="30" font-size="9" fill="#52606d">%s<title>%s</title></text>'
                 % (left, escape(reason[:60] + ('...' if len(reason) > 60 else '')), escape(reason)))


def _figure(side, name):
    return (side or {}).get(name)


def _ms(seconds):
    return '-' if seconds is None else '%.0f' % (seconds * 1000)


def _bar(parts, x, value, top_value, colour, label):
    height = 0 if not value or not top_value else value / top_value * PLOT_H
    y = PLOT_TOP + PLOT_H - height
    parts.append('<rect class="bar" x="%.1f" y="%.1f" width="%d" height="%.1f" fill="%s"><title>%s</title></rect>'
                 % (x, y, BAR_W, height, colour, escape(label)))
    parts.append('<text x="%.1f" y="%.1f" font-size="9" text-anchor="middle">%s</text>'
                 % (x + BAR_W / 2, y - 3, '-' if value is None else '%.0f' % value))


def _panel(parts, left, host, block):
    levels = block['levels']
    verdict = block.get('verdict', 'skipped')
    values = [_figure(row.get(side), 'output_tok_s') or 0 for row in levels for side in ('before', 'after')]
    top_value = max(values) or 1.0
    _open_panel(parts, left, 'host-performance', host, host, verdict, block)
    slot = (PANEL_W - 20) / max(len(levels), 1)
    for index, row in enumerate(levels):
        x = left + 10 + index * slot + (slot - 2 * BAR_W - 4) / 2
        before, after = row.get('before'), row.get('after')
        _bar(parts, x, _figure(before, 'output_tok_s'), top_value, BEFORE,
             'concurrency %s before: %s output tok/s' % (row['concurrency'], _figure(before, 'output_tok_s')))
        _bar(parts, x + BAR_W + 4, _figure(after, 'output_tok_s'), top_value, AFTER,
             'concurrency %s after: %s output tok/s' % (row['concurrency'], _figure(after, 'output_tok_s')))
        centre = x + BAR_W + 2
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">c=%s</text>'
                     % (centre, PLOT_TOP + PLOT_H + 14, escape(str(row['concurrency']))))
        parts.append('<text x="%.1f" y="%d" font-size="9" text-anchor="middle" fill="#52606d">ITL p95 %s/%s ms</text>'
                     % (centre, PLOT_TOP + PLOT_H + 26, _ms(_figure(before, 'itl_p95_s')),
                        _ms(_figure(after, 'itl_p95_s'))))
    parts.append('</g>')


def render(hosts_summary, title=''):
    """SVG text: one panel per judged host, then one per baked canary; an empty string when there is neither."""
    panels = ([(_panel, host, block) for host, block in judged_hosts(hosts_summary).items()]
              + [(_bake_panel, host, block) for host, block in baked_hosts(hosts_summary).items()])
    if not panels:
        return ''
    width = PANEL_W * len(panels) + 20
    height = PANEL_H + 30
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" class="performance" width="%d" height="%d" '
             'viewBox="0 0 %d %d" font-family="sans-serif" font-size="10">' % (width, height, width, height),
             '<rect width="100%" height="100%" fill="#ffffff"/>']
    for index, (draw, host, block) in enumerate(panels):
        parts.append('<g transform="translate(0, 14)">')
        draw(parts, 10 + index * PANEL_W, host, block)
        parts.append('</g>')
    legend_y = height - 10
    parts.append('<rect x="10" y="%d" width="10" height="10" fill="%s"/><text x="24" y="%d">before (baseline)</text>'
                 % (legend_y - 9, BEFORE, legend_y))
    parts.append('<rect x="130" y="%d" width="10" height="10" fill="%s"/><text x="144" y="%d">after (new server,'
                 ' the canary): output tok/s per level, p95 latencies of a bake; %s</text>'
                 % (legend_y - 9, AFTER, legend_y, escape(title)))
    parts.append('</svg>')
    return '\n'.join(parts)
