"""The speculation tuner's table as a picture: output tok/s against concurrency, one line per mode.

From `<report_dir>/<host>.speculation.json` (playbooks/tune_speculation.yml, gpuops.sglang.sglang_speculation):
concurrency on a log2 axis, one polyline and its points per mode (plain decoding, EAGLE-3, each other step
count), the recommended threshold as a dashed vertical line. Pure: the table in, SVG text out (every text
escaped), as the timeline and the performance chart are. The table is a file on disk, so anything in it is
checked for its type first: a figure is a finite number of 0 or more, a level a positive int, a name a string;
what is not is left out, never a crash of the page.
"""
import math

from gpuops_dashboard.timeline import escape

WIDTH = 420
HEIGHT = 240
LEFT, RIGHT, TOP, BOTTOM = 50, 110, 30, 40
COLOURS = ['#52606d', '#0984e3', '#e17055', '#00b894', '#6c5ce7', '#fdcb6e']


def _level(value):
    """A concurrency level or a threshold: a positive int (a bool is no number here)."""
    return value if type(value) is int and 0 < value < 2 ** 31 else None


def _figure(value):
    """A figure: a finite float of 0 or more; None otherwise."""
    if type(value) not in (int, float):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) and 0 <= value < 1e12 else None


def _list(value):
    return value if isinstance(value, list) else []


def _dict(value):
    return value if isinstance(value, dict) else {}


def _modes(table):
    return [mode['name'] for mode in _list(_dict(table).get('modes'))
            if isinstance(mode, dict) and isinstance(mode.get('name'), str)]


def _throughput(row, mode):
    return _figure(_dict(_dict(row).get(mode)).get('output_tok_s'))


def summary(table):
    """What the host card says of a tuning: when, the threshold, the modes (None without a table)."""
    if not isinstance(table, dict):
        return None
    measured_at = table.get('measured_at')
    return {'measured_at': measured_at if isinstance(measured_at, str) else None,
            'threshold': _level(_dict(table.get('recommended')).get('threshold')), 'modes': _modes(table)}


def render(host, table):
    """SVG text of the host's table; an empty string when it has no level with figures."""
    levels = sorted((row for row in _list(_dict(table).get('levels'))
                     if isinstance(row, dict) and _level(row.get('concurrency'))), key=lambda row: row['concurrency'])
    modes = _modes(table)
    values = [_throughput(row, mode) for row in levels for mode in modes]
    values = [value for value in values if value is not None]
    if not levels or not values:
        return ''
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    low, high = math.log2(levels[0]['concurrency']), math.log2(levels[-1]['concurrency'])
    top_value = max(values) or 1.0
    table = _dict(table)

    def x(concurrency):
        return LEFT + (0 if high == low else (math.log2(concurrency) - low) / (high - low) * plot_w)

    def y(value):
        return TOP + plot_h - value / top_value * plot_h

    parts = ['<svg xmlns="http://www.w3.org/2000/svg" class="speculation" data-host="%s" width="%d" height="%d" '
             'viewBox="0 0 %d %d" font-family="sans-serif" font-size="10">'
             % (escape(host), WIDTH, HEIGHT, WIDTH, HEIGHT),
             '<rect width="100%" height="100%" fill="#ffffff"/>',
             '<text x="%d" y="16" font-size="12" font-weight="bold">%s: output tok/s by concurrency</text>'
             % (LEFT, escape(host)),
             '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#9aa5b1"/>' % (LEFT, TOP + plot_h, LEFT + plot_w, TOP + plot_h),
             '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#9aa5b1"/>' % (LEFT, TOP, LEFT, TOP + plot_h),
             '<text x="%d" y="%d" text-anchor="end">%.0f</text>' % (LEFT - 4, TOP + 4, top_value),
             '<text x="%d" y="%d" text-anchor="end">0</text>' % (LEFT - 4, TOP + plot_h)]
    for row in levels:
        parts.append('<text x="%.1f" y="%d" text-anchor="middle">%d</text>'
                     % (x(row['concurrency']), TOP + plot_h + 14, row['concurrency']))
    threshold = _level(_dict(table.get('recommended')).get('threshold'))
    if threshold and low <= math.log2(threshold) <= high:
        parts.append('<line class="threshold" x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#c0392b" '
                     'stroke-dasharray="4 3"><title>threshold %d</title></line>'
                     % (x(threshold), TOP, x(threshold), TOP + plot_h, threshold))
        parts.append('<text x="%.1f" y="%d" fill="#c0392b" text-anchor="middle">threshold %d</text>'
                     % (x(threshold), TOP - 4, threshold))
    for index, mode in enumerate(modes):
        colour = COLOURS[index % len(COLOURS)]
        points = [(x(row['concurrency']), y(_throughput(row, mode)), row['concurrency'], _throughput(row, mode))
                  for row in levels if _throughput(row, mode) is not None]
        parts.append('<g class="mode" data-mode="%s">' % escape(mode))
        if len(points) > 1:
            parts.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                         % (colour, ' '.join('%.1f,%.1f' % (px, py) for px, py, dummy, dummy2 in points)))
        for px, py, concurrency, value in points:
            parts.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s at concurrency %d: %.1f output '
                         'tok/s</title></circle>' % (px, py, colour, escape(mode), concurrency, value))
        parts.append('<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>'
                     % (WIDTH - RIGHT + 10, TOP + index * 16, colour, WIDTH - RIGHT + 24, TOP + 9 + index * 16,
                        escape(mode)))
        parts.append('</g>')
    measured_at = summary(table)['measured_at']
    parts.append('<text x="%d" y="%d" fill="#52606d">concurrency (log scale)%s</text>'
                 % (LEFT, HEIGHT - 8, escape(', measured ' + measured_at if measured_at else '')))
    parts.append('</svg>')
    return '\n'.join(parts)
