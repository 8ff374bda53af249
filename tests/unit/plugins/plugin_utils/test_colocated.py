"""Several servers on one machine (issue 44): the plan's refusals before anything stops, each naming both servers,
the GPUs a server owns as the machine resolves them, and the decision on a shared sglang environment."""
import pytest

from ansible_collections.gpuops.sglang.plugins.plugin_utils import _colocated, _configs, _decision

from role_settings import NEEDED, role_defaults

GPU0, GPU1 = 'GPU-0a0a0a0a-0000-0000-0000-000000000000', 'GPU-1b1b1b1b-1111-1111-1111-111111111111'
MACHINE_GPUS = [{'index': 0, 'uuid': GPU0}, {'index': 1, 'uuid': GPU1}]


def server(name, **changes):
    """A server as the plan records it: gpu1's defaults, on 10.0.0.1, owning GPU 0, unless changed."""
    settings = {'sglang_port': 30000, 'sglang_service_name': 'sglang-' + name, 'sglang_config_dir': '/etc/' + name,
                'sglang_run_dir': '/run/' + name, 'sglang_log_file': '/var/log/%s/server.log' % name,
                'sglang_guard_dir': '/var/lib/gpuops-sglang', 'sglang_gpus': [0], 'sglang_python': '/opt/venv/bin/python',
                'ansible_host': '10.0.0.1', 'pve_node': '', 'pve_vmid': ''}
    settings.update(changes)
    return _colocated.server_record(name, settings)


ME = server('gpu1')


def near(*others):
    return _colocated.neighbours(ME, list(others))


@pytest.mark.parametrize('gpus, problems', [
    ([], []),
    ([0, '1', GPU0, 'MIG-4c4c-44'], []),
    (['first'], ["sglang_gpus holds 'first': each entry must be a GPU index as nvidia-smi numbers them (0, 1, ...) or"
                 " a UUID as `nvidia-smi --query-gpu=index,uuid --format=csv` prints it (GPU-...)."]),
    (['-1', 'cuda:0'], ["sglang_gpus holds '-1', 'cuda:0': each entry must be a GPU index as nvidia-smi numbers them"
                        " (0, 1, ...) or a UUID as `nvidia-smi --query-gpu=index,uuid --format=csv` prints it (GPU-...)."]),
    ([1, '1'], ['sglang_gpus names 1 more than once; name each GPU once.']),
    ('0,1', ['sglang_gpus must be a list of GPU indices or UUIDs, not 0,1; write it as a list, e.g. [0, 1].']),
], ids=['empty', 'indices-and-uuids', 'a-word', 'negative-and-cuda-name', 'twice', 'a-string'])
def test_sglang_gpus_holds_indices_or_uuids_each_once(gpus, problems):
    assert _colocated.gpus_problems(gpus) == problems


@pytest.mark.parametrize('other, found', [
    (server('gpu1b', sglang_gpus=[1], sglang_port=30001), [('gpu1b', True)]),
    (server('gpu2', ansible_host='10.0.0.2'), []),
    # One address, but two containers of one Proxmox node: GPUs shared, nothing else.
    (server('gpu1c', pve_node='pve1', pve_vmid='102'), []),
], ids=['same-address', 'other-address', 'container-vs-bare-metal'])
def test_neighbours_share_the_address_and_the_container(other, found):
    assert [(entry['name'], entry['same_machine']) for entry in near(other)] == found


def test_two_containers_of_one_proxmox_node_share_only_the_gpus():
    me = server('gpu1', pve_node='pve1', pve_vmid='101', ansible_host='10.0.0.1')
    other = server('gpu3', pve_node='pve1', pve_vmid='102', ansible_host='10.0.0.3', sglang_port=30000,
                   sglang_service_name='sglang-gpu1')
    found = _colocated.neighbours(me, [other, server('gpu4', pve_node='pve2', pve_vmid='101', ansible_host='10.0.0.4')])
    assert [(entry['name'], entry['same_machine']) for entry in found] == [('gpu3', False)]
    # Its port and service name are its container's own; its GPU 0 is gpu1's too.
    assert _colocated.conflicts(me, found) == [
        'gpu1 and gpu3 share GPUs (Proxmox node pve1): gpu1 owns [0], gpu3 owns [0]. Set sglang_gpus of each to GPUs'
        ' of its own.']


