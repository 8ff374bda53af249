#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.sglang contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: sglang_prefetch
short_description: Read the files a new SGLang server will load into the page cache, within a memory budget
version_added: 0.1.0
description:
  - A redeploy's outage is mostly the new server's model load, and the load reads from disk (or a network file
    system) when the weights are no longer in the page cache. Run while the old server still serves, this module
    reads those files into the page cache first, so the load inside the outage finds them there
    (DeepSeek-R1, 350 GiB, was measured loading in 154 s cold and 69 s with its files in the page cache).
  - Reads, from each of O(paths), a model folder's top-level regular files that SGLang loads (names ending in
    C(.safetensors), C(.bin), C(.pt), C(.pth), C(.json), C(.model), C(.tiktoken), C(.txt), C(.jinja), C(.py)), or a
    file given by its path. Subfolders are not read (Llama repositories keep a second copy of the weights under
    C(original/)). Symlinks are resolved and each real file is read once (the Hugging Face cache's snapshots link
    to its blobs).
  - Small files (configuration, tokenizer) first, then the weights, each path's in name order.
  - Bounded. Only bytes not yet in the page cache count against a budget of C(MemAvailable) (C(/proc/meminfo))
    at the start less O(reserve_mib); C(MemAvailable) is read again before each 64 MiB chunk and the read stops
    when it is at or below O(reserve_mib); and it stops at O(timeout). A stop says why in RV(why).
  - Never fails for a file it cannot read. A path that is not absolute (a hub id such as
    V(meta-llama/Llama-3.1-8B)), a path that does not exist, and a file that cannot be opened or read are
    listed in RV(skipped_paths) with the reason.
  - Residency is measured before and after as C(fincore) and C(vmtouch) do, with C(mincore(2)) over a mapping
    of the file. The reads are real reads after C(POSIX_FADV_WILLNEED), so the pages are in the page cache
    when the module returns.
  - With O(cache_folders), first (before any read) the server's compile cache folders (Triton, TorchInductor,
    FlashInfer, DeepGEMM) are checked and the missing ones made, so that the caches outlive a restart. A compile
    cache holds code the server loads and runs, so the guard's trust rule applies. Every folder above a cache
    folder must be root's (more exactly, the module's user's), writable by neither its group nor others, and
    passable by O(cache_owner). The cache folder itself must be no symlink, O(cache_owner)'s own and writable by
    neither its group nor others. A refused folder fails the module, naming each folder with its owner and mode,
    before anything is made. A missing folder is made O(cache_owner)'s with mode C(0700), and the missing
    folders above it root's with mode C(0755).
author:
  - gpuops.sglang maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.sglang.attributes
attributes:
  check_mode:
    support: full
    details:
      - Measures the residency and says what a run would read (RV(would_read_bytes)) and whether it would stop early; reads nothing.
      - Checks the cache folders and says which it would make (RV(cache_folders[].made), C(changed)); makes none.
  diff_mode:
    support: full
    details: Each cache folder made (or, in check mode, to be made), with the folders above it, from absent to a folder with its owner and mode.
  platform:
    platforms: posix
    details: Linux (C(/proc/meminfo) and C(mincore(2))).
options:
  paths:
    description:
      - Model folders or files to read, the server's model path and its draft model's path
        (C(sglang_model_path), C(sglang_draft_model_path)).
      - A value that is not an absolute path is a hub id, which the server downloads at its start; it is skipped.
      - V([]) reads nothing (the cache folders alone, when the prefetch is off).
    type: list
    elements: str
    default: []
  reserve_mib:
    description:
      - MiB of C(MemAvailable) the prefetch leaves alone. It reads at most C(MemAvailable) at its start less this,
        counting only bytes not yet in the page cache, and stops when C(MemAvailable) is at or below it.
    type: int
    default: 4096
  timeout:
    description: Seconds the prefetch may take; it stops reading when they have passed and says so.
    type: float
    default: 600
  cache_folders:
    description:
      - The server's compile cache folders (the launch configuration's C(TRITON_CACHE_DIR), C(TORCHINDUCTOR_CACHE_DIR),
        C(FLASHINFER_WORKSPACE_BASE), C(SGLANG_DG_CACHE_DIR)), absolute paths; checked and made before any read.
    type: list
    elements: path
    default: []
  cache_owner:
    description: The user the server runs as (C(sglang_user)), whose the cache folders must be; a name or a uid.
    type: str
    default: root
  cache_group:
    description: The group a cache folder made is given (C(sglang_group)); unset, O(cache_owner)'s primary group.
    type: str
