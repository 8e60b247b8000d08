"""Real disk faults for the log-directory failure tests: a small tmpfs gives a real ENOSPC, a read-only remount a
real EROFS. Both need root (CI runs as root); ``require_mount()`` skips with the reason when mounting is not
permitted here.

EIO: a device-mapper ``error`` target (or a FUSE file system) would give a real EIO, but needs the ``dm_mod``
kernel module (``/dev/mapper``) or ``/dev/fuse``; where neither is there, the tests use EROFS, which takes the same
path in the broker (every ``OSError`` of a log directory fails it, whatever its errno)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_MOUNT_OK: tuple[bool, str] | None = None


def _mount_permitted() -> tuple[bool, str]:
    global _MOUNT_OK
    if _MOUNT_OK is None:
        if os.geteuid() != 0:
            _MOUNT_OK = (False, "needs root to mount a tmpfs (CI runs as root)")
        else:
            probe = Path(tempfile.mkdtemp(prefix="tidelog-mount-probe-"))
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)],
                               capture_output=True, text=True)
            if r.returncode == 0:
                subprocess.run(["umount", str(probe)], capture_output=True)
                _MOUNT_OK = (True, "")
            else:
                _MOUNT_OK = (False, f"mount is not permitted here: {r.stderr.strip()}")
            probe.rmdir()
    return _MOUNT_OK


def require_mount() -> None:
    ok, why = _mount_permitted()
    if not ok:
        pytest.skip(why)


class Tmpfs:
    """A tmpfs mounted on ``path`` with ``size`` bytes."""

    def __init__(self, path: Path, size_kib: int) -> None:
        self.path = Path(path)
        self.size_kib = size_kib

    def mount(self) -> Tmpfs:
        self.path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_kib}k", "tmpfs", str(self.path)], check=True)
        return self

    def resize(self, size_kib: int) -> None:
        """Grow (or shrink) the file system in place: the files stay."""
        subprocess.run(["mount", "-o", f"remount,size={size_kib}k", str(self.path)], check=True)
        self.size_kib = size_kib

    def remount(self, read_only: bool) -> None:
        subprocess.run(["mount", "-o", f"remount,{'ro' if read_only else 'rw'}", str(self.path)], check=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True)

    def free_bytes(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, name: str = "filler", leave: int = 0) -> Path:
        """Write a file until the file system is full (ENOSPC), or has ``leave`` bytes left; returns it."""
        path = self.path / name
        chunk = b"\0" * 65536
        with open(path, "ab") as f:
            while True:
                room = self.free_bytes() - leave
                if room <= 0:
                    break
                try:
                    f.write(chunk[: min(len(chunk), room)])
                    f.flush()
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
        return path


@contextlib.contextmanager
def tmpfs(path: Path, size_kib: int) -> Iterator[Tmpfs]:
    fs = Tmpfs(path, size_kib).mount()
    try:
        yield fs
    finally:
        fs.unmount()


@contextlib.contextmanager
def ext4_on_full_loop(path: Path, backing_kib: int = 6144, image_mib: int = 64) -> Iterator[Tmpfs]:
    """An ext4 file system of ``image_mib`` MiB mounted on ``path``, on a loop device whose (sparse) image lives on
    a tmpfs of ``backing_kib``: when that tmpfs is full (too small, or ``fill``ed), ext4 still believes it has
    room, so ``write`` succeeds into the page cache, and the failure comes at writeback: a real **failed fsync**
    (the loop device cannot store the blocks; the kernel reports it as ENOSPC, not EIO). Yields the tmpfs holding
    the image (``fill`` it to cause the fault, remove the filler to end it). Skips when loop devices or mkfs.ext4
    are missing."""
    require_mount()
    if shutil.which("losetup") is None or shutil.which("mkfs.ext4") is None:
        pytest.skip("losetup or mkfs.ext4 missing")
    backing = Path(str(path) + "-backing")
    fs = Tmpfs(backing, backing_kib).mount()
    loop = None
    try:
        image = backing / "image"
        with open(image, "wb") as f:
            f.truncate(image_mib << 20)
        r = subprocess.run(["losetup", "-f", "--show", str(image)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"no loop device: {r.stderr.strip()}")
        loop = r.stdout.strip()
        subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-E", "lazy_itable_init=1,nodiscard", loop],
                       check=True, capture_output=True)
        Path(path).mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", loop, str(path)], check=True)
        try:
            yield fs
        finally:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
    finally:
        if loop is not None:
            subprocess.run(["losetup", "-d", loop], capture_output=True)
        fs.unmount()
