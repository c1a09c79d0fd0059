"""The demo: inject two GPUs of the built-in simulated host into a busybox container.

:func:`run_demo` builds the simulated host (:mod:`ocihook.sim.host`) and a busybox bundle
in a temporary directory, lets ocihook edit the bundle (spec mode) or registers ocihook as
its prestart hook (hook mode), runs it with ``runc``, and prints what the container sees:
its NVIDIA device nodes, the library links, the ELF magic read through ``libcuda.so.1``,
the mount flags of the library mounts, what opening ``/dev/nvidia0`` gives, and its
``ld.so.cache``. Without root or without runc it prints the edited ``config.json`` as a
diff instead, and says why.

:func:`make_busybox_bundle` is also what the end-to-end tests use.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Sequence
from typing import Any, TextIO

__all__ = [
    "CONTAINER_SCRIPT",
    "default_config",
    "find_busybox",
    "make_busybox_bundle",
    "run_container",
    "run_demo",
]

#: Tools linked to busybox inside the demo rootfs.
BUSYBOX_APPLETS = ("sh", "ls", "cat", "grep", "head", "hexdump", "readlink", "echo", "od", "stat")

#: What the demo container prints (busybox sh).
CONTAINER_SCRIPT = r"""
echo "== device nodes (ls -l /dev/nvidia*) =="
ls -l /dev/nvidia* 2>&1
echo "== library links ($LIBDIR) =="
for f in $LIBDIR/libcuda* $LIBDIR/libnvidia-ml*; do
  if [ -L "$f" ]; then echo "$f -> $(readlink $f)"; else echo "$f"; fi
done
echo "== ELF magic read through libcuda.so.1 =="
hexdump -n 4 -e '4/1 "%02x " "\n"' $LIBDIR/libcuda.so.1
echo "== mount flags of the driver libraries (/proc/self/mountinfo) =="
grep " $LIBDIR/" /proc/self/mountinfo | while read -r a b c d mp opts rest; do
  echo "$mp $opts"
done
echo "== cat /dev/nvidia0 (ENXIO = allowed by the cgroup, no driver) =="
cat /dev/nvidia0 2>&1 | head -n 1
echo "== /etc/ld.so.cache: lines naming libcuda.so.1 =="
grep -c libcuda.so.1 /etc/ld.so.cache
"""


def find_busybox() -> str | None:
    """Host path of a statically linked busybox (Debian's busybox-static), or ``None``."""
    for candidate in ("/bin/busybox", "/usr/bin/busybox", shutil.which("busybox")):
        if candidate and os.path.isfile(candidate):
            return candidate
    return None


def default_config(args: Sequence[str], env: Sequence[str]) -> dict[str, Any]:
    """A minimal OCI config like ``runc spec`` writes, with the runtime's default device
    cgroup rule (deny all) so that only explicitly allowed devices work.

    ``args`` becomes ``process.args``; ``env`` follows a default ``PATH`` in
    ``process.env``. Returns a new JSON-ready dict (``root.path`` is ``rootfs``) each call;
    the demo's bundles and the tests' ``config.json`` files start from it."""
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": list(args),
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *env],
            "cwd": "/",
            "capabilities": {
                k: ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
                for k in ("bounding", "effective", "permitted", "ambient")
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": True,
        },
        "root": {"path": "rootfs", "readonly": False},
        "hostname": "ocihook-demo",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
            },
            {
                "destination": "/dev/pts",
                "type": "devpts",
                "source": "devpts",
                "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"],
            },
            {
                "destination": "/sys",
                "type": "sysfs",
                "source": "sysfs",
                "options": ["nosuid", "noexec", "nodev", "ro"],
            },
        ],
        "linux": {
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/sys/firmware"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger"],
        },
    }


def make_busybox_bundle(
    bundle: str,
    args: Sequence[str],
    env: Sequence[str] = (),
    *,
    busybox: str | None = None,
    debian: bool = False,
) -> str:
    """Create an OCI bundle with a busybox rootfs at ``bundle`` and return its path.

    Args:
        bundle: directory to create (must not exist or be empty).
        args: ``process.args``.
        env: extra ``process.env`` entries (``KEY=value``).
        busybox: host busybox binary to copy (default :func:`find_busybox`).
        debian: write ``/etc/debian_version`` so the rootfs looks like a Debian image.

    Raises:
        FileNotFoundError: no busybox binary.
    """
    busybox = busybox or find_busybox()
    if busybox is None:
        raise FileNotFoundError("busybox not found (apt-get install busybox-static)")
    rootfs = os.path.join(bundle, "rootfs")
    for d in ("bin", "dev", "proc", "sys", "etc", "tmp"):
        os.makedirs(os.path.join(rootfs, d), exist_ok=True)
    shutil.copy2(busybox, os.path.join(rootfs, "bin/busybox"))
    for applet in BUSYBOX_APPLETS:
        link = os.path.join(rootfs, "bin", applet)
        if not os.path.lexists(link):
            os.symlink("busybox", link)
    if debian:
        with open(os.path.join(rootfs, "etc/debian_version"), "w") as f:
            f.write("12.0\n")
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(default_config(args, env), f, indent="\t")
        f.write("\n")
    return bundle


