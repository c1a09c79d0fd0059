"""End to end through the container engines: podman (hooks.d, as packaged) and containerd
(``ctr run`` of a full OCI spec with ocihook's prestart hook), on the simulated host.

The container's own view is the oracle, as in test_e2e_runc.py: ``/dev/nvidia0`` is
``c 195:0``, ``libcuda.so.1 -> libcuda.so.<version>``, the ELF magic read through it, ENXIO
(allowed by the cgroup, no driver) on ``cat /dev/nvidia0`` and EPERM (denied by the
cgroup) on a GPU node it did not ask for. A small logging hook records what each runtime
passes to its hooks: the state JSON on stdin, the working directory, the stage the hook
ended up in and whether the state's pid is in a mount namespace of its own.

Both engines are confined to temporary directories: podman gets a private store, network
config dir and ``--hooks-dir``; containerd a private config, root, state and socket (CRI
plugin disabled) and is stopped at the end. Containers go to a cgroup parent of their own,
removed at the end. What the engines insist on creating on the host (``/run/runc``,
``/run/containerd/s``: empty directories) is removed if the tests created it.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support import (
    ENGINE_SCRIPT,
    REPO,
    Containerd,
    Podman,
    busybox_rootfs,
    check_gpu0,
    check_no_gpu,
    fill_packaged,
    mounts_under,
)

from ocihook.sim import host as simhost

HOOKS_D = os.path.join(REPO, "packaging/hooks.d/ocihook-prestart.json.in")
HOOKS_D_POSTSTOP = os.path.join(REPO, "packaging/hooks.d/ocihook-poststop.json.in")
SNIPPET = os.path.join(REPO, "packaging/config.json-hooks-snippet.json.in")

#: A hook that appends one JSON line per call to LOG: its argv, cwd, the state from stdin,
#: the stages of the bundle's config.json that register it, and the mount namespaces of
#: itself and of the state's pid. With REAL set it then runs REAL with its own arguments
#: (argv[1:]) and the same state on stdin — a logging stand-in for a hook's ``path``.
LOGGER = """\
import json, os, sys
LOG = {log!r}
REAL = {real!r}
data = sys.stdin.buffer.read()
entry = {{"argv": sys.argv, "cwd": os.getcwd(), "raw": data.decode(errors="replace")}}
try:
    state = json.loads(data)
    entry["state"] = state
    with open(os.path.join(state["bundle"], "config.json")) as f:
        hooks = json.load(f).get("hooks") or {{}}
    entry["stages"] = sorted(k for k, v in hooks.items() if any(h.get("path") == sys.argv[0] for h in v))
    entry["mntns_self"] = os.readlink("/proc/self/ns/mnt")
    entry["mntns_pid"] = os.readlink(f"/proc/{{state['pid']}}/ns/mnt")
except Exception as e:
    entry["error"] = repr(e)
with open(LOG, "a") as f:
    f.write(json.dumps(entry) + "\\n")
if REAL:
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    os.dup2(r, 0)
    os.execv(REAL, [REAL, *sys.argv[1:]])
"""


def _read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check_state(entry: dict[str, Any], cid: str | None = None) -> dict[str, Any]:
    """What every runtime here passes a prestart hook; returns the state."""
    assert "error" not in entry, entry
    state: dict[str, Any] = entry["state"]
    assert state["status"] == "creating", state
    assert isinstance(state["pid"], int) and state["pid"] > 0, state
    assert cid is None or state["id"] == cid, state
    assert entry["cwd"] == state["bundle"], entry
    assert entry["mntns_pid"] != entry["mntns_self"], entry
    # the logger runs where ocihook runs: wherever the runtime put the prestart hooks
    assert entry["stages"] in (["prestart"], ["createRuntime"]), entry
    return state


def _write_logger(path: Path, log: Path, real: str = "") -> str:
    path.write_text(f"#!{sys.executable} -I\n" + LOGGER.format(log=str(log), real=real))
    path.chmod(0o755)
    return str(path)


def _render(template: str, root: str, *, path: str | None = None) -> dict[str, Any]:
    """A packaged hooks.d file as its README says: ``@PYTHON@`` replaced by this interpreter
    (in ``path`` and ``args[0]``), and the simulated host's roots appended to ``args``."""
    with open(template) as f:
        doc: dict[str, Any] = json.loads(fill_packaged(f.read()))
    assert doc["hook"]["path"] == doc["hook"]["args"][0] == sys.executable
    doc["hook"]["args"] += ["--driver-root", root, "--dev-root", root]
    if path is not None:
        doc["hook"]["path"] = path
    return doc


