"""Small HTTP verbs for the dashboard tests (standard library only)."""
import json
import urllib.error
import urllib.request


def get(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def post(url, token=None, body=None):
    """POST JSON; returns (status, body, headers), also for 4xx answers."""
    request = urllib.request.Request(url, data=json.dumps(body or {}).encode(), method='POST',
                                     headers={'Content-Type': 'application/json'})
    if token is not None:
        request.add_header('Authorization', 'Bearer ' + token)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.load(response), response.headers
    except urllib.error.HTTPError as error:
        return error.code, json.load(error), error.headers