SHARED = ' (one inventory host per server, each with its own sglang_port, sglang_service_name, sglang_config_dir,' \
         ' sglang_run_dir and sglang_log_file).'


@pytest.mark.parametrize('changes, problems', [
    ({}, []),
    ({'sglang_port': 30000}, ['gpu1 and gpu1b run on one machine (ansible_host 10.0.0.1) and share the port 30000;'
                              ' give each server its own' + SHARED]),
    ({'sglang_service_name': 'sglang-gpu1'}, [
        'gpu1 and gpu1b run on one machine (ansible_host 10.0.0.1) and share the service name sglang-gpu1; give each'
        ' server its own' + SHARED,
        'gpu1 and gpu1b run on one machine (ansible_host 10.0.0.1) and share the guard folder'
        ' /var/lib/gpuops-sglang/sglang-gpu1; give each server its own' + SHARED]),
    ({'sglang_run_dir': '/run/gpu1/'}, ['gpu1 and gpu1b run on one machine (ansible_host 10.0.0.1) and share the run'
                                        ' folder /run/gpu1; give each server its own' + SHARED]),
    ({'sglang_config_dir': '/etc/gpu1'}, ['gpu1 and gpu1b run on one machine (ansible_host 10.0.0.1) and share the'
                                          ' config folder /etc/gpu1; give each server its own' + SHARED]),
    ({'sglang_log_file': '/var/log/gpu1/server.log'}, [
        'gpu1 and gpu1b run on one machine (ansible_host 10.0.0.1) and share the log file /var/log/gpu1/server.log;'
        ' give each server its own' + SHARED]),
    ({'sglang_gpus': [0]}, ['gpu1 and gpu1b share GPUs (one machine): gpu1 owns [0], gpu1b owns [0]. Set sglang_gpus'
                            ' of each to GPUs of its own.']),
    ({'sglang_gpus': []}, ['gpu1 and gpu1b share GPUs (one machine): gpu1 owns [0], gpu1b owns every GPU (sglang_gpus'
                           ' empty). Set sglang_gpus of each to GPUs of its own.']),
], ids=['nothing-shared', 'port', 'service-name-and-its-guard-folder', 'run-folder', 'config-folder', 'log-file',
        'a-gpu', 'an-empty-set-is-every-gpu'])
def test_the_plan_refuses_what_two_servers_of_one_machine_share_naming_both(changes, problems):
    other = server('gpu1b', **dict({'sglang_port': 30001, 'sglang_gpus': [1]}, **changes))
    assert _colocated.conflicts(ME, near(other)) == problems


def test_a_neighbour_outside_the_play_is_checked_from_its_inventory_and_the_role_defaults():
    # What the plan builds for a host that sets nothing but its address: the role's defaults (whole machine, port
    # 30000, service sglang) clash with a server that kept them too.
    defaults = dict(role_defaults(), **NEEDED)
    me = _colocated.server_record('gpu1', dict(defaults, ansible_host='10.0.0.1'))
    other = _colocated.server_record('gpu1b', dict(defaults, ansible_host='10.0.0.1'))
    found = _colocated.conflicts(me, _colocated.neighbours(me, [other]))
    assert [problem.split(';')[0] for problem in found] == [
        'gpu1 and gpu1b run on one machine (ansible_host 10.0.0.1) and share the port 30000',
        'gpu1 and gpu1b run on one machine (ansible_host 10.0.0.1) and share the service name sglang',
        'gpu1 and gpu1b run on one machine (ansible_host 10.0.0.1) and share the run folder /run/sglang',
        'gpu1 and gpu1b run on one machine (ansible_host 10.0.0.1) and share the config folder /etc/sglang',
        'gpu1 and gpu1b run on one machine (ansible_host 10.0.0.1) and share the log file /var/log/sglang/server.log',
        'gpu1 and gpu1b run on one machine (ansible_host 10.0.0.1) and share the guard folder'
        ' /var/lib/gpuops-sglang/sglang',
        'gpu1 and gpu1b share GPUs (one machine): gpu1 owns every GPU (sglang_gpus empty), gpu1b owns every GPU'
        ' (sglang_gpus empty). Set sglang_gpus of each to GPUs of its own.']


