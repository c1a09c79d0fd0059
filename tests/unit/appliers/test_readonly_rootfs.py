"""A read-only rootfs mount (crun's root.readonly before createContainer hooks) made
writable for the hook's edits and read-only again (ocihook.appliers.live.rootfs)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from typing import Any

import pytest
from support import need_root_and

from ocihook.appliers.live import rootfs as rootfs_mod
from ocihook.core.errors import ApplyError

MOUNTINFO = """\
22 1 254:0 / / rw,relatime - ext4 /dev/vda rw
130 22 254:0 /b/rootfs /b/rootfs ro,relatime - ext4 /dev/vda rw
131 130 0:53 / /b/rootfs/proc rw,relatime - proc proc rw
140 22 254:0 /c\\040d /c\\040d ro,relatime - ext4 /dev/vda rw
141 22 254:0 /e /e ro - ext4 /dev/vda rw
142 141 254:0 /e /e rw - ext4 /dev/vda rw
"""


@pytest.mark.parametrize(
    ("path", "readonly"),
    [
        ("/b/rootfs", True),
        ("/b/rootfs/", True),
        ("/b", False),  # a directory of a larger mount: never the host's mount
        ("/c d", True),  # octal escapes decoded
        ("/e", False),  # the topmost mount at the path decides
        ("/b/rootfs/proc", False),
    ],
)
def test_readonly_rootfs_mount(tmp_path: Any, path: str, readonly: bool) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(MOUNTINFO)
    assert rootfs_mod.readonly_rootfs_mount(path, mountinfo=str(info)) is readonly
    assert not rootfs_mod.readonly_rootfs_mount(path, mountinfo=str(tmp_path / "none"))


def test_a_writable_file_system_is_answered_without_mountinfo(tmp_path: Any) -> None:
    """A rootfs on a writable mount (``statvfs`` has no ``ST_RDONLY``) is not read-only,
    whatever mountinfo says: it is not read (here it would say ``ro``)."""
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    info = tmp_path / "mountinfo"
    info.write_text(
        f"22 1 254:0 / / rw - ext4 /dev/vda rw\n130 22 254:0 / {rootfs} ro - ext4 x rw\n"
    )
    assert not os.statvfs(rootfs).f_flag & os.ST_RDONLY
    assert rootfs_mod.readonly_rootfs_mount(str(rootfs), mountinfo=str(info)) is False


def test_unlock_failure_names_the_setting(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from ocihook.linux import syscalls

    def refuse(*_args: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(rootfs_mod, "readonly_rootfs_mount", lambda _p: True)
    monkeypatch.setattr(syscalls, "mount_setattr", refuse)
    with pytest.raises(ApplyError) as info:
        rootfs_mod.unlock_readonly_rootfs(str(tmp_path))
    text = str(info.value)
    assert "read-only (root.readonly)" in text and "Operation not permitted" in text
    assert "root.readonly = false" in text and "prestart" in text
    assert "\n" not in text


UNLOCK = """
import os, sys
from ocihook.appliers.live.rootfs import readonly_rootfs_mount, unlock_readonly_rootfs
d = sys.argv[1]
print("RO", readonly_rootfs_mount(d))
relock = unlock_readonly_rootfs(d)
open(os.path.join(d, "made"), "w").close()
print("WROTE", os.path.exists(os.path.join(d, "made")))
relock()
relock()  # a second call does nothing
try:
    open(os.path.join(d, "again"), "w")
except OSError as e:
    print("AFTER", e.strerror)
print("NONE", unlock_readonly_rootfs(os.path.dirname(d)) is None)
"""


def test_unlock_and_relock_a_real_mount(tmp_path: Any) -> None:
    """In a private mount namespace: a read-only bind mount of a directory onto itself
    becomes writable, then read-only again; its parent (no mount of its own) is left."""
    need_root_and("unshare")
    d = tmp_path / "rootfs"
    d.mkdir()
    script = (
        f'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" -c \'{UNLOCK}\' "$1"'
    )
    proc = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            str(d),
            sys.executable,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:4] == [
        "RO True",
        "WROTE True",
        "AFTER Read-only file system",
        "NONE True",
    ]
    assert (d / "made").exists() and not (d / "again").exists()
    with open("/proc/self/mountinfo") as f:
        assert str(d) not in f.read()
    assert os.listdir(d) == ["made"]
