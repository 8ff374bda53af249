"""A finished redeploy as a picture: one row per host, one bar per phase, on the controller's clock.

Bars come from the run's events (each phase from its first task start to its last result); the host's
own measurements (phases_s, downtime_s from the report) are written on the picture and in each bar's
tooltip. Pure: records and summary in, SVG text out.
"""
import datetime
from html import escape as _html_escape

from ansible_collections.gpuops.sglang.plugins.plugin_utils._steps import STEPS
from gpuops_dashboard.phases import PHASE_LABELS, WINDOW_PHASES, host_phases


def escape(value):
    """Text or attribute value for the SVG: <, >, & and both quotes escaped (saxutils.escape leaves quotes,
    and a host name with a `"` would end a data-host attribute and start one of its own)."""
    return _html_escape(str(value), quote=True)


COLOURS = {step.phase: step.colour for step in STEPS}
# Every status a run's report can have (plugin_utils/_report.py); an undo's `undone` is a success, as `redeployed`.
STATUS_COLOURS = {'redeployed': '#2d6a4f', 'undone': '#2d6a4f', 'unchanged': '#52606d', 'skipped': '#52606d',
                  'rolled_back': '#c0392b', 'failed': '#c0392b'}
# The legend: the window's steps between the few around them that every run has.
LEGEND = ('preflight', 'prepare', 'prefetch', 'arm') + WINDOW_PHASES + ('confirm', 'rollback')

WIDTH = 960
LEFT = 90
RIGHT = 20
ROW = 64
TOP = 34


def _seconds(stamp):
    return datetime.datetime.fromisoformat(stamp).timestamp()


def _tick_step(span):
    for step in (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600):
        if span / step <= 12:
            return step
    return 1200


def render(records, hosts_summary, title=''):
    """SVG text for a run: `records` are its progress records, `hosts_summary` its per-host reports."""
    rows = host_phases(records)
    names = sorted(set(rows) | set(hosts_summary or {}))
    stamps = [_seconds(record['at']) for record in records if record.get('at')]
    origin = min(stamps) if stamps else 0.0
    end = max(stamps) if stamps else 1.0
    span = max(end - origin, 1.0)
    plot = WIDTH - LEFT - RIGHT
    height = TOP + ROW * max(len(names), 1) + 54

    def x(stamp):
        return LEFT + (_seconds(stamp) - origin) / span * plot

    parts = ['<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="%d" height="%d" viewBox="0 0 %d %d" '
             'font-family="sans-serif" font-size="11">' % (WIDTH, height, WIDTH, height),
             '<rect width="100%%" height="100%%" fill="#ffffff"/>',
             '<text x="%d" y="16" font-size="13" font-weight="bold">%s</text>' % (LEFT, escape(title))]
    step = _tick_step(span)
    tick = 0.0
    while tick <= span + 1e-9:
        tx = LEFT + tick / span * plot
        parts.append('<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e4e7eb"/>' % (tx, TOP - 6, tx, height - 40))
        parts.append('<text x="%.1f" y="%d" text-anchor="middle" fill="#616e7c">%gs</text>' % (tx, height - 26, tick))
        tick += step
    for index, name in enumerate(names):
        top = TOP + index * ROW
        summary = (hosts_summary or {}).get(name) or {}
        measured = summary.get('phases_s') or {}
        parts.append('<g class="host" data-host="%s">' % escape(name))
        parts.append('<text x="8" y="%d" font-size="13" font-weight="bold">%s</text>' % (top + 20, escape(name)))
        status = summary.get('status')
        if status:
            parts.append('<text x="8" y="%d" fill="%s">%s</text>' % (top + 36, STATUS_COLOURS.get(status, '#333'),
                                                                   escape(status)))
        window = []
        for phase in rows.get(name, []):
            if not phase['start']:
                continue
            x0 = x(phase['start'])
            x1 = x(phase['end']) if phase['end'] else x0 + 2
            width = max(x1 - x0, 2.0)
            tip = '%s: %.2f s on the controller' % (phase['label'], (x1 - x0) / plot * span)
            # The host measures some steps itself (the report's phases_s, by phase); the events' bars include
            # Ansible's round trips.
            if measured.get(phase['phase']) is not None:
                tip += ', %s s on the host' % measured[phase['phase']]
            if phase.get('msg'):
                tip += ' - ' + phase['msg']
            stroke = ' stroke="#c0392b" stroke-width="2"' if phase['state'] in ('failed', 'unreachable') else ''
            parts.append('<rect class="phase" data-phase="%s" x="%.1f" y="%d" width="%.1f" height="22" rx="3" '
                         'fill="%s"%s><title>%s</title></rect>'
                         % (escape(phase['phase']), x0, top + 6, width, COLOURS.get(phase['phase'], '#999'), stroke,
                            escape(tip)))
            if width > 6 * len(phase['label']):
                parts.append('<text x="%.1f" y="%d" text-anchor="middle" fill="#1f2933">%s</text>'
                             % (x0 + width / 2, top + 21, escape(phase['label'])))
            if phase['phase'] in WINDOW_PHASES:
                window.append((x0, x0 + width))
        if window:
            w0, w1 = window[0][0], max(edge for _, edge in window)
            downtime = summary.get('downtime_s')
            label = 'outage %s s (host clock)' % downtime if downtime else 'outage'
            parts.append('<path d="M%.1f %d v6 H%.1f v-6" fill="none" stroke="#3e4c59"/>' % (w0, top + 32, w1))
            parts.append('<text x="%.1f" y="%d" text-anchor="middle" fill="#3e4c59">%s</text>'
                         % ((w0 + w1) / 2, top + 50, escape(label)))
            if summary.get('healthy'):
                parts.append('<circle class="healthy" cx="%.1f" cy="%d" r="5" fill="#27ae60"><title>healthy'
                             '</title></circle>' % (w1, top + 38))
                parts.append('<text x="%.1f" y="%d" fill="#27ae60" font-weight="bold">healthy</text>'
                             % (w1 + 8, top + 42))
        elif status:
            parts.append('<text x="%d" y="%d" fill="#52606d">%s</text>'
                         % (LEFT + plot * 0.45, top + 48, escape(str(summary.get('reason', ''))[:110])))
        parts.append('</g>')
    legend_x = 8
    for phase in LEGEND:
        label = dict(PHASE_LABELS)[phase]
        parts.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/>' % (legend_x, height - 14, COLOURS[phase]))
        parts.append('<text x="%d" y="%d" fill="#3e4c59">%s</text>' % (legend_x + 13, height - 5, escape(label)))
        legend_x += 13 + int(5.6 * len(label)) + 12
    parts.append('</svg>')
    return '\n'.join(parts)
