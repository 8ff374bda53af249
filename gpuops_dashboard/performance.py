"""The performance gate's verdict as a picture: per host, output tok/s before and after at each level.

From the run's per-host reports (their `performance` block, the role's sglang_performance verdict): one
panel per host with a pair of bars per concurrency level (before: the baseline, after: the new server),
the p95 inter-token latencies written under each pair and the verdict's reason above. Pure: the
summary in, SVG text out (every text escaped), as the timeline is.
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
    parts.append('<g class="host-performance" data-host="%s" data-verdict="%s">' % (escape(host), escape(verdict)))
    parts.append('<text x="%d" y="16" font-size="12" font-weight="bold">%s: <tspan fill="%s">%s</tspan></text>'
                 % (left, escape(host), VERDICT_COLOURS.get(verdict, '#52606d'), escape(verdict)))
    reason = block.get('reason') or ''
    parts.append('<text x="%d" y="30" font-size="9" fill="#52606d">%s<title>%s</title></text>'
                 % (left, escape(reason[:60] + ('...' if len(reason) > 60 else '')), escape(reason)))
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
    """SVG text: one panel per judged host; an empty string when no host's gate measured anything."""
    judged = judged_hosts(hosts_summary)
    if not judged:
        return ''
    width = PANEL_W * len(judged) + 20
    height = PANEL_H + 30
    parts = ['<svg xmlns="http://www.w3.org/2000/svg" class="performance" width="%d" height="%d" '
             'viewBox="0 0 %d %d" font-family="sans-serif" font-size="10">' % (width, height, width, height),
             '<rect width="100%" height="100%" fill="#ffffff"/>']
    for index, (host, block) in enumerate(judged.items()):
        parts.append('<g transform="translate(0, 14)">')
        _panel(parts, 10 + index * PANEL_W, host, block)
        parts.append('</g>')
    legend_y = height - 10
    parts.append('<rect x="10" y="%d" width="10" height="10" fill="%s"/><text x="24" y="%d">before (baseline)</text>'
                 % (legend_y - 9, BEFORE, legend_y))
    parts.append('<rect x="130" y="%d" width="10" height="10" fill="%s"/><text x="144" y="%d">after (new server),'
                 ' output tok/s per level; %s</text>' % (legend_y - 9, AFTER, legend_y, escape(title)))
    parts.append('</svg>')
    return '\n'.join(parts)
