"""Pins of spec mode's rootfs edit: an engine's mount at ``/`` (or written ``//``) covers
every path the edit would write, so the links and the cache are left to the hook; a mount
elsewhere covers only what is below it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ocihook.appliers.spec import rootfs_edit_blocker
from ocihook.plan.edits import ContainerEdits, Mount, Symlink

LIB = "/usr/lib64/libcuda.so.1"
EDITS = ContainerEdits(
    mounts=(Mount("/drv/libcuda.so.535.261.03", "/usr/lib64/libcuda.so.535.261.03"),),
    symlinks=(Symlink(LIB, "libcuda.so.535.261.03"),),
    ldcache_libraries=(LIB,),
)


def _config(*destinations: Any) -> dict[str, Any]:
    return {
        "mounts": [{"destination": d, "type": "tmpfs", "source": "tmpfs"} for d in destinations]
    }


@pytest.mark.parametrize("dest", ["/", "//", "///", "/./", "/.", "/usr/..", "/../"])
def test_mount_at_the_root_covers_everything(tmp_path: Path, dest: str) -> None:
    reason, sources = rootfs_edit_blocker(_config(dest), str(tmp_path), EDITS)
    assert (reason, sources) == (f"the mount at / covers {LIB}", {})


@pytest.mark.parametrize(
    ("dest", "reason"),
    [
        ("/etc", "the mount at /etc covers /etc/ld.so.cache"),
        ("/etc/", "the mount at /etc covers /etc/ld.so.cache"),
        ("/./etc", "the mount at /etc covers /etc/ld.so.cache"),
        ("//usr/./lib64/", f"the mount at /usr/lib64 covers {LIB}"),
        ("usr/lib64", f"the mount at /usr/lib64 covers {LIB}"),  # runc: relative to /
        ("etc", "the mount at /etc covers /etc/ld.so.cache"),
        ("/usr/lib64", f"the mount at /usr/lib64 covers {LIB}"),
        (LIB, f"the mount at {LIB} covers {LIB}"),
    ],
)
def test_mount_at_or_above_a_written_path_blocks(tmp_path: Path, dest: str, reason: str) -> None:
    assert rootfs_edit_blocker(_config(dest), str(tmp_path), EDITS) == (reason, {})


@pytest.mark.parametrize("dest", ["/usr/lib", "/usr/lib6", "/etcetera", "/dev", "relative", 7])
def test_mount_elsewhere_does_not_block(tmp_path: Path, dest: Any) -> None:
    reason, sources = rootfs_edit_blocker(_config(dest), str(tmp_path), EDITS)
    assert reason is None
    assert sources == {LIB: "/drv/libcuda.so.535.261.03"}
