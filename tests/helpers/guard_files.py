"""A guard folder and the live files a run changes, for the revision tests that need no guard module: the guard's
state entries built as its arm keeps them (each file's bytes copied under files/, with its mode, owner and SHA-256).
"""
from __future__ import annotations

import hashlib
import os
import pathlib


class GuardFiles:
    """<root>/guard (0700, with files/) and <root>/live (the files a run changes)."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.guard = root / 'guard'
        (self.guard / 'files').mkdir(parents=True, mode=0o700)
        os.chmod(str(self.guard), 0o700)
        self.live = root / 'live'
        self.live.mkdir()
        self.count = 0

    def path(self, name: str) -> str:
        return str(self.live / name)

    def write(self, name: str, data: bytes, mode: int = 0o644) -> None:
        with open(self.path(name), 'wb') as handle:
            handle.write(data)
        os.chmod(self.path(name), mode)

    def read(self, name: str) -> tuple[bytes, int]:
        with open(self.path(name), 'rb') as handle:
            return handle.read(), os.stat(self.path(name)).st_mode & 0o7777

    def arm(self, names: list[str]) -> list[dict]:
        """The guard's state entries for these files, their bytes kept now."""
        entries = []
        for name in names:
            path = self.path(name)
            self.count += 1
            backup = str(self.guard / 'files' / str(self.count))
            if not os.path.exists(path):
                entries.append({'path': path, 'backup': backup, 'existed': False})
                continue
            with open(path, 'rb') as handle:
                data = handle.read()
            with open(backup, 'wb') as handle:
                handle.write(data)
            info = os.lstat(path)
            entries.append({'path': path, 'backup': backup, 'existed': True, 'kind': 'file',
                            'mode': info.st_mode & 0o7777, 'uid': info.st_uid, 'gid': info.st_gid,
                            'sha256': hashlib.sha256(data).hexdigest()})
        return entries
