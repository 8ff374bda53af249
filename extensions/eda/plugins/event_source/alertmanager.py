# Copyright: (c) 2026, gpuops contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""An ansible-rulebook event source: Alertmanager's webhook, as ansible.eda.alertmanager receives it.

The same options and the same events as ansible.eda.alertmanager (event-driven-ansible,
extensions/eda/plugins/event_source/alertmanager.py), so a rulebook written for one runs with the other:
that collection comes from Galaxy only, which the machines this collection is built and tested on cannot
reach. Two differences, both safer defaults: it listens on 127.0.0.1 unless told otherwise, and a body
that is not JSON (not UTF-8 text, or in a charset Python does not know, included) is answered 400 instead of
an unhandled error.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

DOCUMENTATION = r"""
---
short_description: Receive Alertmanager's webhook notifications as events
description:
  - An ansible-rulebook event source that receives Alertmanager's webhook (or a compatible
    alerting system's) on C(POST /<endpoint>) and puts one event on the queue for every alert in it.
  - Each alert's event is C({alert, meta: {endpoint, headers, hosts}}), the shape ansible.eda.alertmanager
    emits, so rulebooks run with either source. C(meta.hosts) holds the host found at O(data_host_path),
    without a C(:port) suffix; ansible-rulebook limits a run_playbook action to those hosts.
  - Unless O(skip_original_data) is set, the whole notification is put on the queue first, as
    C({payload, meta: {endpoint, headers}}).
options:
  host:
    description:
      - The address to listen on. Alertmanager's webhook carries no authentication; set it to
        an address other than loopback only behind a firewall or an authenticating proxy.
    type: str
    default: 127.0.0.1
  port:
    description:
      - The TCP port to listen on.
    type: int
    default: 5000
  data_alerts_path:
    description:
      - The path, split at O(data_path_separator), to the list of alerts in a notification.
      - An empty string treats the whole notification as one alert.
    type: str
    default: alerts
  data_host_path:
    description:
      - The path, split at O(data_path_separator), inside each alert to the host it is about.
      - An empty string leaves C(meta.hosts) empty.
    type: str
    default: labels.instance
  data_path_separator:
    description:
      - The separator of O(data_alerts_path) and O(data_host_path).
    type: str
    default: .
  skip_original_data:
    description:
      - Put only the alerts' events on the queue, not the whole notification before them.
    type: bool
    default: false
"""

EXAMPLES = r"""
- gpuops.sglang.alertmanager:
    host: 127.0.0.1
    port: 5000
    data_host_path: labels.gpuops_host
    skip_original_data: true
"""

LOGGER = logging.getLogger(__name__)
ROUTES = web.RouteTableDef()
# aiohttp 3.9 and later (ansible-rulebook's own floor) warn on plain string keys of an application.
QUEUE_KEY = web.AppKey('queue', asyncio.Queue)
CONFIG_KEY = web.AppKey('config', dict)


def get_path(data: Any, path: str, separator: str) -> Any:
    """The value at path (keys, or list indexes written as numbers), as dpath's get finds it; KeyError if absent."""
    value = data
    for key in path.split(separator):
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            raise KeyError(path)
    return value


def clean_host(host: str) -> str:
    """The host without a port: Prometheus' `instance` label is host:port."""
    return host.split(':', maxsplit=1)[0]


def alerts_of(payload: Any, alerts_path: str, separator: str) -> list[Any]:
    if not alerts_path:
        return [payload]
    try:
        alerts = get_path(payload, alerts_path, separator)
    except KeyError:
        return []
    return alerts if isinstance(alerts, list) else [alerts]


def hosts_of(alert: Any, host_path: str, separator: str) -> list[str]:
    if not host_path:
        return []
    try:
        host = get_path(alert, host_path, separator)
    except KeyError:
        return []
    # ansible.eda's source would fail on a label that is not a string; such an alert names no host.
    return [clean_host(host)] if isinstance(host, str) else []


@ROUTES.get('/')
async def status(_request: web.Request) -> web.Response:
    return web.Response(status=200, text='up')


@ROUTES.post('/{endpoint}')
async def webhook(request: web.Request) -> web.Response:
    try:
        payload = await request.json()
    # aiohttp decodes the body before parsing it: bytes that are not text in its charset raise UnicodeDecodeError
    # (a ValueError, as JSONDecodeError is), a charset Python does not know LookupError.
    except (ValueError, LookupError) as exc:
        LOGGER.warning('alertmanager: %s sent a body that is not JSON (%s): ignored', request.remote, exc)
        return web.Response(status=400, text='the body is not JSON (UTF-8): send Alertmanager webhook JSON')
    endpoint = request.match_info['endpoint']
    headers = dict(request.headers)
    config = request.app[CONFIG_KEY]
    queue = request.app[QUEUE_KEY]

    if not config['skip_original_data']:
        await queue.put({'payload': payload, 'meta': {'endpoint': endpoint, 'headers': headers}})
    for alert in alerts_of(payload, config['data_alerts_path'], config['data_path_separator']):
        hosts = hosts_of(alert, config['data_host_path'], config['data_path_separator'])
        await queue.put({'alert': alert, 'meta': {'endpoint': endpoint, 'headers': headers, 'hosts': hosts}})
    return web.Response(status=202, text='Received')


def config_of(args: dict[str, Any]) -> dict[str, Any]:
    return {
        'host': str(args.get('host', '127.0.0.1')),
        'port': int(args.get('port', 5000)),
        'data_alerts_path': str(args.get('data_alerts_path', 'alerts')),
        'data_host_path': str(args.get('data_host_path', 'labels.instance')),
        'data_path_separator': str(args.get('data_path_separator', '.')),
        'skip_original_data': bool(args.get('skip_original_data', False)),
    }


async def main(queue: asyncio.Queue[Any], args: dict[str, Any]) -> None:
    """ansible-rulebook's entry point: serve the webhook until the source task is cancelled."""
    config = config_of(args)
    app = web.Application()
    app[QUEUE_KEY] = queue
    app[CONFIG_KEY] = config
    app.add_routes(ROUTES)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, config['host'], config['port'])
    await site.start()
    LOGGER.info('alertmanager: listening on %s:%d', config['host'], config['port'])
    try:
        await asyncio.Future()
    except asyncio.CancelledError:
        LOGGER.info('alertmanager: source cancelled')
    finally:
        await runner.cleanup()
