"""End to end with a CDI spec that ``ocihook cdi generate`` wrote for the simulated host:
real podman 4 injects ``--device nvidia.com/gpu=1`` from it, and ocihook's own spec mode
injects ``NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0`` / a ``cdi.k8s.io/`` annotation from it
before real runc runs the container.

podman 4.3 reads CDI specs only from ``/etc/cdi`` and ``/var/run/cdi``; the test runs it in
a private mount namespace with a tmpfs on ``/run`` holding the spec, so nothing is written
to the host's ``/etc`` or ``/run`` (runc's state goes to that tmpfs as well).

The container's view is the oracle: exactly its GPU's ``/dev/nvidia<minor>`` plus the
control nodes, its DRM nodes and ``by-path`` links, ``libcuda.so.1`` linked and readable
(ELF magic), ENXIO on the node (allowed by the cgroup, no driver), EPERM on a node it made
for another GPU, ``NVIDIA_VISIBLE_DEVICES=void``; and ``ldconfig -p`` on the container's
``ld.so.cache`` lists the driver libraries.
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
from support import PRIVATE_RUN, Podman, edit_with_cdi, need_root_and

from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import NvidiaHost, discover
from ocihook.sim.demo import run_container

SCRIPT = r"""
for n in /dev/nvidia*; do [ -e "$n" ] && echo "NODE $n $(stat -c '%t:%T' $n)"; done
for n in /dev/dri/*; do [ -c "$n" ] && echo "DRI $n"; done
for n in /dev/dri/by-path/*; do [ -L "$n" ] && echo "BYPATH $n $(readlink $n)"; done
echo "LINK $(readlink $LIBDIR/libcuda.so.1)"
echo "MAGIC $(hexdump -n 4 -e '4/1 "%02x"' $LIBDIR/libcuda.so.1 2>/dev/null)"
echo "OPEN $(cat /dev/nvidia$MINOR 2>&1 | head -n 1)"
echo "ENV $NVIDIA_VISIBLE_DEVICES"
if busybox mknod /dev/nvidia$OTHER c 195 $OTHER; then
  echo "OPENOTHER $(cat /dev/nvidia$OTHER 2>&1 | head -n 1)"
fi
echo DONE
"""


def _lines(out: str, tag: str) -> list[str]:
    return [ln[len(tag) + 1 :] for ln in out.splitlines() if ln.startswith(tag + " ")]


@pytest.fixture(scope="module")
def host(sim: Any) -> NvidiaHost:
    return discover(HostRoot.single(sim.root))


@pytest.fixture(scope="module")
def spec_dir(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the spec ``ocihook cdi generate`` writes for the simulated host."""
    d = tmp_path_factory.mktemp("cdi")
    root = ["--driver-root", sim.root, "--dev-root", sim.root]
    out = ["--output", str(d / "nvidia.yaml")]
    subprocess.run([sys.executable, "-m", "ocihook", "cdi", "generate", *root, *out], check=True)
    return d


def _libdir(host: NvidiaHost) -> str:
    cuda = next(lib for lib in host.libraries if lib.soname == "libcuda.so.1")
    return os.path.dirname(cuda.path)


def _env(host: NvidiaHost, index: int) -> dict[str, str]:
    gpu = host.gpus[index]
    other = next(g for g in host.gpus if g.index != index)
    return {"LIBDIR": _libdir(host), "MINOR": str(gpu.minor), "OTHER": str(other.minor)}


def _check(out: str, host: NvidiaHost, index: int, rootfs: str) -> None:
    gpu = host.gpus[index]
    assert "DONE" in out.splitlines(), out
    nodes = dict(line.split(" ", 1) for line in _lines(out, "NODE"))
    other = int(_env(host, index)["OTHER"])
    nodes.pop(f"/dev/nvidia{other}", None)  # the one the container made itself
    uvm = next(n for n in host.control_nodes if n.path == "/dev/nvidia-uvm")
    assert nodes == {
        f"/dev/nvidia{gpu.minor}": f"c3:{gpu.minor:x}",
        "/dev/nvidiactl": "c3:ff",
        "/dev/nvidia-modeset": "c3:fe",
        "/dev/nvidia-uvm": f"{uvm.major:x}:0",
        "/dev/nvidia-uvm-tools": f"{uvm.major:x}:1",
    }, out
    dri = host.dri[gpu.bus_id]
    assert _lines(out, "DRI") == sorted(n.path for n in dri.nodes), out
    assert sorted(_lines(out, "BYPATH")) == sorted(f"{link} {target}" for link, target in dri.links)
    version = host.driver_version
    assert _lines(out, "LINK") == [f"libcuda.so.{version}"], out
    assert _lines(out, "MAGIC") == ["7f454c46"], out
    assert _lines(out, "OPEN") == [
        f"cat: can't open '/dev/nvidia{gpu.minor}': No such device or address"
    ], out
    assert _lines(out, "ENV") == ["void"], out
    opened = _lines(out, "OPENOTHER")
    assert len(opened) == 1 and "Operation not permitted" in opened[0], out
    cache = subprocess.run(
        ["ldconfig", "-p", "-C", os.path.join(rootfs, "etc/ld.so.cache")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    libdir = _libdir(host)
    assert f"libcuda.so.1 (libc6,x86-64) => {libdir}/libcuda.so.1" in cache, cache


def test_podman_device_from_generated_spec(
    podman: Podman,
    host: NvidiaHost,
    spec_dir: Path,
    bundle_factory: Callable[..., str],
) -> None:
    need_root_and("podman", "runc", "unshare", "ldconfig")
    rootfs = os.path.join(bundle_factory(["true"], []), "rootfs")
    cmd = [*podman.base, "run", "--rm", "--network=none", "--cgroup-parent", podman.cgroup_parent]
    cmd += ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]
    cmd += ["--device", "nvidia.com/gpu=1", "--cap-add", "MKNOD"]
    for key, value in _env(host, 1).items():
        cmd += ["--env", f"{key}={value}"]
    cmd += ["--rootfs", rootfs, "sh", "-c", SCRIPT]
    proc = subprocess.run(
        ["unshare", "--mount", "sh", "-c", PRIVATE_RUN, "sh", *cmd],
        env={**os.environ, "SPEC": str(spec_dir / "nvidia.yaml")},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    _check(proc.stdout, host, 1, rootfs)
    with open("/proc/self/mountinfo") as f:
        assert "ocihook-cdi-test" not in f.read()  # the tmpfs was private


@pytest.mark.parametrize("how", ["env", "annotation"])
def test_spec_mode_runc_from_generated_spec(
    how: str,
    host: NvidiaHost,
    spec_dir: Path,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    need_root_and("runc", "ldconfig")
    index = 0 if how == "env" else 3
    env = [f"{k}={v}" for k, v in _env(host, index).items()]
    if how == "env":
        env.append(f"NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu={index}")
    bundle = bundle_factory(["sh", "-c", SCRIPT], env)
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        doc = json.load(f)
    for key in ("bounding", "effective", "permitted"):
        doc["process"]["capabilities"][key].append("CAP_MKNOD")
    if how == "annotation":
        doc["annotations"] = {"cdi.k8s.io/gpu": f"nvidia.com/gpu={host.gpus[index].uuid}"}
    with open(path, "w") as f:
        json.dump(doc, f)
    edit_with_cdi(bundle, spec_dir, tmp_path)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode == 0, proc.stderr
    _check(proc.stdout, host, index, os.path.join(bundle, "rootfs"))
    with open("/proc/self/mountinfo") as f:
        assert bundle not in f.read()