def run_container(
    bundle: str, *, runtime: str = "runc", state_root: str | None = None, timeout: int = 60
) -> subprocess.CompletedProcess[str]:
    """Run the bundle's container to completion with ``runtime run`` and return the
    completed process (stdout and stderr captured as text)."""
    cid = f"ocihook-{uuid.uuid4().hex[:12]}"
    cmd = [runtime]
    if state_root:
        cmd += ["--root", state_root]
    cmd += ["run", "--bundle", bundle, cid]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def run_demo(
    *,
    devices: str = "0,3",
    mode: str = "spec",
    workdir: str | None = None,
    out: TextIO = sys.stdout,
) -> int:
    """Run the demo and return an exit code (0 on success).

    Args:
        devices: ``NVIDIA_VISIBLE_DEVICES`` of the demo container.
        mode: ``"spec"`` (edit ``config.json``) or ``"hook"`` (prestart hook).
        workdir: where to build (default: a temporary directory, removed afterwards).
        out: where to print.
    """
    from ..appliers.spec import edit_bundle
    from ..config.options import hook_command
    from ..core.hostroot import HostRoot
    from . import host as simhost

    tmp = workdir or tempfile.mkdtemp(prefix="ocihook-demo-")
    try:
        host = simhost.build(os.path.join(tmp, "host"))
        print(
            f"simulated host: {host.root} (driver {host.driver_version}, "
            f"{len(host.gpus)} GPUs; /dev nodes: {'yes' if host.dev_nodes else 'no'})",
            file=out,
        )
        for g in host.gpus:
            print(f"  GPU {g.index}: minor {g.minor}  {g.uuid}  {g.bus_id}  {g.model}", file=out)
        libdir = "/usr/lib64"
        env = [
            f"NVIDIA_VISIBLE_DEVICES={devices}",
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
            f"LIBDIR={libdir}",
        ]
        bundle = os.path.join(tmp, "bundle")
        busybox = find_busybox()
        runc = shutil.which("runc")
        why = []
        if os.geteuid() != 0:
            why.append("not running as root")
        if runc is None:
            why.append("runc is not installed (apt-get install runc)")
        if busybox is None:
            why.append("busybox is not installed (apt-get install busybox-static)")
            os.makedirs(os.path.join(bundle, "rootfs"), exist_ok=True)
            with open(os.path.join(bundle, "config.json"), "w") as f:
                json.dump(default_config(["sh", "-c", CONTAINER_SCRIPT], env), f, indent="\t")
        else:
            make_busybox_bundle(bundle, ["sh", "-c", CONTAINER_SCRIPT], env, busybox=busybox)
        root = HostRoot.single(host.root)
        print(f"container asks for: NVIDIA_VISIBLE_DEVICES={devices} ({mode} mode)", file=out)
        if why:
            result = edit_bundle(bundle, root, dry_run=True)
            print(
                "cannot run a container here (" + "; ".join(why) + "): "
                "showing the config.json that spec mode would write instead",
                file=out,
            )
            import difflib

            out.writelines(
                difflib.unified_diff(
                    result.before.decode().splitlines(keepends=True),
                    result.after.decode().splitlines(keepends=True),
                    fromfile="config.json",
                    tofile="config.json (edited by ocihook)",
                )
            )
            if result.in_rootfs and result.plan is not None:
                e = result.plan.edits
                print("and in the rootfs, made by the edit itself:", file=out)
                for s in e.symlinks:
                    if not s.link.startswith("/dev/"):
                        print(f"  {s.link} -> {s.target}", file=out)
                print(f"  /etc/ld.so.cache with {len(e.ldcache_libraries)} libraries", file=out)
            return 0
        if mode == "spec":
            result = edit_bundle(bundle, root)
            assert result.plan is not None
            print(
                f"ocihook edit: {len(result.plan.edits.device_nodes)} device nodes, "
                f"{len(result.plan.edits.mounts)} mounts, "
                f"{len(result.plan.edits.symlinks)} links"
                + (" (made in the rootfs, with its ld.so.cache)" if result.in_rootfs else ""),
                file=out,
            )
        else:
            with open(os.path.join(bundle, "config.json")) as f:
                doc = json.load(f)
            cmd = [*hook_command(), "hook", "prestart"]
            cmd += ["--driver-root", host.root, "--dev-root", host.root]
            doc.setdefault("hooks", {}).setdefault("prestart", []).append(
                {"path": cmd[0], "args": cmd, "env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]}
            )
            with open(os.path.join(bundle, "config.json"), "w") as f:
                json.dump(doc, f, indent="\t")
            print("registered: ocihook hook prestart", file=out)
        proc = run_container(bundle, state_root=os.path.join(tmp, "runc-state"))
        print(f"--- what the container sees (runc run, exit {proc.returncode}) ---", file=out)
        out.write(proc.stdout)
        if proc.returncode != 0:
            out.write(proc.stderr)
        return 0 if proc.returncode == 0 else 1
    finally:
        if workdir is None:
            shutil.rmtree(tmp, ignore_errors=True)