def test_podman_hooks_d_gives_gpu0(
    podman: Podman,
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The packaged hooks.d file (``when.always``): a container with
    NVIDIA_VISIBLE_DEVICES=0 sees GPU 0; one without the variable starts as usual and has
    no NVIDIA node (the hook's fast exit)."""
    hooks = tmp_path / "hooks.d"
    hooks.mkdir()
    doc = _render(HOOKS_D, sim.root)
    assert doc["when"] == {"always": True}
    (hooks / "ocihook-prestart.json").write_text(json.dumps(doc))
    log = tmp_path / "state.log"
    logger = {
        "version": "1.0.0",
        "hook": {"path": _write_logger(tmp_path / "logger", log), "args": ["logger"]},
        "when": {"always": True},
        "stages": ["prestart"],
    }
    (hooks / "00-state-logger.json").write_text(json.dumps(logger))

    other = str(sim.gpus[1].minor)
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "OTHER": other}
    proc = podman.run(hooks, busybox_rootfs(bundle_factory), "--cap-add", "MKNOD", env=env)
    assert proc.returncode == 0, proc.stderr
    check_gpu0(proc.stdout, sim)

    proc = podman.run(hooks, busybox_rootfs(bundle_factory))
    assert proc.returncode == 0, proc.stderr
    check_no_gpu(proc.stdout)

    entries = _read_log(log)
    assert len(entries) == 2, entries
    for entry in entries:
        state = _check_state(entry)
        # podman's annotations come with the state; the bundle is podman's userdata dir
        assert state["annotations"]["io.container.manager"] == "libpod", state
        assert state["bundle"].startswith(podman.store), state


def _tree(root: Path) -> dict[str, str]:
    """Every path under ``root`` and its kind (a link: its target), but the
    ``etc/ld.so.cache`` the hook rewrites (a rewritten file, not a made one)."""
    out = {}
    for p in root.rglob("*"):
        rel = str(p.relative_to(root))
        if rel != "etc/ld.so.cache":
            kind = "dir" if p.is_dir() else "file"
            out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else kind
    return out


def test_podman_hooks_d_poststop_cleans_a_reused_rootfs(
    podman: Podman,
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    """Both packaged hooks.d files (``when.always``) on a ``--rootfs`` directory, which
    outlives the container: the prestart hook makes its mount targets and soname links
    in it, and podman runs the poststop hook (``ocihook hook poststop``) once the
    container is gone, which removes exactly those. With the prestart file alone they
    stay. (podman makes ``/etc/hosts``, ``/run/.containerenv``... itself: a
    first container asking for nothing makes them before the tree is taken.)"""
    version = sim.driver_version
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "OTHER": str(sim.gpus[1].minor)}
    made = {f"usr/lib64/libcuda.so.{version}": "file", "usr/lib64/libcuda.so.1": "->"}

    def container(hooks: Path, rootfs: Path) -> dict[str, str]:
        """The rootfs's tree after a container asking for nothing, and then after one
        given GPU 0; returns the first."""
        proc = podman.run(hooks, str(rootfs))
        assert proc.returncode == 0, proc.stderr
        check_no_gpu(proc.stdout)  # the poststop hook: no record, nothing to do, exit 0
        before = _tree(rootfs)
        proc = podman.run(hooks, str(rootfs), "--cap-add", "MKNOD", env=env)
        assert proc.returncode == 0, proc.stderr
        check_gpu0(proc.stdout, sim)
        return before

    alone = tmp_path / "prestart-only"
    alone.mkdir()
    (alone / "ocihook-prestart.json").write_text(json.dumps(_render(HOOKS_D, sim.root)))
    rootfs = Path(busybox_rootfs(bundle_factory))
    before = container(alone, rootfs)
    left = {p: k for p, k in _tree(rootfs).items() if p not in before}
    for path, kind in made.items():
        assert left.get(path, "").startswith(kind), left

    both = tmp_path / "hooks.d"
    both.mkdir()
    (both / "ocihook-prestart.json").write_text(json.dumps(_render(HOOKS_D, sim.root)))
    poststop = _render(HOOKS_D_POSTSTOP, sim.root)
    del poststop["hook"]["args"][-4:]  # it reads no host: no roots to pass
    assert poststop["hook"]["args"][-2:] == ["hook", "poststop"]
    assert poststop["when"] == {"always": True} and poststop["stages"] == ["poststop"]
    (both / "ocihook-poststop.json").write_text(json.dumps(poststop))
    rootfs = Path(busybox_rootfs(bundle_factory))
    before = container(both, rootfs)
    assert _tree(rootfs) == before


# -- containerd --------------------------------------------------------------------------------


def _ctr_spec(bundle: str, root: str, logger: str, cgroups_path: str) -> dict[str, Any]:
    """A full OCI spec for ``ctr run --config``: absolute root.path (ctr makes no
    snapshot; a relative one is taken inside containerd's own bundle dir), process.cwd
    (runc: "Cwd property must not be empty"), terminal false (no -t), a mount namespace;
    hooks.prestart = the logger, then ocihook's hook as the packaging snippet gives it."""
    with open(os.path.join(bundle, "config.json")) as f:
        spec: dict[str, Any] = json.load(f)
    spec["root"]["path"] = os.path.join(bundle, "rootfs")
    spec["process"]["capabilities"]["bounding"].append("CAP_MKNOD")
    spec["process"]["capabilities"]["effective"].append("CAP_MKNOD")
    spec["process"]["capabilities"]["permitted"].append("CAP_MKNOD")
    spec["linux"]["cgroupsPath"] = cgroups_path
    assert spec["process"]["cwd"] == "/" and spec["process"]["terminal"] is False
    assert {"type": "mount"} in spec["linux"]["namespaces"]
    with open(SNIPPET) as f:
        hook = json.loads(fill_packaged(f.read()))["hooks"]["prestart"][0]
    hook["args"] += ["--driver-root", root, "--dev-root", root]
    spec["hooks"] = {"prestart": [{"path": logger, "args": ["logger"]}, hook]}
    return spec


def test_containerd_ctr_gives_gpu0(
    containerd: Containerd,
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    """``ctr run --rm --config spec.json``: the runc shim runs the prestart hooks with the
    state on stdin, and the container sees exactly GPU 0."""
    other = str(sim.gpus[1].minor)
    bundle = bundle_factory(
        ["sh", "-c", ENGINE_SCRIPT], ["NVIDIA_VISIBLE_DEVICES=0", f"OTHER={other}"]
    )
    log = tmp_path / "state.log"
    logger = _write_logger(tmp_path / "logger", log)
    cid = f"ocihook-e2e-{uuid.uuid4().hex[:8]}"
    spec = _ctr_spec(bundle, sim.root, logger, f"{containerd.cgroup_parent}/{cid}")
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    fifos = tmp_path / "fifo"
    runc_root = tmp_path / "runc"
    args = ["run", "--rm", "--fifo-dir", str(fifos), "--runc-root", str(runc_root)]
    proc = containerd.ctr(*args, "--config", str(tmp_path / "spec.json"), cid)
    assert proc.returncode == 0, proc.stderr + (containerd.dir / "containerd.log").read_text()
    check_gpu0(proc.stdout, sim)

    (entry,) = _read_log(log)
    state = _check_state(entry, cid)
    # the shim's bundle: containerd's state dir, namespace "default"; no annotations
    want = containerd.dir / "state/io.containerd.runtime.v2.task/default" / cid
    assert state["bundle"] == str(want), state
    assert "annotations" not in state or not state["annotations"], state

    assert containerd.ctr("containers", "ls", "-q").stdout.split() == []
    assert not mounts_under(bundle)