@pytest.mark.parametrize('wanted, found', [
    (['0'], ([GPU0], [])),
    (['1', '0'], ([GPU1, GPU0], [])),
    ([GPU1], ([GPU1], [])),
    (['2', 'GPU-ffff'], ([], ['2', 'GPU-ffff'])),
], ids=['index', 'order-kept', 'uuid', 'absent'])
def test_gpus_resolve_to_the_machines_uuids(wanted, found):
    assert _colocated.resolve(wanted, MACHINE_GPUS) == found


@pytest.mark.parametrize('mine, theirs, machine, problems', [
    (['0'], ['1'], {'gpus': MACHINE_GPUS}, []),
    ([], [], {'gpus_error': 'never read'}, []),
    (['2'], ['1'], {'gpus': MACHINE_GPUS}, [
        'sglang_gpus of gpu1 names 2, which its machine does not have (it has: 0 %s, 1 %s). Name GPUs as nvidia-smi'
        ' numbers them there, or by UUID.' % (GPU0, GPU1)]),
    (['GPU-ffff'], ['1'], {'gpus': MACHINE_GPUS}, [
        'sglang_gpus of gpu1 names GPU-ffff, which its machine does not have (it has: 0 %s, 1 %s). Name GPUs as'
        ' nvidia-smi numbers them there, or by UUID.' % (GPU0, GPU1)]),
    (['0'], [GPU0], {'gpus': MACHINE_GPUS}, [
        'gpu1 and gpu1b share GPUs: gpu1 owns [0], gpu1b owns [%s], both %s on the machine. Set sglang_gpus of each to'
        ' GPUs of its own.' % (GPU0, GPU0)]),
    (['0'], ['1'], {'gpus': [], 'gpus_error': 'nvidia-smi is not on PATH (set nvidia_smi)'}, [
        'the GPUs of gpu1 could not be read on its machine: nvidia-smi is not on PATH (set nvidia_smi). sglang_gpus'
        ' needs nvidia-smi there.']),
], ids=['own-gpus', 'whole-machine-reads-nothing', 'missing-index', 'missing-uuid', 'index-against-its-uuid',
        'no-nvidia-smi'])
def test_the_machines_read_refuses_a_gpu_it_lacks_or_one_owned_twice(mine, theirs, machine, problems):
    me = server('gpu1', sglang_gpus=mine)
    other = server('gpu1b', sglang_gpus=theirs, sglang_port=30001)
    assert _colocated.gpu_problems(me, _colocated.neighbours(me, [other]), machine) == problems


def test_owned_gpus_are_set_by_uuid_in_pci_bus_order_and_the_whole_machine_sets_nothing():
    assert _colocated.gpu_environment([]) == {}
    assert _colocated.gpu_environment([GPU1, GPU0]) == {'CUDA_DEVICE_ORDER': 'PCI_BUS_ID',
                                                        'CUDA_VISIBLE_DEVICES': '%s,%s' % (GPU1, GPU0)}
    settings = dict(role_defaults(), **NEEDED)
    launch = _configs.launch(settings, [], _colocated.gpu_environment([GPU1]))
    assert launch['environment']['CUDA_VISIBLE_DEVICES'] == GPU1
    assert 'CUDA_VISIBLE_DEVICES' not in _configs.launch(settings, [])['environment']


@pytest.mark.parametrize('gpus, environment, problems', [
    ([0], {'CUDA_VISIBLE_DEVICES': '3'}, [
        'sglang_environment or sglang_secret_environment sets CUDA_VISIBLE_DEVICES, which sglang_gpus sets (to the'
        ' UUIDs of its GPUs); remove it there.']),
    ([], {'CUDA_VISIBLE_DEVICES': '3'}, []),
    ([0], {'NCCL_DEBUG': 'INFO'}, []),
], ids=['both', 'whole-machine-leaves-it-to-the-operator', 'another-variable'])
def test_an_environment_variable_may_not_name_the_gpus_sglang_gpus_sets(gpus, environment, problems):
    settings = dict(role_defaults(), sglang_gpus=gpus, sglang_environment=environment)
    assert _colocated.environment_problems(settings) == problems


SITE = '/opt/venv/lib/python3.11/site-packages'


def colocated(*neighbours):
    return {'site_packages': SITE, 'neighbours': [dict({'same_machine': True, 'site_packages': SITE}, **entry)
                                                  for entry in neighbours]}


MINE = {'machine': {'machine_id': 'm1'}}