notes:
  - Since Linux 5.0 the kernel answers C(mincore) on a file only for root, the file's owner or a user who may
    write the file. For any other file RV(files[].resident_before_pct) and RV(files[].resident_after_pct) are
    null, and the whole file counts against the budget.
  - The page cache is the kernel's. Under memory pressure it evicts what this module read like any other clean
    page, which is why the budget leaves O(reserve_mib) free.
seealso:
  - module: gpuops.sglang.sglang_server
'''

EXAMPLES = r'''
- name: Read the new server's model and draft model into the page cache while the old server serves
  gpuops.sglang.sglang_prefetch:
    paths:
      - /models/Qwen3-32B
      - /models/Qwen3-32B-EAGLE3
    reserve_mib: 8192
    timeout: 900
  register: prefetch

- name: Keep the compile caches of a server run as sglang, and count what they hold, before the stop
  gpuops.sglang.sglang_prefetch:
    paths: []
    cache_folders:
      - /var/cache/sglang/sglang/triton
      - /var/cache/sglang/sglang/torchinductor
    cache_owner: sglang
  register: caches

- name: Say what a prefetch would read, reading nothing
  gpuops.sglang.sglang_prefetch:
    paths: [/models/DeepSeek-R1]
  check_mode: true
'''

RETURN = r'''
files:
  description: The files read (or, in check mode, that would be read), in the order they were read.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The file's path as listed in its folder (a symlink's path in the Hugging Face cache).
      type: str
    bytes:
      description: Its size.
      type: int
    resident_before_pct:
      description: Percent of its bytes in the page cache before the prefetch (V(100.0) for an empty file); null when the kernel does not say.
      type: float
    resident_after_pct:
      description: Percent of its bytes in the page cache after the prefetch; null when the kernel does not say.
      type: float
  sample: [{"path": "/models/Qwen3-32B/config.json", "bytes": 728, "resident_before_pct": 0.0, "resident_after_pct": 100.0}]
bytes:
  description: Total size of RV(files).
  returned: always
  type: int
  sample: 65527752704
read_bytes:
  description: Bytes read (V(0) in check mode).
  returned: always
  type: int
  sample: 48935632896
would_read_bytes:
  description: Bytes not in the page cache at the start, up to the budget (C(MemAvailable) at the start less O(reserve_mib)); what the prefetch meant to read.
  returned: always
  type: int
  sample: 48935632896
resident_before_pct:
  description:
    - Percent of RV(bytes) in the page cache before the prefetch, byte-weighted over the files the kernel says it
      for; V(100.0) when there are no files, null when the kernel says it for none.
  returned: always
  type: float
  sample: 25.3
resident_after_pct:
  description: Percent of RV(bytes) in the page cache after the prefetch, measured as RV(resident_before_pct).
  returned: always
  type: float
  sample: 100.0
seconds:
  description: Seconds the prefetch took, measurements included.
  returned: always
  type: float
  sample: 21.4
skipped_paths:
  description:
    - Paths and files not read, each with why. (Not C(skipped), which Ansible reads as the task having been skipped.)
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The path as given, or the file in a folder.
      type: str
    why:
      description: Why it was not read (not an absolute path, does not exist, cannot be opened or read).
      type: str
  sample: [{"path": "meta-llama/Llama-3.1-8B",
            "why": "not an absolute path: a hub id (the server downloads it at its start) or a relative path is not read ahead"}]
stopped_early:
  description: Whether the prefetch stopped before every file was read (in check mode, whether a run would stop at the budget).
  returned: always
  type: bool
