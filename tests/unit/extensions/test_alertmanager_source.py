"""The alertmanager event source emits the events ansible.eda.alertmanager emits, for the same options."""
import asyncio
import json

import aiohttp

from ansible_collections.gpuops.sglang.extensions.eda.plugins.event_source import alertmanager
from helpers.simulated import free_port

NOTIFICATION = {'version': '4', 'status': 'firing', 'receiver': 'gpuops-undo', 'alerts': [
    {'status': 'firing', 'labels': {'alertname': 'A', 'gpuops_host': 'gpu2', 'instance': '10.0.0.13:30000'},
     'fingerprint': 'aa'},
    {'status': 'resolved', 'labels': {'alertname': 'B', 'instance': 'gpu1'}, 'fingerprint': 'bb'}]}


def deliver(args, body, endpoint='alerts', content_type='application/json'):
    """POST `body` to a source started with `args`: (HTTP status, the events it queued)."""
    async def scenario():
        queue = asyncio.Queue()
        port = free_port()
        source = asyncio.create_task(alertmanager.main(queue, dict(args, port=port)))
        async with aiohttp.ClientSession() as session:
            for _attempt in range(500):
                try:
                    async with session.get('http://127.0.0.1:%d/' % port) as response:
                        assert await response.text() == 'up'
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.01)
            async with session.post('http://127.0.0.1:%d/%s' % (port, endpoint), data=body,
                                    headers={'Content-Type': content_type}) as response:
                status = response.status
        source.cancel()
        await asyncio.gather(source, return_exceptions=True)
        events = []
        while not queue.empty():
            events.append(queue.get_nowait())
        return status, events
    return asyncio.run(scenario())


def test_each_alert_is_an_event_with_its_host_from_the_configured_label():
    status, events = deliver({'data_host_path': 'labels.gpuops_host', 'skip_original_data': True},
                             json.dumps(NOTIFICATION))
    assert status == 202
    assert [(event['alert']['fingerprint'], event['meta']['hosts'], event['meta']['endpoint']) for event in events] == [
        ('aa', ['gpu2'], 'alerts'), ('bb', [], 'alerts')]
    assert events[0]['meta']['headers']['Content-Type'] == 'application/json'


def test_the_notification_comes_first_and_the_default_host_is_the_instance_without_its_port():
    status, events = deliver({}, json.dumps(NOTIFICATION), endpoint='hook')
    assert status == 202
    assert events[0]['payload'] == NOTIFICATION and events[0]['meta']['endpoint'] == 'hook'
    assert [event['meta']['hosts'] for event in events[1:]] == [['10.0.0.13'], ['gpu1']]


def test_an_empty_alerts_path_makes_the_whole_notification_one_alert_and_a_body_not_json_is_refused():
    _status, events = deliver({'data_alerts_path': '', 'data_host_path': 'receiver', 'skip_original_data': True},
                              json.dumps(NOTIFICATION))
    assert [event['meta']['hosts'] for event in events] == [['gpuops-undo']]
    assert deliver({}, 'not json') == (400, [])


def test_paths_walk_dicts_and_list_indexes_and_a_host_that_is_not_a_string_names_none():
    assert alertmanager.get_path(NOTIFICATION, 'alerts/1/fingerprint', '/') == 'bb'
    assert alertmanager.alerts_of({'alerts': {'one': 1}}, 'alerts', '.') == [{'one': 1}]
    assert alertmanager.alerts_of({}, 'alerts', '.') == []
    assert alertmanager.hosts_of({'labels': {'gpuops_host': ['gpu1']}}, 'labels.gpuops_host', '.') == []


def test_a_body_that_is_not_utf8_text_or_names_an_unknown_charset_is_refused_with_400():
    assert deliver({}, b'{"alerts": "\xff\xfe"}') == (400, [])
    assert deliver({}, json.dumps(NOTIFICATION), content_type='application/json; charset=no-such-charset') == (400, [])
