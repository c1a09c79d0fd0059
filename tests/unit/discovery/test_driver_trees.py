"""Driver trees without ld.so.cache (GKE/COS, driver containers) and the driver root at
/usr/local/nvidia, built by :mod:`ocihook.sim.drivertree`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import run_cli

from ocihook.core.errors import DiscoveryError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover
from ocihook.sim import drivertree

V = drivertree.simhost.DEFAULT_DRIVER_VERSION
SONAMES = {
    "libnvidia-ml.so.1",
    "libcuda.so.1",
    "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-nvvm.so.4",
    f"libnvidia-gpucomp.so.{V}",
}


@pytest.mark.parametrize(
    ("layout", "libdir", "bindir"),
    [
        ("cos", "/lib64", "/bin"),
        ("driver-container", "/usr/lib/x86_64-linux-gnu", "/usr/bin"),
        ("usr-local-nvidia", "/lib64", "/bin"),
    ],
)
def test_tree_without_ldcache(layout: str, libdir: str, bindir: str, tmp_path: Path) -> None:
    t = drivertree.build(str(tmp_path / "h"), layout, make_dev_nodes=False)
    assert (t.libdir, t.bindir) == (libdir, bindir)
    assert not os.path.exists(os.path.join(t.driver_root, "etc/ld.so.cache"))
    h = discover(HostRoot(driver_root=t.driver_root, dev_root=t.root))
    assert h.driver_version == V and len(h.gpus) == 2
    assert {lib.soname for lib in h.libraries} == SONAMES
    cuda = next(lib for lib in h.libraries if lib.soname == "libcuda.so.1")
    assert cuda.path == f"{libdir}/libcuda.so.{V}"
    assert cuda.host_path == os.path.join(t.driver_root, libdir.lstrip("/"), f"libcuda.so.{V}")
    assert {f.path for f in h.files if f.kind == "binary"} == {
        f"{bindir}/nvidia-smi",
        f"{bindir}/nvidia-debugdump",
    }
    ld_warnings = [w for w in h.warnings if "ld.so.cache" in w]
    assert len(ld_warnings) == 1  # once, not once per library
    assert ld_warnings[0].startswith(
        f"no ld.so.cache in the driver root ({t.driver_root}/etc/ld.so.cache): driver "
        "libraries searched in the standard library directories"
    )


def test_cos_cli_list_and_library_path(tmp_path: Path) -> None:
    """`ocihook list` on a COS node works, also with --library-path (exit 6 before)."""
    t = drivertree.build(str(tmp_path / "h"), "cos", make_dev_nodes=False)
    for extra in ((), ("--library-path", "/lib64")):
        r = run_cli("list", "-l", "--driver-root", t.driver_root, "--dev-root", t.root, *extra)
        assert r.returncode == 0, r.stderr
        assert os.path.join(t.driver_root, f"lib64/libcuda.so.{V}") in r.stdout.splitlines()


def test_cos_wrong_driver_root_is_one_line(tmp_path: Path) -> None:
    """The COS node with the default driver root (its / has no driver and no cache): one
    line naming the problem and the settings to change, exit 6."""
    t = drivertree.build(str(tmp_path / "h"), "cos", make_dev_nodes=False)
    r = run_cli("list", "--driver-root", t.root, "--dev-root", t.root)
    assert r.returncode == 6, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "no ld.so.cache in the driver root" in lines[0]
    assert f"no NVIDIA {V} driver library" in lines[0]
    assert "--driver-root" in lines[0] and "/home/kubernetes/bin/nvidia" in lines[0]
    assert "--library-path" in lines[0]
    with pytest.raises(DiscoveryError):
        discover(HostRoot.single(t.root))


def test_usr_local_nvidia_default_root_through_the_host_cache(tmp_path: Path) -> None:
    """The host's own ld.so.cache lists /usr/local/nvidia/lib64: the default driver root
    finds libraries and binaries there, without a warning about the cache."""
    t = drivertree.build(str(tmp_path / "h"), "usr-local-nvidia", make_dev_nodes=False)
    h = discover(HostRoot.single(t.root))
    assert {lib.soname for lib in h.libraries} == SONAMES
    assert {lib.path for lib in h.libraries} == {
        f"/usr/local/nvidia/lib64/{n}.{V}"
        for n in (
            "libnvidia-ml.so",
            "libcuda.so",
            "libnvidia-ptxjitcompiler.so",
            "libnvidia-nvvm.so",
            "libnvidia-gpucomp.so",
        )
    }
    assert "/usr/local/nvidia/bin/nvidia-smi" in {f.path for f in h.files}
    assert not [w for w in h.warnings if "ld.so.cache" in w]


def test_usr_local_nvidia_default_root_without_host_cache(tmp_path: Path) -> None:
    """Without the host's cache the standard directories include /usr/local/nvidia/lib64."""
    t = drivertree.build(str(tmp_path / "h"), "usr-local-nvidia", make_dev_nodes=False)
    os.unlink(os.path.join(t.root, "etc/ld.so.cache"))
    h = discover(HostRoot.single(t.root))
    assert {lib.soname for lib in h.libraries} == SONAMES


def test_read_only_driver_root_in_private_mount_namespace(tmp_path: Path) -> None:
    """The tree read-only at /usr/local/nvidia (a bind mount in a private mount namespace:
    the real host's mounts never change): `list --driver-root /usr/local/nvidia` and the
    default root with the host's cache (bind-mounted over /etc/ld.so.cache) both work."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (util-linux) for a private mount namespace")
    t = drivertree.build(str(tmp_path / "h"), "usr-local-nvidia", make_dev_nodes=False)
    tree = t.driver_root
    cache = os.path.join(t.root, "etc/ld.so.cache")
    py = sys.executable
    script = f"""set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /usr/local
mkdir /usr/local/nvidia
mount --bind {tree} /usr/local/nvidia
mount -o remount,bind,ro /usr/local/nvidia
echo "RO $(touch /usr/local/nvidia/x 2>&1 || true)"
echo ROOT1; {py} -m ocihook list -l -b --driver-root /usr/local/nvidia --dev-root {t.root}
mount --bind {cache} /etc/ld.so.cache
echo ROOT2; {py} -m ocihook list -l -b --dev-root {t.root}
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "Read-only file system" in out.splitlines()[0], out
    first, second = out.split("ROOT1\n", 1)[1].split("ROOT2\n", 1)
    assert f"/usr/local/nvidia/lib64/libcuda.so.{V}" in first.splitlines()
    assert "/usr/local/nvidia/bin/nvidia-smi" in first.splitlines()
    assert f"/usr/local/nvidia/lib64/libcuda.so.{V}" in second.splitlines()
    assert "/usr/local/nvidia/bin/nvidia-smi" in second.splitlines()
    # the host's own mounts are as before
    with open("/proc/self/mountinfo") as f:
        assert " /usr/local/nvidia " not in f.read()


def test_layout_unknown(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="layout must be one of cos, driver-container"):
        drivertree.build(str(tmp_path / "h"), "gke")


def test_usr_local_nvidia_not_mounted_is_one_line(tmp_path: Path) -> None:
    """--driver-root naming a tree that is not there (the mount is missing): one line
    naming the setting, exit 6."""
    t = drivertree.build(str(tmp_path / "h"), "usr-local-nvidia", make_dev_nodes=False)
    missing = os.path.join(t.root, "nonexistent/usr/local/nvidia")
    r = run_cli("list", "--driver-root", missing, "--dev-root", t.root)
    assert r.returncode == 6, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "driver root does not exist" in lines[0], r.stderr
    assert "--driver-root" in lines[0] and missing in lines[0]
