"""Layer 4, **visibility**: a busybox container that ocihook edits, run with runc, seen
from inside (see :mod:`ocihook.doctor`); and the container helpers the **gpu** layer
shares (:func:`prepare_bundle`, :func:`run_runc`, :func:`set_process`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import Any

from ..core.errors import OcihookError
from .context import Context
from .report import Check

__all__ = ["check_visibility", "prepare_bundle", "run_runc", "set_process"]


def _container_env(ctx: Context) -> list[str]:
    """The ``NVIDIA_*`` variables of the request checked (not its requirements: layer 3
    checks those), asking for GPU 0 when it names none."""
    env = ctx.facts.get("request_env") or {}
    keep = [
        f"{k}={v}"
        for k, v in env.items()
        if k.startswith("NVIDIA_") and not k.startswith("NVIDIA_REQUIRE_")
    ]
    names = {e.partition("=")[0] for e in keep}
    if env.get("NVIDIA_VISIBLE_DEVICES") in (None, "void", "none", ""):
        keep = [e for e in keep if not e.startswith("NVIDIA_VISIBLE_DEVICES=")]
        keep.append("NVIDIA_VISIBLE_DEVICES=0")
    if "NVIDIA_DRIVER_CAPABILITIES" not in names:
        keep.append("NVIDIA_DRIVER_CAPABILITIES=compute,utility")
    return keep


def _visibility_script(plan: Any) -> str:
    """The busybox ``sh`` script that prints what the container sees of ``plan``: one
    ``NODE``, ``LIB``, ``LINK`` line per planned node, library and link, ``MOUNT`` lines
    from mountinfo, the ``PROC`` listing of ``/proc/driver/nvidia/gpus``, then ``DONE``.
    Paths come from the plan (host-side data), never from the container."""
    lines = [
        f"echo \"NODE {n.path} $(stat -c '%t:%T' {n.path} 2>/dev/null)\""
        for n in plan.edits.device_nodes
    ]
    for m in plan.edits.mounts:
        if ".so" in m.destination:
            d = m.destination
            lines.append(f'echo "LIB {d} $(hexdump -n 4 -e \'4/1 "%02x"\' {d} 2>&1)"')
    for s in plan.edits.symlinks:
        lines.append(f'echo "LINK {s.link} $(readlink {s.link})"')
    lines.append(
        'grep " /usr/" /proc/self/mountinfo | while read -r a b c d mp opts rest; do\n'
        '  echo "MOUNT $mp $opts"; done'
    )
    lines.append("echo \"PROC $(ls /proc/driver/nvidia/gpus 2>/dev/null | tr '\\n' ' ')\"")
    lines.append("echo DONE")
    return "\n".join(lines) + "\n"


def _container_tools(runc: str | None, busybox: str | None) -> tuple[str | None, str | None, str]:
    from ..sim.demo import find_busybox

    runc = runc or shutil.which("runc")
    busybox = busybox or find_busybox()
    why = []
    if os.geteuid() != 0:
        why.append("not root")
    if runc is None:
        why.append("runc is not installed (apt-get install runc, or --runc)")
    if busybox is None:
        why.append("busybox is not installed (apt-get install busybox-static, or --busybox)")
    return runc, busybox, "; ".join(why)


def run_runc(
    runc: str, bundle: str, state: str, timeout: int = 120
) -> subprocess.CompletedProcess[str]:
    """``runc --root state run`` of ``bundle`` as a fresh container
    (``ocihook-doctor-<10 hex digits>``), output captured as text. After ``timeout``
    seconds the container is deleted and the result has exit status 124 and a message
    on stderr; it never raises for the container's own failure.
    """
    import uuid

    cid = f"ocihook-doctor-{uuid.uuid4().hex[:10]}"
    try:
        return subprocess.run(
            [runc, "--root", state, "run", "--bundle", bundle, cid],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        subprocess.run(
            [runc, "--root", state, "delete", "-f", cid], capture_output=True, check=False
        )
        return subprocess.CompletedProcess(
            exc.cmd, 124, "", f"runc run did not finish in {timeout} s"
        )


def prepare_bundle(
    ctx: Context,
    workdir: str,
    *,
    busybox: str,
    options: Any = None,
    args: Sequence[str] = ("true",),
) -> tuple[str, Any]:
    """A busybox bundle in ``workdir`` asking for the GPUs of the request checked (GPU 0
    when it names none), edited by ocihook (spec mode) for ``ctx.root``; returns
    ``(bundle, plan)``.

    Raises:
        OcihookError: the edit failed.
    """
    from ..appliers.spec import edit_bundle
    from ..sim.demo import make_busybox_bundle

    bundle = os.path.join(workdir, "bundle")
    make_busybox_bundle(bundle, list(args), _container_env(ctx), busybox=busybox)
    result = edit_bundle(bundle, ctx.root, options=options)
    return bundle, result.plan


def set_process(
    bundle: str, args: Sequence[str], env: Sequence[str] = (), mounts: Sequence[dict[str, Any]] = ()
) -> None:
    """Rewrite ``bundle``'s ``config.json`` to run ``args``, with ``env`` (``KEY=value``)
    added to the process's environment and ``mounts`` (OCI mount objects) after its
    mounts.

    Raises:
        OSError: the file cannot be read or written.
    """
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        doc = json.load(f)
    doc["process"]["args"] = list(args)
    doc["process"]["env"] = [*doc["process"]["env"], *env]
    doc["mounts"] = [*doc.get("mounts", []), *mounts]
    with open(path, "w") as f:
        json.dump(doc, f, indent="\t")


def check_visibility(
    ctx: Context,
    workdir: str,
    *,
    runc: str | None = None,
    busybox: str | None = None,
    options: Any = None,
) -> list[Check]:
    """Layer 4: a busybox container that ocihook edits (spec mode), run with runc, checked
    from inside against the plan: each device node (``stat`` major:minor), each library
    mount (its ELF magic read through the mount, ``ro``/``nosuid``/``nodev`` in
    mountinfo), each link (``readlink``), the container's ``ld.so.cache`` (read back on
    the host from the rootfs: every library the plan enters) and, when the host's
    kernel has the driver (dev root ``/``), the ``/proc/driver/nvidia/gpus`` mask. Sets
    ``ctx.facts["bundle"]`` for :func:`check_gpu_operation`. SKIP without root, runc or
    busybox, or without a usable driver."""
    from ..linux import ldcache

    runc, busybox, why = _container_tools(runc, busybox)
    if ctx.host is None:
        why = "no usable driver on the host (see host)"
    if why:
        return [Check("visibility", "container", "SKIP", why)]
    assert runc is not None and busybox is not None
    try:
        bundle, plan = prepare_bundle(ctx, workdir, busybox=busybox, options=options)
    except OcihookError as exc:
        return [
            Check("visibility", "container", "FAIL", f"ocihook edit failed: {exc}", exc.hint or "")
        ]
    if plan is None:
        return [Check("visibility", "container", "FAIL", "ocihook edit planned nothing", "")]
    with open(os.path.join(bundle, "rootfs/doctor.sh"), "w") as f:
        f.write(_visibility_script(plan))
    set_process(bundle, ["sh", "/doctor.sh"])
    proc = run_runc(runc, bundle, os.path.join(workdir, "runc"))
    out = proc.stdout
    if proc.returncode != 0 or "DONE" not in out.splitlines():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [
            Check(
                "visibility",
                "container",
                "FAIL",
                f"runc run exited {proc.returncode}: {tail}",
                "run the bundle by hand (runc run -b BUNDLE) with ocihook --debug to see the "
                "failing step",
            )
        ]
    ctx.facts["bundle"] = bundle
    ctx.facts["plan"] = plan
    ctx.facts["busybox"] = busybox
    seen: dict[str, dict[str, str]] = {"NODE": {}, "LIB": {}, "LINK": {}, "MOUNT": {}}
    procline = ""
    for line in out.splitlines():
        tag, _, rest = line.partition(" ")
        if tag in seen:
            key, _, value = rest.partition(" ")
            seen[tag][key] = value.strip()
        elif tag == "PROC":
            procline = rest.strip()
    bad: list[str] = []
    edits = plan.edits
    for n in edits.device_nodes:
        want = f"{n.major:x}:{n.minor:x}"
        got = seen["NODE"].get(n.path)
        if got != want:
            bad.append(f"{n.path}: {got or 'missing'} (want {want})")
    libs = [m for m in edits.mounts if ".so" in m.destination]
    for m in libs:
        if seen["LIB"].get(m.destination) != "7f454c46":
            bad.append(f"{m.destination}: not readable as ELF ({seen['LIB'].get(m.destination)})")
        opts = set(seen["MOUNT"].get(m.destination, "").split(","))
        if not {"ro", "nosuid", "nodev"} <= opts:
            bad.append(f"{m.destination}: mounted {','.join(sorted(opts)) or 'not at all'}")
    for s in edits.symlinks:
        if seen["LINK"].get(s.link) != s.target:
            bad.append(f"{s.link} -> {seen['LINK'].get(s.link) or 'missing'} (want {s.target})")
    cache_note = ""
    try:
        with open(os.path.join(bundle, "rootfs/etc/ld.so.cache"), "rb") as f:
            keys = {c.path for c in ldcache.parse(f.read())}
        lacking = [lib for lib in edits.ldcache_libraries if lib not in keys]
        if lacking:
            bad.append("ld.so.cache lacks " + ", ".join(lacking[:3]))
        cache_note = f"ld.so.cache lists all {len(edits.ldcache_libraries)} libraries"
    except OSError:
        if edits.ldcache_libraries:
            bad.append("the container has no /etc/ld.so.cache")
    except OcihookError as err:
        bad.append(f"the container's ld.so.cache: {err}")
    proc_note = (
        "/proc mask not checked: this kernel has no NVIDIA driver (the host read is a fixture tree)"
    )
    if ctx.root.dev_root == "/" and os.path.isdir("/proc/driver/nvidia/gpus") and edits.proc_mask:
        want_dirs = sorted(edits.proc_mask.gpu_dirs)
        got_dirs = sorted(procline.split())
        if got_dirs != want_dirs:
            bad.append(f"/proc/driver/nvidia/gpus shows {got_dirs or 'nothing'} (want {want_dirs})")
        proc_note = f"/proc/driver/nvidia/gpus shows only {', '.join(want_dirs)}"
    if bad:
        return [
            Check(
                "visibility",
                "container",
                "FAIL",
                "; ".join(bad[:5]) + (f" (and {len(bad) - 5} more)" if len(bad) > 5 else ""),
                "check the engine registration (runtime layer) and rerun with ocihook --debug",
            )
        ]
    return [
        Check(
            "visibility",
            "container",
            "PASS",
            f"runc container edited by ocihook: {len(edits.device_nodes)} device nodes with "
            f"the right major:minor, {len(libs)} libraries mounted ro,nosuid,nodev and readable, "
            f"{len(edits.symlinks)} links; {cache_note}; {proc_note}",
        )
    ]