@pytest.mark.parametrize('plan, machines, play, patch_due, problem', [
    (colocated({'name': 'gpu2b'}), {}, ['gpu2'], False, ''),
    (colocated({'name': 'gpu2b'}), {}, ['gpu2'], True,
     'the patch would change the sglang of gpu2 in %s, which gpu2b also runs from and which is not in this run.'
     ' Redeploy them together (add gpu2b to the run; the patch is applied once and each server restarts in its own'
     ' window), or give gpu2 its own environment (its own sglang_python: docs/colocated.md).' % SITE),
    (colocated({'name': 'gpu2b'}), {'gpu2b': {'machine_id': 'm1'}}, ['gpu2', 'gpu2b'], True, ''),
    (colocated({'name': 'gpu2b', 'site_packages': '/opt/other/site-packages'}), {}, ['gpu2'], True, ''),
    # The inventory says one machine, the machines say two: nothing of gpu2b's changes with gpu2's patch.
    (colocated({'name': 'gpu2b'}), {'gpu2b': {'machine_id': 'm2'}}, ['gpu2', 'gpu2b'], True, ''),
    (colocated({'name': 'gpu2b', 'same_machine': False}), {}, ['gpu2'], True, ''),
    # Hosts cloned from one image share a machine-id: reported (same_machine_id), never a refusal on its own.
    (colocated(), {'gpu9': {'machine_id': 'm1'}}, ['gpu2', 'gpu9'], False, ''),
], ids=['no-patch-due', 'patch-would-change-a-neighbour-outside-the-run', 'all-in-the-run', 'own-environment',
        'machine-denies-the-inventory', 'another-container', 'same-machine-another-address'])
def test_the_decision_refuses_a_patch_of_a_shared_environment_unless_all_its_servers_are_in_the_run(
        plan, machines, play, patch_due, problem):
    assert _colocated.decide('gpu2', plan, MINE, machines, play, patch_due)['problem'] == problem


WORKER = SITE + '/sglang/srt/speculative/eagle_worker.py'
OWN = '/opt/gpu2-venv/lib/python3.11/site-packages'
OTHER = '/opt/shared-b/lib/python3.11/site-packages'


@pytest.mark.parametrize('plan, machines, play, undo_files, problem', [
    # Only its own files (the launch configuration, the unit): nothing of the neighbour's changes.
    (colocated({'name': 'gpu2b'}), {}, ['gpu2'], ['/etc/sglang/launch.json'], ''),
    (colocated({'name': 'gpu2b'}), {}, ['gpu2'], ['/etc/sglang/launch.json', WORKER],
     'the undo would put back 1 file of the sglang in %s (%s), which gpu2b also runs from: their code would change'
     ' under them. Redeploy gpu2 and gpu2b together with the patch you want instead (it is applied once and each'
     ' server restarts in its own window), or give gpu2 its own environment (its own sglang_python:'
     ' docs/colocated.md).' % (SITE, WORKER)),
    # In the run too: the second undo would find the files the first put back changed by hand.
    (colocated({'name': 'gpu2b'}), {'gpu2b': {'machine_id': 'm1'}}, ['gpu2', 'gpu2b'], [WORKER],
     'the undo would put back 1 file of the sglang in %s (%s), which gpu2b also runs from: their code would change'
     ' under them. Redeploy gpu2 and gpu2b together with the patch you want instead (it is applied once and each'
     ' server restarts in its own window), or give gpu2 its own environment (its own sglang_python:'
     ' docs/colocated.md).' % (SITE, WORKER)),
    # gpu2 moved to its own venv; its older revisions name files of the shared one, which gpu2b still runs from.
    (dict(colocated({'name': 'gpu2b'}), site_packages=OWN), {}, ['gpu2'], [OWN + '/sglang/x.py', WORKER],
     'the undo would put back 1 file of the sglang in %s (%s), which gpu2b also runs from: their code would change'
     ' under them. gpu2 runs from %s now, so these files are no longer its own: undo to a revision recorded since it'
     ' moved there, or redeploy it instead (docs/colocated.md).' % (SITE, WORKER, OWN)),
    # Two neighbours on two environments, neither gpu2's: each named with its files; one site named once.
    (dict(colocated({'name': 'gpu2b'}, {'name': 'gpu2c', 'site_packages': OTHER + '/'}, {'name': 'gpu2d'}),
          site_packages=OWN), {}, ['gpu2'], [OTHER + '/sglang/a.py', OTHER + '/sglang/b.py', WORKER],
     'the undo would put back 1 file of the sglang in %s (%s), which gpu2b, gpu2d also run from: their code would'
     ' change under them. gpu2 runs from %s now, so these files are no longer its own: undo to a revision recorded'
     ' since it moved there, or redeploy it instead (docs/colocated.md). the undo would put back 2 files of the'
     ' sglang in %s (%s/sglang/a.py, %s/sglang/b.py), which gpu2c also runs from: their code would change under'
     ' them. gpu2 runs from %s now, so these files are no longer its own: undo to a revision recorded since it moved'
     ' there, or redeploy it instead (docs/colocated.md).' % (SITE, WORKER, OWN, OTHER, OTHER, OTHER, OWN)),
    # A neighbour the machines deny is not on my machine, whatever its environment.
    (dict(colocated({'name': 'gpu2b'}), site_packages=OWN), {'gpu2b': {'machine_id': 'm2'}}, ['gpu2', 'gpu2b'],
     [WORKER], ''),
    (colocated({'name': 'gpu2b', 'site_packages': '/opt/other/site-packages'}), {}, ['gpu2'], [WORKER], ''),
    (colocated({'name': 'gpu2b'}), {'gpu2b': {'machine_id': 'm2'}}, ['gpu2', 'gpu2b'], [WORKER], ''),
    # A folder whose name only begins like the site-packages is not inside it.
    (colocated({'name': 'gpu2b'}), {}, ['gpu2'], [SITE + '-old/sglang/x.py'], ''),
    # An undo with nothing shared: a patch due in the inventory is not what an undo applies.
    (colocated(), {}, ['gpu2'], [WORKER], ''),
], ids=['own-files-only', 'shared-sglang-file', 'neighbour-in-the-run-too', 'moved-to-its-own-venv',
        'two-neighbour-environments', 'moved-neighbour-denied', 'own-environment',
        'machine-denies-the-inventory', 'lookalike-folder', 'no-neighbour'])
