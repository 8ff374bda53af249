"""The hosts' cards show the role's defaults where the inventory sets nothing, as read from the role's
defaults/main.yml (not a copy of them in the dashboard): a default changed in the role is what the cards show."""
from __future__ import annotations

import os

import pytest
import yaml

from gpuops_dashboard import inventory as host_inventory


def write(path, content):
    with open(path, 'w') as handle:
        yaml.safe_dump(content, handle)
    return path


@pytest.fixture
def hosts_folder(tmp_path):
    """gpu1 sets nothing the cards show; gpu2 its own port (nothing listens on either: the cards say so)."""
    folder = tmp_path / 'inventory'
    folder.mkdir()
    write(str(folder / 'hosts.yml'), {'all': {'children': {'gpu': {'hosts': {
        'gpu1': {'ansible_host': '127.0.0.1', 'sglang_host': '0.0.0.0', 'sglang_model_path': '/m'},
        'gpu2': {'ansible_host': '127.0.0.1', 'sglang_host': '0.0.0.0', 'sglang_model_path': '/m',
                 'sglang_port': 1}}}}}})
    return str(folder)


def test_a_host_that_sets_nothing_shows_the_roles_defaults(hosts_folder):
    defaults = host_inventory.role_defaults()
    gpu1 = host_inventory.resolve_hosts(hosts_folder)['gpu1']
    shown = ('port', 'rollback_deadline', 'service_manager', 'report_dir', 'server_group')
    assert {key: gpu1[key] for key in shown} == {
        'port': defaults['sglang_port'], 'rollback_deadline': defaults['sglang_rollback_deadline'],
        'service_manager': defaults['sglang_service_manager'], 'report_dir': defaults['sglang_report_dir'],
        'server_group': defaults['sglang_server_group']}
    assert gpu1['pve_node'] is None and gpu1['node_rank'] is None and gpu1['has_api_key'] is False


def test_a_default_changed_in_the_role_is_what_the_cards_show(hosts_folder, tmp_path, monkeypatch):
    defaults = host_inventory.role_defaults()
    defaults.update(sglang_port=31999, sglang_rollback_deadline=2400, sglang_service_manager='systemd',
                    sglang_host='::', sglang_report_dir=str(tmp_path / 'the reports'))
    monkeypatch.setattr(host_inventory, 'ROLE_DEFAULTS', write(str(tmp_path / 'defaults.yml'), defaults))
    directory = host_inventory.HostDirectory(hosts_folder)
    cards = {card['name']: card for card in directory.state()}
    assert cards['gpu1']['port'] == 31999 and cards['gpu1']['rollback_deadline'] == 2400
    # Listening on every address (the role's sglang_host now): asked at its inventory address.
    assert cards['gpu1']['address'] == '127.0.0.1'
    # What the host sets is its own; the role's defaults fill in only what it leaves unset.
    assert cards['gpu2']['port'] == 1 and cards['gpu2']['rollback_deadline'] == 2400
    resolved = directory.hosts()['gpu1']
    assert resolved['service_manager'] == 'systemd' and resolved['report_dir'] == defaults['sglang_report_dir']


@pytest.mark.parametrize('port', ['{{ 30000 + 1 }}', '30000"', '30000\\'])
def test_a_role_default_the_dashboard_cannot_copy_is_refused_naming_it(hosts_folder, tmp_path, monkeypatch, port):
    defaults = dict(host_inventory.role_defaults(), sglang_port=port)
    monkeypatch.setattr(host_inventory, 'ROLE_DEFAULTS', write(str(tmp_path / 'defaults.yml'), defaults))
    with pytest.raises(RuntimeError, match='sglang_port'):
        host_inventory.resolve_hosts(hosts_folder)
