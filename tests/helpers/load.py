"""Steady client traffic for the lab's tests: real /generate requests, one after the other per client, counted.

A lab test that must show that a redeploy drops no request (through the router, or straight to a neighbour's port)
runs its playbook inside `with SteadyLoad([url, ...]) as load:` and asserts `load.failed` empty and `load.answered`
non-zero afterwards.
"""
from __future__ import annotations

import collections
import json
import threading
import urllib.error
import urllib.request

from helpers.simulated import wait_for


def post_generate(address: str) -> str | None:
    """One real request; None when it was answered with a text, else why not."""
    body = json.dumps({'text': 'The capital of France is',
                       'sampling_params': {'max_new_tokens': 8, 'temperature': 0}}).encode()
    request = urllib.request.Request(address + '/generate', data=body, method='POST',
                                     headers={'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.load(response)
    except urllib.error.HTTPError as exc:
        return 'HTTP %d' % exc.code
    except (OSError, ValueError) as exc:
        return repr(exc)
    return None if isinstance(answer, dict) and 'text' in answer else 'no text: %r' % (answer,)


class SteadyLoad:
    """`clients` clients per URL, each sending one request after the other until stopped."""

    def __init__(self, urls: list[str], clients: int = 2):
        self.urls = urls
        self.answered: collections.Counter = collections.Counter()
        self.failed: collections.Counter = collections.Counter()
        # The first few, to say why (a server that is down fails thousands).
        self.failures: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self.client, args=(address,), daemon=True)
                        for address in urls for _ in range(clients)]

    def client(self, address: str) -> None:
        while not self.stopping.is_set():
            why = post_generate(address)
            with self.lock:
                if why is None:
                    self.answered[address] += 1
                    continue
                self.failed[address] += 1
                if len(self.failures) < 10:
                    self.failures.append((address, why))
            # A refused request returns at once: no busy loop against a server that is down.
            self.stopping.wait(0.1)

    def __enter__(self) -> SteadyLoad:
        for thread in self.threads:
            thread.start()
        wait_for(lambda: all(self.answered[address] for address in self.urls), 30, 'the load answered at every URL')
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)