def test_the_decision_refuses_an_undo_that_would_put_back_a_shared_environments_files(
        plan, machines, play, undo_files, problem):
    assert _colocated.decide('gpu2', plan, MINE, machines, play, True, undo_files)['problem'] == problem


def test_the_decision_names_the_neighbours_it_confirms_denies_and_shares_the_environment_with():
    decided = _colocated.decide('gpu2', colocated({'name': 'gpu2b'}, {'name': 'gpu2c'}),
                                dict(MINE, code_changed_since_start=True), {'gpu2c': {'machine_id': 'm2'}},
                                ['gpu2', 'gpu2c'], False)
    assert decided == {'neighbours': ['gpu2b'], 'neighbours_denied': ['gpu2c'],
                       'shared_environment': {'site_packages': SITE, 'with': ['gpu2b'], 'outside_run': ['gpu2b']},
                       'same_machine_id': [], 'code_changed_while_running': True, 'problem': ''}


def test_another_address_with_this_machines_machine_id_is_reported():
    decided = _colocated.decide('gpu2', colocated(), MINE, {'gpu9': {'machine_id': 'm1'}, 'gpu8': {'machine_id': 'm3'}},
                                ['gpu2', 'gpu8', 'gpu9'], True)
    assert (decided['same_machine_id'], decided['problem']) == (['gpu9'], '')


def test_a_server_whose_sglang_changed_on_disk_after_it_started_is_redeployed():
    serving = {'running': True, 'healthy': True, 'configs_changed': [], 'mismatches': []}
    assert _decision.reasons(serving, {}, False) == []
    assert _decision.reasons(dict(serving, code_changed_since_start=True), {}, False) == [
        'sglang changed on disk after the server started']


def test_the_neighbours_marks_are_those_of_the_servers_on_my_machine_only():
    found = near(server('gpu1b', sglang_port=30001, sglang_gpus=[1]),
                 server('gpu1c', sglang_port=30002, sglang_gpus=[2], pve_node='pve1', pve_vmid='102'))
    assert _colocated.marks(found) == [{'name': 'gpu1b', 'service_name': 'sglang-gpu1b', 'port': 30001,
                                        'launch_file': '/etc/gpu1b/launch.json'}]
