"""Driver layouts users really have (issue: host discovery, item 5)."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest
from support import run_cli

from ocihook.core.errors import DiscoveryError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover
from ocihook.linux import ldcache
from ocihook.sim import host as simhost
from ocihook.sim.elfwrite import make_shared_object

V = simhost.DEFAULT_DRIVER_VERSION


def _copy(src: str, dst: str) -> str:
    subprocess.run(["cp", "-a", src, dst], check=True)
    return dst


def test_driver_root_separate_from_dev_root(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """A driver container: libraries under /run/nvidia/driver, procfs and /dev from the host."""
    host = str(tmp_path / "host")
    _copy(sim.root, host)
    driver = os.path.join(host, "run/nvidia/driver")
    os.makedirs(driver)
    for d in ("usr", "etc"):
        shutil.move(os.path.join(host, d), os.path.join(driver, d))
    h = discover(HostRoot(driver_root=driver, dev_root=host))
    assert h.driver_version == V and len(h.gpus) == 8
    cuda = next(lib for lib in h.libraries if lib.soname == "libcuda.so.1")
    # the absolute /etc/alternatives link is followed inside the driver root
    assert cuda.host_path == os.path.join(
        driver, f"usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.{V}"
    )
    assert cuda.path == f"/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.{V}"
    assert h.control_nodes[0].host_path == os.path.join(host, "dev/nvidiactl")
    # the host's own root (no driver there) is not where libraries came from
    assert all(lib.host_path.startswith(driver + "/") for lib in h.libraries)
    # with the roots swapped there is no driver
    with pytest.raises(DiscoveryError, match=r"ld\.so\.cache|version"):
        discover(HostRoot(driver_root=host, dev_root=driver))


def _tree_with_libs(root: str, libdir: str, names: list[tuple[str, str]], cache: bool) -> None:
    d = os.path.join(root, libdir.lstrip("/"))
    os.makedirs(d, exist_ok=True)
    entries = []
    for soname, name in names:
        with open(os.path.join(d, name), "wb") as f:
            f.write(make_shared_object(soname))
        entries.append(ldcache.CacheEntry(soname, f"{libdir}/{name}", 0x0303))
    os.makedirs(os.path.join(root, "etc"), exist_ok=True)
    with open(os.path.join(root, "etc/ld.so.cache"), "wb") as f:
        f.write(ldcache.build(entries if cache else []))


def _kernel_side(sim: simhost.SimulatedHost, root: str) -> None:
    for d in ("proc", "sys"):
        _copy(os.path.join(sim.root, d), os.path.join(root, d))


def test_libraries_only_through_the_cache(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """/var/lib/nvidia/lib64 is in no standard directory: only the cache finds it."""
    root = str(tmp_path / "r")
    os.makedirs(root)
    _kernel_side(sim, root)
    _tree_with_libs(
        root,
        "/var/lib/nvidia/lib64",
        [("libcuda.so.1", f"libcuda.so.{V}"), ("libnvidia-ml.so.1", f"libnvidia-ml.so.{V}")],
        cache=True,
    )
    h = discover(HostRoot.single(root))
    assert {(lib.soname, lib.path) for lib in h.libraries} == {
        ("libcuda.so.1", f"/var/lib/nvidia/lib64/libcuda.so.{V}"),
        ("libnvidia-ml.so.1", f"/var/lib/nvidia/lib64/libnvidia-ml.so.{V}"),
    }


def test_user_library_path(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """Libraries in /opt/nvidia/lib, absent from the cache, are found only when the user
    names the directory (--library-path); their sonames come from the soname links."""
    root = str(tmp_path / "r")
    os.makedirs(root)
    _kernel_side(sim, root)
    _tree_with_libs(root, "/opt/nvidia/lib", [("libcuda.so.1", f"libcuda.so.{V}")], cache=False)
    os.symlink(f"libcuda.so.{V}", os.path.join(root, "opt/nvidia/lib/libcuda.so.1"))
    bare = discover(HostRoot.single(root))
    assert bare.libraries == ()
    assert any("lists no NVIDIA driver library" in w for w in bare.warnings)
    h = discover(HostRoot(root, root, library_dirs=("/opt/nvidia/lib",)))
    assert [(lib.soname, lib.path) for lib in h.libraries] == [
        ("libcuda.so.1", f"/opt/nvidia/lib/libcuda.so.{V}")
    ]
    proc = run_cli(
        "list", "--driver-root", root, "--dev-root", root, "--library-path", "/opt/nvidia/lib"
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert os.path.join(root, f"opt/nvidia/lib/libcuda.so.{V}") in out


def test_soname_from_elf_when_no_link(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    root = str(tmp_path / "r")
    os.makedirs(root)
    _kernel_side(sim, root)
    _tree_with_libs(
        root, "/opt/nv", [("libnvidia-nvvm.so.4", f"libnvidia-nvvm.so.{V}")], cache=False
    )
    h = discover(HostRoot(root, root, library_dirs=("/opt/nv",)))
    assert [lib.soname for lib in h.libraries] == ["libnvidia-nvvm.so.4"]


def test_stale_driver_beside_current(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """An older driver's files left beside the current ones are never selected, even when
    the cache lists them first."""
    root = str(tmp_path / "r")
    os.makedirs(root)
    _kernel_side(sim, root)
    libdir = "/usr/lib/x86_64-linux-gnu"
    _tree_with_libs(
        root,
        libdir,
        [("libcuda.so.1", "libcuda.so.470.57.02"), ("libcuda.so.1", f"libcuda.so.{V}")],
        cache=True,
    )
    h = discover(HostRoot.single(root))
    assert [lib.name for lib in h.libraries] == [f"libcuda.so.{V}"]
    assert any("libcuda.so.470.57.02" in w and "skipped" in w for w in h.warnings)
