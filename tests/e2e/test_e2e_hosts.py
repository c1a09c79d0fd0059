"""End to end with real runc on hard hosts: a WSL2 host
(/dev/dxg, the driver store) and GKE/COS and driver-container trees without ld.so.cache,
in spec mode (``edit_bundle``), hook mode (``ocihook hook prestart``) and, for WSL2, CDI
(``ocihook cdi generate`` then ``ocihook edit`` with the spec directory).

The container's own view is the oracle: the device node it has, the soname links, the ELF
magic read through them, the mount flags of the driver files, what opening the node gives
(ENXIO/ENODEV: allowed by the cgroup, no driver behind it; never EPERM), and its
``/etc/ld.so.cache`` read by the host's ``ldconfig -p -C``.
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
from support import (
    RUNC_SCRIPT,
    check_runc_view,
    edit_with_cdi,
    need_root_and,
    packaged_hook,
    tagged,
    with_mknod_cap,
)

from ocihook.appliers.spec import edit_bundle
from ocihook.core.hostroot import HostRoot
from ocihook.sim import drivertree
from ocihook.sim import wsl as simwsl
from ocihook.sim.demo import run_container
from ocihook.sim.host import UVM_MAJOR

STORE_DIR = f"/usr/lib/wsl/drivers/{simwsl.STORE}"

#: What a container on the WSL2 host prints: /dev/dxg, the store's soname link and what
#: reading through it gives, the nvidia-smi link, the mount flags under /usr/lib/wsl, what
#: opening /dev/dxg gives and what writing a driver file gives.
WSL_SCRIPT = rf"""
S={STORE_DIR}
echo "NODE $(stat -c '%F %t:%T' /dev/dxg)"
echo "LINK $(readlink $S/libcuda.so.1)"
echo "MAGIC $(hexdump -n 4 -e '4/1 "%02x"' $S/libcuda.so.1)"
echo "SMI $(readlink /usr/bin/nvidia-smi)"
grep " /usr/lib/wsl/" /proc/self/mountinfo | while read -r a b c d mp opts rest; do echo "MOUNT $mp $opts"; done
echo "OPEN $(cat /dev/dxg 2>&1 | head -n 1)"
echo "WRITE $(echo x 2>&1 > $S/libcuda.so.1.1)"
"""


def _check_wsl_view(out: str, bundle: str, minor: int) -> None:
    assert tagged(out, "NODE") == [f"character special file a:{minor:x}"], out
    assert tagged(out, "LINK") == ["libcuda.so.1.1"], out
    assert tagged(out, "MAGIC") == ["7f454c46"], out
    assert tagged(out, "SMI") == [f"{STORE_DIR}/nvidia-smi"], out
    mounts = dict(line.split(" ", 1) for line in tagged(out, "MOUNT"))
    assert set(mounts) == {
        f"{STORE_DIR}/{name}"
        for name in (
            "libcuda.so.1.1",
            "libcuda_loader.so",
            "libnvidia-ptxjitcompiler.so.1",
            "libnvidia-ml.so.1",
            "libnvidia-ml_loader.so",
            "libnvdxgdmal.so.1",
            "nvcubins.bin",
            "nvidia-smi",
        )
    } | {"/usr/lib/wsl/lib/libdxcore.so"}, out
    for mp, opts in mounts.items():
        assert {"ro", "nosuid", "nodev"} <= set(opts.split(",")), (mp, opts)
    opened = tagged(out, "OPEN")[0]
    assert "No such device" in opened and "not permitted" not in opened, out
    assert "Read-only file system" in tagged(out, "WRITE")[0], out
    cache = subprocess.run(
        ["ldconfig", "-p", "-C", os.path.join(bundle, "rootfs/etc/ld.so.cache")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"libcuda.so.1 (libc6,x86-64) => {STORE_DIR}/libcuda.so.1" in cache, cache
    assert f"libnvidia-ml.so.1 (libc6,x86-64) => {STORE_DIR}/libnvidia-ml.so.1" in cache
    assert "libdxcore.so (libc6,x86-64) => /usr/lib/wsl/lib/libdxcore.so" in cache


def _register(bundle: str, driver_root: str, dev_root: str) -> None:
    """The packaged prestart hook with its own driver root and dev root."""
    hook = packaged_hook("prestart", driver_root)
    args = list(hook["args"])
    args[args.index("--dev-root") + 1] = dev_root
    hook["args"] = args
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        doc = json.load(f)
    doc.setdefault("hooks", {}).setdefault("prestart", []).append(hook)
    with open(path, "w") as f:
        json.dump(doc, f, indent="\t")


@pytest.mark.parametrize("mode", ["spec", "hook", "cdi"])
def test_wsl2_host(mode: str, bundle_factory: Callable[..., str], tmp_path: Path) -> None:
    need_root_and("runc", "ldconfig")
    host = simwsl.build(str(tmp_path / "wsl"))
    bundle = bundle_factory(["sh", "-c", WSL_SCRIPT], ["NVIDIA_VISIBLE_DEVICES=all"])
    if mode == "spec":
        assert edit_bundle(bundle, HostRoot.single(host.root)).written
    elif mode == "hook":
        _register(bundle, host.root, host.root)
    else:
        spec_dir = tmp_path / "cdi"
        spec_dir.mkdir()
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "ocihook",
                "cdi",
                "generate",
                "--driver-root",
                host.root,
                "--dev-root",
                host.root,
                "--output",
                str(spec_dir / "nvidia.yaml"),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert r.returncode == 0, r.stderr
        cdi_bundle = bundle_factory(
            ["sh", "-c", WSL_SCRIPT], ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"]
        )
        edit_with_cdi(cdi_bundle, spec_dir, tmp_path)
        bundle = cdi_bundle
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode == 0, proc.stderr
    _check_wsl_view(proc.stdout, bundle, host.dxg_minor)


def test_wsl2_one_gpu_by_index_is_one_line(
    bundle_factory: Callable[..., str], tmp_path: Path
) -> None:
    """NVIDIA_VISIBLE_DEVICES=0 on WSL2: runc fails with the hook's one line naming the
    variable and the value to set."""
    need_root_and("runc")
    host = simwsl.build(str(tmp_path / "wsl"))
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0"])
    _register(bundle, host.root, host.root)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.splitlines() if "WSL2" in ln]
    assert len(lines) == 1, proc.stderr
    assert "NVIDIA_VISIBLE_DEVICES" in lines[0] and "=all" in lines[0]


@pytest.mark.parametrize("layout", ["cos", "driver-container"])
@pytest.mark.parametrize("mode", ["spec", "hook"])
def test_driver_tree_without_ldcache(
    layout: str, mode: str, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """The COS / driver-container tree (no ld.so.cache) as driver root, the host as dev
    root: the container gets GPU 0 and the tree's libraries."""
    need_root_and("runc", "ldconfig")
    tree = drivertree.build(str(tmp_path / "host"), layout, gpus=2)
    env = ["NVIDIA_VISIBLE_DEVICES=0", "LIBDIR=/usr/lib64", "OTHER=1"]
    bundle = bundle_factory(["sh", "-c", RUNC_SCRIPT], env)
    with_mknod_cap(bundle)
    if mode == "spec":
        result = edit_bundle(bundle, HostRoot(driver_root=tree.driver_root, dev_root=tree.root))
        assert result.written
    else:
        _register(bundle, tree.driver_root, tree.root)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode == 0, proc.stderr
    check_runc_view(
        proc.stdout,
        version=tree.driver_version,
        libdir="/usr/lib64",
        minors=[0],
        uvm_major=UVM_MAJOR,
    )
    cache = subprocess.run(
        ["ldconfig", "-p", "-C", os.path.join(bundle, "rootfs/etc/ld.so.cache")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "libcuda.so.1 (libc6,x86-64) => /usr/lib64/libcuda.so.1" in cache


@pytest.mark.parametrize("mode", ["spec", "hook"])
def test_read_only_usr_local_nvidia(
    mode: str, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """The driver tree read-only at /usr/local/nvidia (bind-mounted in a private mount
    namespace, where runc runs too; the real host's mounts never change) with
    ``--driver-root /usr/local/nvidia``: the container gets GPU 0 and the tree's files."""
    need_root_and("runc", "unshare")
    tree = drivertree.build(str(tmp_path / "host"), "usr-local-nvidia", gpus=2)
    env = ["NVIDIA_VISIBLE_DEVICES=0", "LIBDIR=/usr/lib64", "OTHER=1"]
    bundle = bundle_factory(["sh", "-c", RUNC_SCRIPT], env)
    with_mknod_cap(bundle)
    roots = f"--driver-root /usr/local/nvidia --dev-root {tree.root}"
    if mode == "hook":
        _register(bundle, "/usr/local/nvidia", tree.root)
        edit = ""
    else:
        edit = f"{sys.executable} -m ocihook edit -b {bundle} {roots}"
    script = f"""set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /usr/local
mkdir /usr/local/nvidia
mount --bind {tree.driver_root} /usr/local/nvidia
mount -o remount,bind,ro /usr/local/nvidia
{edit}
runc --root {tmp_path}/runc run --bundle {bundle} ocihook-ro-{mode}-{os.getpid()} < /dev/null
"""
    env_vars = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        env=env_vars,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check_runc_view(
        proc.stdout,
        version=tree.driver_version,
        libdir="/usr/lib64",
        minors=[0],
        uvm_major=UVM_MAJOR,
    )
    with open("/proc/self/mountinfo") as f:
        assert " /usr/local/nvidia " not in f.read()
