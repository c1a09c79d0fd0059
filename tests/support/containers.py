"""What a container shows and how it is run: :data:`RUNC_SCRIPT` /
:func:`check_runc_view` (runc, simulated or realistic host), :data:`ENGINE_SCRIPT` /
:func:`check_gpu0` / :func:`check_no_gpu` (through podman and containerd),
:func:`tagged`, :func:`run_runtime` (runc or crun)."""

from __future__ import annotations

import subprocess

from ocihook.sim import host as simhost


def tagged(out: str, tag: str) -> list[str]:
    """The rest of each line of ``out`` that starts with ``tag`` and a space."""
    return [ln[len(tag) + 1 :] for ln in out.splitlines() if ln.startswith(tag + " ")]


#: What a runc container prints (environment: LIBDIR, OTHER; needs CAP_MKNOD): its NVIDIA
#: nodes, the soname links, the ELF magic read through libcuda.so.1, the mount options of
#: the driver files, what opening GPU 0 and a node it made for another GPU give, and what
#: writing a driver file gives. Read by :func:`check_runc_view`.
RUNC_SCRIPT = r"""
for n in /dev/nvidia*; do echo "NODE $n $(stat -c '%F %t:%T' $n)"; done
echo "LINK $(readlink $LIBDIR/libcuda.so.1)"
echo "LINKDEV $(readlink $LIBDIR/libcuda.so)"
echo "MAGIC $(hexdump -n 4 -e '4/1 "%02x"' $LIBDIR/libcuda.so.1)"
grep " $LIBDIR/" /proc/self/mountinfo | while read -r a b c d mp opts rest; do echo "MOUNT $mp $opts"; done
echo "OPEN0 $(cat /dev/nvidia0 2>&1 | head -n 1)"
busybox mknod /dev/nvidia$OTHER c 195 $OTHER && echo "OPENOTHER $(cat /dev/nvidia$OTHER 2>&1 | head -n 1)"
echo "WRITE $(echo x 2>&1 > $LIBDIR/libcuda.so.1)"
"""


def check_runc_view(
    out: str, *, version: str, libdir: str, minors: list[int], uvm_major: int
) -> None:
    """Assert :data:`RUNC_SCRIPT`'s output: exactly the GPUs ``minors`` and the control
    nodes, libcuda linked and readable, driver files ro,nosuid,nodev, ENXIO on GPU 0,
    EPERM on the other GPU's node, writes refused."""
    nodes = dict(line.split(" ", 1) for line in tagged(out, "NODE"))
    want = {f"/dev/nvidia{m}": f"character special file c3:{m:x}" for m in minors}
    want["/dev/nvidiactl"] = "character special file c3:ff"
    want["/dev/nvidia-uvm"] = f"character special file {uvm_major:x}:0"
    want["/dev/nvidia-uvm-tools"] = f"character special file {uvm_major:x}:1"
    assert nodes == want, out
    assert tagged(out, "LINK") == [f"libcuda.so.{version}"]
    assert tagged(out, "LINKDEV") == ["libcuda.so.1"]
    assert tagged(out, "MAGIC") == ["7f454c46"]
    mounts = dict(line.split(" ", 1) for line in tagged(out, "MOUNT"))
    assert f"{libdir}/libcuda.so.{version}" in mounts, out
    for mp, opts in mounts.items():
        flags = opts.split(",")
        assert {"ro", "nosuid", "nodev"} <= set(flags), (mp, opts)
    assert tagged(out, "OPEN0") == ["cat: can't open '/dev/nvidia0': No such device or address"]
    other = tagged(out, "OPENOTHER")
    assert len(other) == 1 and "Operation not permitted" in other[0], out
    assert "Read-only file system" in tagged(out, "WRITE")[0]


#: What a container started by podman or containerd prints: its NVIDIA nodes, the soname
#: link, the ELF magic read through it, what opening GPU 0 gives, and (with CAP_MKNOD, when
#: $OTHER is set) what opening a node it made itself for a GPU it did not ask for gives.
ENGINE_SCRIPT = r"""
for n in /dev/nvidia*; do [ -e "$n" ] && echo "NODE $n $(stat -c '%F %t:%T' $n)"; done
echo "LINK $(readlink /usr/lib64/libcuda.so.1)"
echo "MAGIC $(hexdump -n 4 -e '4/1 "%02x"' /usr/lib64/libcuda.so.1 2>/dev/null)"
echo "OPEN0 $(cat /dev/nvidia0 2>&1 | head -n 1)"
if [ -n "$OTHER" ] && busybox mknod /dev/nvidia$OTHER c 195 $OTHER; then
  echo "OPENOTHER $(cat /dev/nvidia$OTHER 2>&1 | head -n 1)"
fi
echo DONE
"""


def check_gpu0(out: str, sim: simhost.SimulatedHost) -> None:
    """The container (:data:`ENGINE_SCRIPT`) sees exactly GPU 0 of the simulated host."""
    assert "DONE" in out.splitlines(), out
    nodes = dict(line.split(" ", 1) for line in tagged(out, "NODE"))
    assert nodes == {
        "/dev/nvidia0": "character special file c3:0",
        "/dev/nvidiactl": "character special file c3:ff",
        "/dev/nvidia-uvm": f"character special file {simhost.UVM_MAJOR:x}:0",
        "/dev/nvidia-uvm-tools": f"character special file {simhost.UVM_MAJOR:x}:1",
    }, out
    assert tagged(out, "LINK") == [f"libcuda.so.{sim.driver_version}"], out
    assert tagged(out, "MAGIC") == ["7f454c46"], out
    assert tagged(out, "OPEN0") == ["cat: can't open '/dev/nvidia0': No such device or address"]
    other = tagged(out, "OPENOTHER")
    assert len(other) == 1 and "Operation not permitted" in other[0], out


def check_no_gpu(out: str) -> None:
    """The container (:data:`ENGINE_SCRIPT`) has no NVIDIA node and no driver library."""
    assert "DONE" in out.splitlines(), out
    assert tagged(out, "NODE") == [], out
    assert tagged(out, "LINK") == [""], out
    assert tagged(out, "OPEN0") == ["cat: can't open '/dev/nvidia0': No such file or directory"]


def run_runtime(
    runtime: str, bundle: str, state: str, cid: str
) -> subprocess.CompletedProcess[str]:
    """``runc run`` the bundle, or ``crun run`` in a private mount namespace without the
    cgroup2 mount (crun refuses the hybrid layout here; testbed.md)."""
    if runtime == "runc":
        cmd = ["runc", "--root", state, "run", "-b", bundle, cid]
    else:
        cmd = [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            f"umount /sys/fs/cgroup/unified 2>/dev/null; "
            f"exec crun --root {state} run -b {bundle} {cid}",
        ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
