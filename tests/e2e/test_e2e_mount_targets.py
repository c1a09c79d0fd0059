"""Spec mode makes the bind-mount targets itself (issue 18, item 5), with real runc and a
hostile image whose library directory and ``/var`` are links pointing out of the root:
the container gets the host's libraries where the links lead inside its root, runc makes
no target (they exist), and nothing appears on the host.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support import need_root_and

from ocihook.appliers.spec import edit_bundle
from ocihook.core.hostroot import HostRoot
from ocihook.sim import host as simhost
from ocihook.sim.demo import run_container


def test_hostile_image_links_out_of_the_root(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    need_root_and("runc")
    outside = tmp_path / "host-side"
    outside.mkdir()
    v = sim.driver_version
    script = (
        f"head -c 4 /usr/lib64/libcuda.so.{v} | od -An -tx1; "
        f"test -S {simhost.PERSISTENCED_SOCKET} && echo socket; "
        f"grep ' /usr/lib64/libcuda.so.{v} \\| {outside}/libcuda.so.{v} ' /proc/self/mountinfo"
        " | cut -d' ' -f5,6"
    )
    bundle = bundle_factory(["sh", "-c", script], ["NVIDIA_VISIBLE_DEVICES=0"])
    rootfs = Path(bundle, "rootfs")
    (rootfs / "usr").mkdir(exist_ok=True)
    if (rootfs / "usr/lib64").exists() or (rootfs / "usr/lib64").is_symlink():
        os.unlink(rootfs / "usr/lib64")
    os.symlink(f"/../../../..{outside}", rootfs / "usr/lib64")  # ".." past "/", then out
    if not (rootfs / "var").is_symlink() and (rootfs / "var").is_dir():
        os.rename(rootfs / "var", rootfs / "var.image")
    os.symlink(str(outside), rootfs / "var")
    result = edit_bundle(bundle, HostRoot.single(sim.root))
    assert result.written
    inside = rootfs / str(outside).lstrip("/")
    # made by ocihook, before runc ran: empty regular files inside the root
    assert (inside / f"libcuda.so.{v}").is_file()
    assert (inside / "run/nvidia-persistenced/socket").is_file()
    proc = run_container(bundle, state_root=str(tmp_path / "runc"), timeout=30)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["7f", "45", "4c", "46"]  # the host's libcuda, read inside
    assert lines[1] == "socket"
    assert lines[2].split()[1].split(",")[0] == "ro"
    assert os.listdir(outside) == []  # nothing on the host side of the links
