"""Layer 5, **gpu**: a real CUDA operation in a container ocihook edited: the probe
(:mod:`ocihook.doctor.probe`) run there by this interpreter, mounted read-only with its
standard library and the C libraries they need (see :mod:`ocihook.doctor`).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from typing import Any

from ..core.errors import OcihookError
from .context import Context
from .report import Check
from .visibility import prepare_bundle, run_runc, set_process

__all__ = [
    "PROBE",
    "PROBE_DIR",
    "check_gpu_operation",
    "probe_mounts",
    "probe_source",
    "real_gpu_reason",
    "run_probe",
]

#: Where the CUDA probe's files go in the container.
PROBE_DIR = "/.ocihook-doctor"


def probe_source() -> str:
    """The text of :mod:`ocihook.doctor.probe`, the program :func:`run_probe` copies into
    the container (read as package data: it works from a wheel or a zip too)."""
    from importlib.resources import files

    return files(__package__ or "ocihook.doctor").joinpath("probe.py").read_text(encoding="utf-8")


#: The CUDA probe run inside the container (:mod:`ocihook.doctor.probe`'s text): the CUDA
#: driver API through ctypes, one JSON line on stdout (``{"ok": true, ...}`` or
#: ``{"ok": false, "stage": ..., "error": ...}``).
PROBE = probe_source()


def _host_ldcache_lookup() -> dict[str, str]:
    """soname -> path of this machine's ``/etc/ld.so.cache`` (native class only)."""
    from ..linux import ldcache

    flags = {"x86_64": 0x0303, "aarch64": 0x0A03}.get(os.uname().machine)
    out: dict[str, str] = {}
    try:
        with open("/etc/ld.so.cache", "rb") as f:
            for e in ldcache.parse(f.read()):
                if not e.hwcap and (flags is None or e.flags == flags):
                    out.setdefault(e.soname, e.path)
    except (OSError, OcihookError):
        pass
    return out


