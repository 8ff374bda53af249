"""The servers of one machine on the machine's card (issue 44): GET /api/hosts groups the inventory's servers by
machine (bare metal: the same ansible_host; an LXC container: the same pve_node and pve_vmid), and the page draws
each machine as one card holding its servers' cards. Through the real API and page (uvicorn on 127.0.0.1, headless
chromium), over an inventory of servers on loopback; without the lab.

Every server here listens on 127.0.0.1 (sglang_host), whatever machine the inventory puts it on: the machine is the
inventory's, never the address a server answers at.
"""
import json
import os
import urllib.request

import pytest
import yaml

from helpers.http_responder import HttpResponder

# {server: its machine in the inventory}.
INVENTORY = {
    'gpu1': {'ansible_host': '127.0.0.12', 'pve_node': 'pve1', 'pve_vmid': 101},
    'gpu2': {'ansible_host': '127.0.0.13'},
    'gpu1b': {'ansible_host': '127.0.0.12', 'pve_node': 'pve1', 'pve_vmid': 101},
    'gpu2b': {'ansible_host': '127.0.0.13'},
    # The same vmid on another node is another container.
    'gpu3': {'ansible_host': '127.0.0.14', 'pve_node': 'pve2', 'pve_vmid': 101},
    'gpu4': {'ansible_host': '127.0.0.15'},
}
MACHINES = [('lxc:pve1/101', ['gpu1', 'gpu1b']), ('host:127.0.0.13', ['gpu2', 'gpu2b']),
            ('lxc:pve2/101', ['gpu3']), ('host:127.0.0.15', ['gpu4'])]


@pytest.fixture(scope='module')
def machines(serve, tmp_path_factory):
    """The dashboard over INVENTORY, every server a scripted peer answering /health and /server_info."""
    peers = {}
    folder = tmp_path_factory.mktemp('machines')
    try:
        for name in INVENTORY:
            peers[name] = HttpResponder().start()
            peers[name].route('GET', '/health', status=200)
            peers[name].route('GET', '/server_info', json={'speculative_algorithm': 'EAGLE3', 'max_running_requests': 64,
                                                           'internal_states': [{'pid': 1000 + len(peers)}]})
        hosts = {name: dict(machine, sglang_host='127.0.0.1', sglang_port=int(peers[name].url.rsplit(':', 1)[1]),
                            sglang_model_path='/m', sglang_report_dir=str(folder / 'reports'))
                 for name, machine in INVENTORY.items()}
        os.makedirs(str(folder / 'inventory'))
        with open(str(folder / 'inventory' / 'hosts.yml'), 'w') as handle:
            yaml.safe_dump({'all': {'children': {'gpu': {'hosts': hosts}}}}, handle)
        yield serve(inventory=str(folder / 'inventory'))
    finally:
        for peer in peers.values():
            peer.stop()


def test_the_hosts_view_groups_the_servers_of_one_machine(machines):
    with urllib.request.urlopen(machines.url + '/api/hosts', timeout=30) as response:
        body = json.load(response)
    grouped = [(machine['name'], machine['servers']) for machine in body['machines']]
    # In the cards' order (the hosts' names).
    assert grouped == MACHINES
    container = next(machine for machine in body['machines'] if machine['name'] == 'lxc:pve1/101')
    assert (container['address'], container['pve_node'], container['pve_vmid']) == ('127.0.0.12', 'pve1', 101)
    # Each server still has its card, and serves where it listens.
    assert sorted((card['name'], card['healthy']) for card in body['servers']) == [(name, True) for name in
                                                                                 sorted(INVENTORY)]


def test_the_page_draws_each_machine_as_one_card_holding_its_servers(machines, page):
    page.goto(machines.url + '/')
    page.wait_for_selector('.machine[data-machine="lxc:pve1/101"] .host[data-host="gpu1b"]')
    drawn = [(card.get_attribute('data-machine'), [host.get_attribute('data-host') for host in card.query_selector_all('.host')])
             for card in page.query_selector_all('#hosts .machine')]
    assert drawn == MACHINES
    assert page.inner_text('.machine[data-machine="host:127.0.0.13"] .machine-label') == '127.0.0.13 (bare metal): 2 servers'