why:
  description: Why it stopped early (the budget, the reserve, the deadline) and what would let it read the rest; null when it did not.
  returned: always
  type: str
  sample: "1024.0 MiB of the files stay unread: the deadline of 600 s passed; raise the timeout to read them"
mem_available_mib_before:
  description: C(MemAvailable) at the start in MiB; null when C(/proc/meminfo) has none.
  returned: always
  type: int
mem_available_mib_after:
  description: C(MemAvailable) at the end in MiB; null when C(/proc/meminfo) has none.
  returned: always
  type: int
reserve_mib:
  description: O(reserve_mib), as used.
  returned: always
  type: int
cache_files:
  description: Files found under O(cache_folders) before the start (what the new server may reuse); V(0) without them.
  returned: always
  type: int
  sample: 1843
cache_folders:
  description: Each of O(cache_folders), in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: The folder.
      type: str
    files:
      description: Files found under it (symlinks not followed).
      type: int
    made:
      description: Whether it was made (in check mode, whether it would be).
      type: bool
  sample: [{"path": "/var/cache/sglang/sglang/triton", "files": 1843, "made": false}]
'''

from typing import Any

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.sglang.plugins.module_utils._module import (
    new_result,
    require_not_negative,
    require_positive,
    run_module,
)
from ansible_collections.gpuops.sglang.plugins.module_utils.readers._page_cache import MIB, Prefetch, model_files
from ansible_collections.gpuops.sglang.plugins.module_utils.base._identity import UnknownIdentity, identity
from ansible_collections.gpuops.sglang.plugins.module_utils.domain._caches import UntrustedCache, cache_folders

ARGUMENT_SPEC = dict(
    paths=dict(type='list', elements='str', default=[]),
    reserve_mib=dict(type='int', default=4096),
    timeout=dict(type='float', default=600.0),
    cache_folders=dict(type='list', elements='path', default=[]),
    cache_owner=dict(type='str', default='root'),
    cache_group=dict(type='str'),
)


def caches(module: AnsibleModule, result: dict[str, Any]) -> None:
    """The cache folders checked (UntrustedCache before anything is made), the missing ones made; what they hold."""
    params = module.params
    if not params['cache_folders']:
        return
    run = cache_folders(params['cache_folders'], identity(params['cache_owner'], params['cache_group']),
                        make=not module.check_mode)
    result.update(cache_files=run.files, cache_folders=run.folders, changed=bool(run.made))
    if run.made and module._diff:
        result['diff'] = [dict(before=dict(path=entry['path'], state='absent'), after=dict(entry, state='directory'))
                          for entry in run.made]


def failure(exc: Exception) -> str:
    if isinstance(exc, UnknownIdentity):
        return 'cache_owner or cache_group: %s; name the user and group the server runs as (sglang_user, sglang_group)' % exc
    return str(exc)


def prefetch(module: AnsibleModule, result: dict[str, Any]) -> None:
    params = module.params
    require_not_negative(params, ('reserve_mib',))
    require_positive(params, 'timeout')
    # First: a refused cache folder fails the module before a byte is read (and before the stop, which comes after).
    caches(module, result)
    files, skipped = model_files(params['paths'])
    run = Prefetch(params['reserve_mib'] * MIB, params['timeout']).run(files, read=not module.check_mode)
    result.update(run, skipped_paths=skipped + run['skipped_paths'])


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = new_result(files=[], bytes=0, read_bytes=0, would_read_bytes=0, resident_before_pct=100.0,
                        resident_after_pct=100.0, seconds=0.0, skipped_paths=[], stopped_early=False, why=None,
                        mem_available_mib_before=None, mem_available_mib_after=None,
                        reserve_mib=module.params['reserve_mib'], cache_files=0, cache_folders=[])
    # The page cache is the kernel's, not a change: changed is true only when a cache folder is made.
    run_module(module, result, lambda: prefetch(module, result), errors=(UntrustedCache, UnknownIdentity),
               describe=failure)


if __name__ == '__main__':
    main()
