"""``ocihook doctor``: check each layer between a GPU and a container, one at a time.

The layers, in order (each check a :class:`Check`: ``PASS``, ``WARN``, ``FAIL`` or
``SKIP``, with its evidence and a one-line fix):

1. **host** (:func:`check_host`): the kernel module and driver version
   (``/proc/driver/nvidia/version``, ``/proc/modules``), the GPUs (procfs; NVML when it
   works), the device nodes (major:minor checked by discovery, mode against the driver's
   ``DeviceFileMode``), the persistence daemon (socket, pid file), the CUDA version the
   driver supports — from NVML, else from the driver root's ``libcuda`` called in a child
   process (``cuDriverGetVersion`` needs no GPU), else from :data:`CUDA_BY_BRANCH` — and
   every driver library of every capability (:func:`check_driver_libraries`): a valid ELF
   file of the class and machine its ``ld.so.cache`` entry says, whose driver DT_NEEDED
   entries resolve inside the driver root (read with pyelftools: never on a container's
   start path).
2. **runtime** (:func:`check_runtime`): each engine's files (Docker ``daemon.json``,
   containerd ``config.toml`` and its ``imports``, CRI-O ``crio.conf`` and drop-ins,
   hooks.d) register an ocihook that exists and runs on a real interpreter (not a pyenv or
   asdf shim); no NVIDIA Container Toolkit registered beside it; no hook registered
   without ``env`` at ``createContainer`` or ``startContainer`` in hooks.d or the bundle
   (:func:`check_registrations`: such a hook runs with the image's environment); and the CDI specs
   (:func:`check_cdi`): valid against the packaged schema and ocihook's loader, and
   generated for the loaded driver (a stale spec names the refresh unit).
3. **request** (:func:`check_request`): what a bundle's or an image's environment asks
   for, what it would get and why (the plan the hook would make), and its
   ``NVIDIA_REQUIRE_*`` requirements against this host — or, with a target driver
   version, against that driver (:func:`check_upgrade`).
4. **visibility** (:func:`check_visibility`): a busybox container that ocihook edits,
   run with runc, seen from inside: device nodes, library mounts, links, its
   ``ld.so.cache``, the ``/proc/driver/nvidia`` mask.
5. **gpu** (:func:`check_gpu_operation`): a real CUDA operation in that container: this
   interpreter, its standard library and the C libraries they need are bind-mounted
   read-only under ``/.ocihook-doctor`` (the busybox image has no libc); :mod:`.probe`
   runs there with ctypes against the ``libcuda.so.1`` ocihook mounted, found through
   the container's ``ld.so.cache``: ``cuInit``, the device's name and UUID, a context,
   64 MiB of device memory written and read back, a PTX kernel JIT-compiled and run. No
   compiler, no CUDA toolkit. Without a real GPU this layer is ``SKIP``, never ``PASS``.

A layer's status is its worst check's. The functions take a
:class:`~ocihook.core.hostroot.HostRoot` and return checks; only the container layers
run anything (runc, and this interpreter for the CUDA child).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from typing import Any

from ..core.hostroot import HostRoot
from .context import Context
from .cuda import CUDA_BY_BRANCH, cuda_for_driver
from .gpu import PROBE, PROBE_DIR, check_gpu_operation, run_probe
from .host import check_driver_libraries, check_host
from .registrations import check_registrations
from .report import LAYERS, STATUSES, Check, Report, deployment_record, worst
from .request import check_request, check_upgrade, read_image_env
from .runtime import check_cdi, check_runtime
from .visibility import check_visibility, prepare_bundle

__all__ = [
    "CUDA_BY_BRANCH",
    "LAYERS",
    "PROBE",
    "PROBE_DIR",
    "STATUSES",
    "Check",
    "Context",
    "Report",
    "check_cdi",
    "check_driver_libraries",
    "check_gpu_operation",
    "check_host",
    "check_registrations",
    "check_request",
    "check_runtime",
    "check_upgrade",
    "check_visibility",
    "cuda_for_driver",
    "deployment_record",
    "prepare_bundle",
    "read_image_env",
    "run_doctor",
    "run_probe",
    "worst",
]


def run_doctor(
    root: HostRoot,
    *,
    config_root: str = "/",
    engines: Sequence[str] | None = None,
    bundle: str | None = None,
    image_env: str | None = None,
    driver_version: str | None = None,
    gpu_backend: str = "auto",
    containers: bool = True,
    runc: str | None = None,
    busybox: str | None = None,
    options: Any = None,
    workdir: str | None = None,
) -> Report:
    """Run every layer (see the module docstring) and return the :class:`Report`.

    Args:
        root: the host to check.
        config_root: root under which engine configuration and CDI specs are read.
        engines: only these engines (default: every installed one).
        bundle: a bundle whose request to check.
        image_env: a file with an image's environment (:func:`read_image_env`).
        driver_version: also check the image against this driver (:func:`check_upgrade`).
        gpu_backend: GPU enumeration (``auto``: NVML when it works).
        containers: run the visibility and GPU layers (False: SKIP them).
        runc, busybox: programs for the container layers (default: from ``PATH``).
        options: the operator's settings (:class:`ocihook.config.options.Options`).
        workdir: where to build the container (default: a temporary directory, removed).

    Raises:
        RequestError: ``image_env`` cannot be read.
    """
    import tempfile

    ctx = Context(root, config_root)
    checks = check_host(ctx, gpu_backend=gpu_backend)
    checks += check_runtime(ctx, engines)
    checks += check_registrations(ctx, bundle)
    env = None
    image: dict[str, Any] = {}
    if image_env is not None:
        env, image = read_image_env(image_env)
    checks += check_request(ctx, env, bundle=bundle, options=options, image=image)
    if bundle is not None:
        checks += _hook_free(bundle)
    if driver_version is not None:
        upgrade_env = env if env is not None else ctx.facts.get("request_env") or {}
        checks.append(check_upgrade(ctx, upgrade_env, driver_version))
    if not containers:
        checks += [
            Check("visibility", "container", "SKIP", "--no-container"),
            Check("gpu", "CUDA operation", "SKIP", "--no-container"),
        ]
    else:
        tmp = workdir or tempfile.mkdtemp(prefix="ocihook-doctor-")
        try:
            checks += check_visibility(ctx, tmp, runc=runc, busybox=busybox, options=options)
            checks += check_gpu_operation(ctx, tmp, runc=runc, options=options)
        finally:
            if workdir is None:
                shutil.rmtree(tmp, ignore_errors=True)
    for key in ("bundle", "plan", "busybox", "request_env"):
        ctx.facts.pop(key, None)
    if ctx.host is not None:
        ctx.facts["gpus"] = [
            {
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "busId": g.bus_id,
                "migMode": "enabled" if g.mig_devices else "disabled",
                "migDevices": [m.uuid or f"{g.index}:{m.gi}:{m.ci}" for m in g.mig_devices],
            }
            for g in ctx.host.gpus
        ]
    return Report(tuple(checks), ctx.facts)


def _hook_free(bundle: str) -> list[Check]:
    """:func:`ocihook.doctor.hookfree.check_hook_free` for the bundle's image, when its
    ``config.json`` can be read (the request layer reports it otherwise)."""
    from ..core.errors import OcihookError
    from ..oci.bundle import load_bundle
    from .hookfree import check_hook_free

    try:
        rootfs = load_bundle(bundle).rootfs
    except OcihookError:
        return []
    return [check_hook_free(rootfs)]