def _elf_links(path: str) -> tuple[tuple[str, ...], tuple[str, ...], str | None]:
    """``(DT_NEEDED, DT_RUNPATH or DT_RPATH directories with $ORIGIN expanded, PT_INTERP)``
    of the ELF file at ``path`` (pyelftools)."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    needed: list[str] = []
    runpath: list[str] = []
    interp = None
    origin = os.path.dirname(path)
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_INTERP":
                interp = str(seg.get_interp_name())  # type: ignore[attr-defined]
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        needed.append(str(tag.needed))  # type: ignore[attr-defined]
                    elif kind in ("DT_RUNPATH", "DT_RPATH"):
                        text = str(getattr(tag, "runpath", None) or getattr(tag, "rpath", ""))
                        for d in text.split(":"):
                            if d:
                                runpath.append(
                                    d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
                                )
                break
    return tuple(needed), tuple(runpath), interp


def probe_mounts(
    libcuda_needs: Sequence[str] = (
        "libc.so.6",
        "libm.so.6",
        "libdl.so.2",
        "libpthread.so.0",
        "librt.so.1",
    ),
) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """The read-only bind mounts that bring this interpreter into a container without a
    libc: the interpreter (``/.ocihook-doctor/bin/python3``), its standard library
    (``/.ocihook-doctor/lib/python3.X``), every shared library it, ``_ctypes`` and
    libcuda need (DT_NEEDED closure read with pyelftools, resolved through this machine's
    ``ld.so.cache``; in ``/.ocihook-doctor/so``) and its ELF interpreter at its own path.

    Returns:
        ``(mounts, env, args)`` for the container's ``config.json``.

    Raises:
        FileNotFoundError: a needed library is not found on this machine.
    """
    import sysconfig

    exe = os.path.realpath(sys.executable)
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    ver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    import _ctypes

    ctypes_so = os.path.realpath(_ctypes.__file__ or "")
    cache = _host_ldcache_lookup()
    machine = os.uname().machine
    system_dirs = (
        "/lib64",
        "/usr/lib64",
        f"/lib/{machine}-linux-gnu",
        f"/usr/lib/{machine}-linux-gnu",
    )
    wanted: dict[str, str] = {}
    # (name, directories its requester's RUNPATH names), resolved as ld.so would
    names: list[tuple[str, tuple[str, ...]]] = [(n, ()) for n in libcuda_needs]
    todo = [exe, ctypes_so] if ctypes_so.endswith(".so") else [exe]
    done: set[str] = set()
    needed_by_python: set[str] = set()
    while todo or names:
        while names:
            n, dirs = names.pop()
            if n in wanted:
                continue
            path = next(
                (os.path.join(d, n) for d in dirs if os.path.exists(os.path.join(d, n))), None
            )
            path = path or cache.get(n)
            if path is None:
                path = next(
                    (os.path.join(d, n) for d in system_dirs if os.path.exists(os.path.join(d, n))),
                    None,
                )
            if path is None:
                if n in libcuda_needs and n not in needed_by_python:
                    continue  # glibc 2.34+ folds libdl/libpthread/librt into libc
                raise FileNotFoundError(f"{n} (needed by the CUDA probe's interpreter) not found")
            wanted[n] = os.path.realpath(path)
            todo.append(wanted[n])
        if todo:
            p = todo.pop()
            if p in done:
                continue
            done.add(p)
            needed, runpath, _interp_name = _elf_links(p)
            needed_by_python.update(needed)
            names.extend((n, runpath) for n in needed)
    mounts: list[dict[str, Any]] = []
    opts = ["rbind", "ro", "nosuid", "nodev"]

    def bind(src: str, dst: str) -> None:
        mounts.append({"destination": dst, "type": "bind", "source": src, "options": opts})

    bind(exe, f"{PROBE_DIR}/bin/python3")
    bind(stdlib, f"{PROBE_DIR}/lib/{ver}")
    for n, p in sorted(wanted.items()):
        bind(p, f"{PROBE_DIR}/so/{n}")
    interp = _elf_links(exe)[2]
    if interp:
        bind(os.path.realpath(interp), interp)
    env = [
        f"PYTHONHOME={PROBE_DIR}",
        f"LD_LIBRARY_PATH={PROBE_DIR}/so",
        "PYTHONDONTWRITEBYTECODE=1",
    ]
    args = [f"{PROBE_DIR}/bin/python3", "-S", "-B", f"{PROBE_DIR}/probe.py"]
    return mounts, env, args


def run_probe(bundle: str, runc: str, state: str) -> dict[str, Any]:
    """Run :data:`PROBE` in the container of ``bundle`` (already edited by ocihook) with
    :func:`probe_mounts`; returns its JSON result (``{"ok": false, "stage": "runc", ...}``
    when it printed none)."""
    rootfs = os.path.join(bundle, "rootfs")
    os.makedirs(os.path.join(rootfs, PROBE_DIR.lstrip("/")), exist_ok=True)
    with open(os.path.join(rootfs, PROBE_DIR.lstrip("/"), "probe.py"), "w") as f:
        f.write(probe_source())
    try:
        mounts, env, args = probe_mounts()
    except (FileNotFoundError, OcihookError) as exc:
        return {"ok": False, "stage": "prepare", "error": str(exc)}
    # CUDA's IPC and the runtime's defaults (runc spec) have a /dev/shm; busybox's config not
    shm = {
        "destination": "/dev/shm",
        "type": "tmpfs",
        "source": "shm",
        "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
    }
    set_process(bundle, args, env, [*mounts, shm])
    proc = run_runc(runc, bundle, state, timeout=180)
    for line in proc.stdout.splitlines():
        if line.startswith("PROBE "):
            try:
                result: dict[str, Any] = json.loads(line[6:])
                return result
            except json.JSONDecodeError:
                break
    tail = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[
        -1
    ]
    return {"ok": False, "stage": "runc", "error": f"exit {proc.returncode}: {tail}"}


def real_gpu_reason(ctx: Context) -> str:
    """Why this host has no real GPU to run on (``""`` when it has): the dev root must be
    ``/`` with the kernel driver loaded and GPUs listed."""
    if ctx.root.dev_root != "/":
        return f"the dev root is {ctx.root.dev_root}, not this machine's: no real GPU to run on"
    if not os.path.exists("/proc/driver/nvidia/version"):
        return "this machine's kernel has no NVIDIA driver"
    if ctx.host is None or not ctx.host.gpus:
        return "no GPU found (see host)"
    return ""


def check_gpu_operation(
    ctx: Context, workdir: str, *, runc: str | None = None, options: Any = None
) -> list[Check]:
    """Layer 5: :data:`PROBE` in the container of :func:`check_visibility` (see the
    module docstring). PASS only when every word read back is right; SKIP (with the
    reason) without a real GPU or without the container."""
    why = real_gpu_reason(ctx)
    bundle = ctx.facts.get("bundle")
    if not why and bundle is None:
        why = "no container (see visibility)"
    if why:
        return [Check("gpu", "CUDA operation", "SKIP", why)]
    runc = runc or shutil.which("runc")
    assert runc is not None
    try:  # a fresh bundle: the visibility container's rootfs has been through a start
        bundle, _plan = prepare_bundle(
            ctx, os.path.join(workdir, "gpu"), busybox=ctx.facts["busybox"], options=options
        )
    except OcihookError as exc:
        return [Check("gpu", "CUDA operation", "FAIL", f"ocihook edit failed: {exc}", "")]
    result = run_probe(bundle, runc, os.path.join(workdir, "runc"))
    ctx.facts["probe"] = result
    if not result.get("ok"):
        return [
            Check(
                "gpu",
                "CUDA operation",
                "FAIL",
                f"failed at {result.get('stage')}: {result.get('error')}",
                "compare with nvidia-smi on the host; cuInit errors 100/999 point at the device "
                "nodes or nvidia-uvm, 3 at the driver libraries",
            )
        ]
    plan = ctx.facts.get("plan")
    uuids = {u for _i, u, _m in plan.gpus} if plan is not None else set()
    same = (
        ""
        if not uuids or result.get("uuid") in uuids
        else f" (host lists {', '.join(sorted(uuids))})"
    )
    status = "PASS" if not same else "FAIL"
    return [
        Check(
            "gpu",
            "CUDA operation",
            status,
            f"inside the container: {result.get('name')} {result.get('uuid')}{same}, CUDA "
            f"{result.get('cudaVersion')}, {result.get('bytes', 0) >> 20} MiB allocated, written, "
            "incremented by a JIT-compiled PTX kernel and read back correctly",
            ""
            if status == "PASS"
            else "the container got another GPU than asked: check the request layer",
        )
    ]
