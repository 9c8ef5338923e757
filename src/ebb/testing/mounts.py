"""Small filesystems for tests: a read-only copy of some files, and a tiny tmpfs (a disk that fills up).

Both need ``mount`` as root (tmpfs); :func:`read_only_copy` falls back to ``chmod a-w`` for other users
(root ignores file modes, so that fallback is used only when not root). When root cannot mount (no
``CAP_SYS_ADMIN``, e.g. in some containers) they raise :class:`MountUnavailable`, which tests turn
into a skip. Every mount is unmounted when the block ends, also on failure.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["MountUnavailable", "tiny_tmpfs", "read_only_copy"]


class MountUnavailable(RuntimeError):
    """This process cannot mount a tmpfs here (not root, no ``mount``, or no permission)."""


def _mount(*args: str) -> None:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        raise MountUnavailable("mounting a tmpfs needs root and the mount binary")
    res = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise MountUnavailable(f"mount {' '.join(args)} failed: {res.stderr.strip()}")


def _umount(directory: Path) -> None:
    subprocess.run(["umount", str(directory)], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)


@contextmanager
def tiny_tmpfs(directory: Path, *, size_kib: int) -> Iterator[Path]:
    """A tmpfs of ``size_kib`` KiB mounted at ``directory`` (created) until the block ends."""
    directory.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size_kib}k,mode=1777", "tmpfs", str(directory))
    try:
        yield directory
    finally:
        _umount(directory)


@contextmanager
def read_only_copy(files: Sequence[Path], directory: Path) -> Iterator[Path]:
    """Copies of ``files`` in ``directory`` (created), which this process cannot write until the block
    ends: a tmpfs remounted read-only as root, else the copies and the directory ``chmod a-w``."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        _mount("-t", "tmpfs", "-o", "size=16m", "tmpfs", str(directory))
        try:
            for f in files:
                shutil.copy2(f, directory / f.name)
            _mount("-o", "remount,ro", str(directory))
            yield directory
        finally:
            _umount(directory)
        return
    for f in files:
        shutil.copy2(f, directory / f.name)
        (directory / f.name).chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    directory.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        yield directory
    finally:
        directory.chmod(stat.S_IRWXU)
        for f in files:
            (directory / f.name).chmod(stat.S_IRUSR | stat.S_IWUSR)
