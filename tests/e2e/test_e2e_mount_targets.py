"""Spec mode makes the bind-mount targets itself, for the legacy path
and for CDI devices, with real runc and a hostile image whose library directory and
``/var`` are links pointing out of the root: the container gets the host's libraries where
the links lead inside its root, runc makes no target (they exist), and nothing appears on
the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import REPO, fill_packaged, need_root_and

from ocihook.appliers.live.leftovers import RECORD_NAME
from ocihook.appliers.spec import edit_bundle
from ocihook.config.options import Options
from ocihook.core.hostroot import HostRoot
from ocihook.sim import host as simhost
from ocihook.sim.demo import run_container


def _cdi_spec_dir(sim: simhost.SimulatedHost, where: Path) -> tuple[Path, str]:
    """A directory holding the CDI spec ``ocihook cdi generate`` writes for ``sim``, and
    the container directory its spec puts ``libcuda.so.<version>`` in."""
    where.mkdir()
    out = where / "nvidia.json"
    roots = ["--driver-root", sim.root, "--dev-root", sim.root]
    cmd = [sys.executable, "-m", "ocihook", "cdi", "generate", *roots, "--output", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    mounts = json.loads(out.read_text())["containerEdits"]["mounts"]
    cuda = f"libcuda.so.{sim.driver_version}"
    libdir = next(
        os.path.dirname(m["containerPath"])
        for m in mounts
        if os.path.basename(m["containerPath"]) == cuda and "i386" not in m["containerPath"]
    )
    return where, libdir


@pytest.mark.parametrize("mode", ["legacy", "cdi"])
def test_hostile_image_links_out_of_the_root(
    mode: str, sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """Legacy spec mode (``NVIDIA_VISIBLE_DEVICES=0``) and CDI (``...=nvidia.com/gpu=0``
    from the spec ``cdi generate`` wrote): the image's library directory and ``/var``
    are links pointing out of the root; ocihook makes the mount targets where the links
    lead inside the root before runc runs, and nothing appears on the host."""
    need_root_and("runc")
    outside = tmp_path / "host-side"
    outside.mkdir()
    v = sim.driver_version
    options, libdir, request = None, "/usr/lib64", "0"
    if mode == "cdi":
        spec_dir, libdir = _cdi_spec_dir(sim, tmp_path / "cdi")
        options, request = Options(cdi_spec_dirs=(str(spec_dir),)), "nvidia.com/gpu=0"
    script = (
        f"head -c 4 {libdir}/libcuda.so.{v} | od -An -tx1; "
        f"test -S {simhost.PERSISTENCED_SOCKET} && echo socket; "
        f"grep ' {libdir}/libcuda.so.{v} \\| {outside}/libcuda.so.{v} ' /proc/self/mountinfo"
        " | cut -d' ' -f5,6"
    )
    bundle = bundle_factory(["sh", "-c", script], [f"NVIDIA_VISIBLE_DEVICES={request}"])
    rootfs = Path(bundle, "rootfs")
    link = rootfs / libdir.lstrip("/")
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.exists() or link.is_symlink():
        os.unlink(link)
    os.symlink(f"/../../../..{outside}", link)  # ".." past "/", then out
    if not (rootfs / "var").is_symlink() and (rootfs / "var").is_dir():
        os.rename(rootfs / "var", rootfs / "var.image")
    os.symlink(str(outside), rootfs / "var")
    result = edit_bundle(bundle, HostRoot.single(sim.root), options=options)
    assert result.written
    assert result.cdi_devices == (("nvidia.com/gpu=0",) if mode == "cdi" else ())
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


def _tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` and its kind (a link: its target)."""
    out = {}
    for p in root.rglob("*"):
        rel = str(p.relative_to(root))
        out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else "dir" if p.is_dir() else "file"
    return out


def test_hook_mode_poststop_removes_what_it_made(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """Hook mode in a reused rootfs: the prestart hook makes mount targets and soname
    links and records them in the bundle; the poststop hook of the packaged snippet
    removes exactly those once the container is gone. An image file changed since is
    kept. The container's ld.so.cache (rewritten, not made) stays."""
    need_root_and("runc")
    v = sim.driver_version
    bundle = bundle_factory(["sh", "-c", f"test -e /usr/lib64/libcuda.so.{v}"], [])
    rootfs = Path(bundle, "rootfs")
    before = _tree(rootfs)
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=0")
    with open(os.path.join(REPO, "packaging/config.json-hooks-snippet.json.in")) as f:
        snippet = json.loads(fill_packaged(f.read()))["hooks"]
    prestart = snippet["prestart"][0]
    prestart["args"] += ["--driver-root", sim.root, "--dev-root", sim.root]
    doc["hooks"] = {"prestart": [prestart]}
    cfg.write_text(json.dumps(doc))
    # without the poststop hook: the mount targets and links stay, and their record
    proc = run_container(bundle, state_root=str(tmp_path / "r1"), timeout=30)
    assert proc.returncode == 0, proc.stderr
    left = {p: k for p, k in _tree(rootfs).items() if p not in before}
    assert f"usr/lib64/libcuda.so.{v}" in left and left["usr/lib64/libcuda.so.1"].startswith("->")
    record = json.loads(Path(bundle, RECORD_NAME).read_text())
    assert "/usr/lib64/libcuda.so.1" in record["paths"]
    assert not any(p.startswith("/dev/") for p in record["paths"])
    # ocihook hook poststop, as the runtime runs it (state on stdin): exactly that goes
    # (an image file changed since is kept: the link made for libcuda.so points elsewhere)
    os.unlink(rootfs / "usr/lib64/libcuda.so")
    os.symlink("changed-by-the-image", rootfs / "usr/lib64/libcuda.so")
    state = json.dumps({"ociVersion": "1.0.2", "id": "x", "status": "stopped", "bundle": bundle})
    proc = subprocess.run(
        snippet["poststop"][0]["args"], input=state, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert "/usr/lib64/libcuda.so changed since ocihook made it: kept" in proc.stderr
    kept = {"usr": "dir", "usr/lib64": "dir", "usr/lib64/libcuda.so": "-> changed-by-the-image"}
    assert {p: k for p, k in _tree(rootfs).items() if p != "etc/ld.so.cache"} == {
        **before,
        **kept,
    }
    assert not Path(bundle, RECORD_NAME).exists()
    for rel in sorted(kept, reverse=True):  # the image's own change goes too
        (rootfs / rel).unlink() if kept[rel] != "dir" else (rootfs / rel).rmdir()
    # the next container on the same rootfs, with the poststop hook registered
    doc["hooks"]["poststop"] = snippet["poststop"]
    cfg.write_text(json.dumps(doc))
    proc = run_container(bundle, state_root=str(tmp_path / "r2"), timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert {p: k for p, k in _tree(rootfs).items() if p != "etc/ld.so.cache"} == before
    assert not Path(bundle, RECORD_NAME).exists()
