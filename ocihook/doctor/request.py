"""Layer 3, **request**: what a bundle's or an image's environment asks for, what it
gets (the plan the hook would make) and why, and its ``NVIDIA_REQUIRE_*`` requirements
against this host or a target driver (see :mod:`ocihook.doctor`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.errors import OcihookError
from ..engines.common import read_text_if_regular
from .context import Context
from .cuda import cuda_for_driver
from .report import Check

__all__ = ["IMAGE_ANNOTATION_PREFIXES", "check_request", "check_upgrade", "read_image_env"]

#: Bundle annotation prefixes kept in the record: the image's and the engine's own
#: (OCI image-spec ``annotations.md``, CRI, Docker, nerdctl, podman).
IMAGE_ANNOTATION_PREFIXES = (
    "org.opencontainers.image.",
    "io.kubernetes.cri",
    "io.container.manager",
    "com.docker",
    "nerdctl/",
    "io.podman",
)


def read_image_env(path: str) -> tuple[dict[str, str], dict[str, Any]]:
    """An image's environment from ``path``: ``KEY=value`` lines (``docker inspect -f
    '{{join .Config.Env "\\n"}}'``), a JSON list of such strings, ``docker inspect``
    output (``[{"Config": {"Env": [...]}, "RepoDigests": [...]}]``) or an OCI image
    configuration (``{"config": {"Env": [...]}}``).

    Returns:
        ``(env, image facts)``: facts hold ``digest`` / ``id`` when the file says.

    Raises:
        RequestError: the file cannot be read or holds no environment.
    """
    from ..core.errors import RequestError
    from ..request.sources import parse_env

    text = read_text_if_regular(path, 16 << 20)
    if text is None:
        raise RequestError("cannot read the image environment file", path=path)
    facts: dict[str, Any] = {}
    stripped = text.strip()
    entries: list[str] | None = None
    if stripped[:1] in ("[", "{"):
        try:
            doc = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise RequestError(
                f"not valid JSON: {exc.msg}", path=path, field=f"line {exc.lineno}"
            ) from None
        if isinstance(doc, list) and doc and isinstance(doc[0], dict):
            doc = doc[0]
        if isinstance(doc, list):
            entries = [e for e in doc if isinstance(e, str)]
        elif isinstance(doc, dict):
            conf = doc.get("Config") or doc.get("config") or {}
            env = conf.get("Env") if isinstance(conf, dict) else None
            if isinstance(env, list):
                entries = [e for e in env if isinstance(e, str)]
            digests = doc.get("RepoDigests")
            if isinstance(digests, list) and digests:
                facts["digest"] = str(digests[0])
            if isinstance(doc.get("Id"), str):
                facts["id"] = doc["Id"]
        if entries is None:
            raise RequestError(
                "no environment in the JSON document",
                path=path,
                hint="give Config.Env of docker inspect, or KEY=value lines",
            )
    else:
        entries = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return parse_env(entries), facts


def _cuda_fact(ctx: Context) -> str:
    source = {
        "nvml": "NVML",
        "elf-note": "libcuda ELF note",
        "libcuda": "libcuda",
        "table": "driver-branch table",
    }
    cuda = ctx.facts.get("cudaVersion")
    return (
        f"CUDA {cuda} ({source.get(ctx.facts.get('cudaSource', ''), 'unknown')})"
        if cuda
        else "CUDA unknown"
    )


def _compat_library(rootfs: str | None) -> tuple[str, str] | None:
    """``(version, host path)`` of the newest ``libcuda.so.<version>`` in the image's
    ``/usr/local/cuda/compat`` (resolved inside ``rootfs``), or ``None``."""
    if rootfs is None:
        return None
    from ..linux.pathsafe import resolve_in_root
    from ..request.requirements import version_key

    try:
        d = resolve_in_root(rootfs, "/usr/local/cuda/compat")
        names = os.listdir(d)
    except (OcihookError, OSError):
        return None
    found = [
        (key, n[len("libcuda.so.") :])
        for n in names
        if n.startswith("libcuda.so.")
        and (key := version_key(n[len("libcuda.so.") :]))
        and len(key) >= 2
    ]
    if not found:
        return None
    version = max(found)[1]
    return version, os.path.join(d, "libcuda.so." + version)


def _compat_check(ctx: Context, rootfs: str | None) -> Check | None:
    """Whether the image's CUDA forward-compatibility libcuda would be used on this host
    (:meth:`ocihook.plan.CudaCompat.decide`, the rule the hook applies, with the library's
    ``.note.cuda.fwd_compatibility``: the image file is only read), or ``None`` when the
    image has none."""
    found = _compat_library(rootfs)
    driver = ctx.facts.get("driverVersion")
    if found is None or not driver:
        return None
    from ..linux.elfscan import cuda_compat_note
    from ..plan.compat import CudaCompat

    version, path = found
    rule = CudaCompat(
        host_major=int(driver.split(".")[0]),
        host_driver=driver,
        host_cuda=ctx.facts.get("cudaVersion") or "",
    )
    used, why = rule.decide(version, cuda_compat_note(path))
    return Check(
        "request",
        "CUDA forward compatibility",
        "PASS",
        f"the image's /usr/local/cuda/compat/libcuda.so.{version} "
        f"{'is used' if used else 'is not used'} on driver {driver} ({why})",
    )


def check_request(
    ctx: Context,
    env: Mapping[str, str] | None = None,
    *,
    bundle: str | None = None,
    options: Any = None,
    image: Mapping[str, Any] | None = None,
) -> list[Check]:
    """Layer 3: the request of ``bundle``'s ``config.json`` or of an image's ``env``,
    what it gets (the plan the hook would make: GPUs, capabilities, nodes, mounts) and
    why, and its requirements checked against this host (the CUDA version from
    :func:`check_host`, whatever the source). SKIP without a bundle or an env."""
    from ..core.errors import RequestError
    from ..plan.build import ContainerLayout, make_plan
    from ..plan.select import select_gpus
    from ..request.nvidia import request_from_env, request_from_spec, void_reason

    if env is None and bundle is None:
        return [
            Check(
                "request",
                "request",
                "SKIP",
                "no --bundle or --image-env given",
                "pass --bundle DIR or --image-env FILE to check what a container gets",
            )
        ]
    host = ctx.host
    image_facts: dict[str, Any] = dict(image or {})
    rootfs = None
    config: Mapping[str, Any] = {}
    try:
        if bundle is not None:
            from ..oci.bundle import load_bundle
            from ..pipeline.bundle import layout_for_rootfs
            from ..request.sources import env_from_spec

            b = load_bundle(bundle)
            config = b.config
            policy = getattr(options, "policy", None)
            kwargs = {"policy": policy} if policy is not None else {}
            request = request_from_spec(b.config, path=b.config_path, **kwargs)
            env = env_from_spec(b.config, path=b.config_path)
            rootfs = b.rootfs
            layout = layout_for_rootfs(b.rootfs)
            annotations = b.config.get("annotations") or {}
            if isinstance(annotations, dict):
                image_facts["annotations"] = {
                    k: v
                    for k, v in annotations.items()
                    if isinstance(v, str) and k.startswith(IMAGE_ANNOTATION_PREFIXES)
                }
                for key in (
                    "org.opencontainers.image.digest",
                    "io.kubernetes.cri.image-digest",
                    "io.kubernetes.cri.image-name",
                    "org.opencontainers.image.ref.name",
                ):
                    value = annotations.get(key)
                    if isinstance(value, str) and "digest" not in image_facts and "digest" in key:
                        image_facts["digest"] = value
            source = b.config_path
        else:
            assert env is not None
            request = request_from_env(env, source="image env")
            layout = ContainerLayout.for_image(False)
            source = "image env"
    except OcihookError as exc:
        ctx.facts["image"] = image_facts
        return [Check("request", "request", "FAIL", str(exc), exc.hint or "fix the variable named")]
    assert env is not None
    reqs = [(n, r.describe()) for n, r in request.requirements]
    image_facts["requirements"] = [{"name": n, "value": v} for n, v in reqs]
    image_facts["cudaVersion"] = env.get("CUDA_VERSION")
    image_facts["source"] = "bundle" if bundle is not None else "image-env"
    ctx.facts["image"] = image_facts
    ctx.facts["request_env"] = dict(env)
    if request.is_void:
        why = (
            void_reason(request, config)
            if bundle is not None
            else "NVIDIA_VISIBLE_DEVICES is unset or void"
        )
        return [
            Check(
                "request",
                "request",
                "WARN",
                f"the container asks for no GPU: {why}",
                "set NVIDIA_VISIBLE_DEVICES (all, an index or a UUID) in the image or the run",
            )
        ]
    if host is None:
        return [Check("request", "request", "SKIP", "no usable driver on the host (see host)")]
    checks: list[Check] = []
    asked = f"{request.kind}" + (f" {','.join(request.devices)}" if request.devices else "")
    try:
        plan = make_plan(host, request, layout, check_requirements=False)
    except RequestError as exc:
        return [Check("request", "request", "FAIL", f"asks for {asked}: {exc}", exc.hint or "")]
    edits = plan.edits
    gpus = ", ".join(f"{i} ({u})" for i, u, _m in plan.gpus) or "none"
    checks.append(
        Check(
            "request",
            "request",
            "PASS",
            f"{source}: NVIDIA_VISIBLE_DEVICES={env.get('NVIDIA_VISIBLE_DEVICES', '(unset)')} "
            f"(read from {request.source}) -> GPUs {gpus}; capabilities "
            f"{','.join(plan.capabilities) or 'none'}: {len(edits.device_nodes)} device nodes, "
            f"{len(edits.mounts)} mounts, {len(edits.symlinks)} links, libraries in {layout.libdir}"
            + (f"; warnings: {'; '.join(plan.warnings)}" if plan.warnings else ""),
        )
    )
    checks.append(_requirements_check(ctx, request, select_gpus(request, host.gpus), rootfs))
    if "compute" in plan.capabilities:
        compat = _compat_check(ctx, rootfs)
        if compat is not None:
            checks.append(compat)
    return checks


def _requirements_check(
    ctx: Context, request: Any, gpus: Sequence[Any], rootfs: str | None
) -> Check:
    from ..core.errors import RequestError
    from ..request.requirements import check

    if not request.requirements:
        return Check("request", "requirements", "PASS", "no NVIDIA_REQUIRE_* and no CUDA_VERSION")
    listed = "; ".join(f"{n}={r.describe()}" for n, r in request.requirements)
    try:
        check(
            request.requirements,
            cuda_version=ctx.facts.get("cudaVersion"),
            driver_version=ctx.facts.get("driverVersion"),
            gpus=gpus,
            source=request.source,
        )
    except RequestError as exc:
        fix = exc.hint or ""
        note = ""
        if _compat_library(rootfs) is not None:
            note = (
                "; the image carries CUDA forward-compatibility libraries, but the check uses "
                "the host driver's CUDA version"
            )
            fix += " (or, to rely on the image's compat libcuda, NVIDIA_DISABLE_REQUIRE=true)"
        return Check(
            "request",
            "requirements",
            "FAIL",
            f"{exc.message} ({_cuda_fact(ctx)}){note}",
            fix,
        )
    return Check("request", "requirements", "PASS", f"{listed}: met with {_cuda_fact(ctx)}")


def check_upgrade(ctx: Context, env: Mapping[str, str], driver_version: str) -> Check:
    """Pre-upgrade: would the image whose environment is ``env`` run on driver
    ``driver_version``? Its requirements are checked with that driver's version and the
    CUDA version of its branch (:data:`CUDA_BY_BRANCH`); ``arch``/``brand`` of this host's
    GPUs (the GPUs stay)."""
    from ..core.errors import RequestError
    from ..request.requirements import check, requirements_from_env, version_key

    name = f"driver {driver_version}"
    if version_key(driver_version) is None:
        return Check(
            "request",
            name,
            "FAIL",
            f"not a driver version: {driver_version!r}",
            "give X.Y or X.Y.Z",
        )
    cuda = cuda_for_driver(driver_version)
    try:
        reqs = requirements_from_env(env, source="image env")
    except RequestError as exc:
        return Check("request", name, "FAIL", str(exc), exc.hint or "")
    if not reqs:
        return Check(
            "request",
            name,
            "PASS",
            f"the image states no requirement; driver {driver_version} supports CUDA {cuda}",
        )
    gpus = ctx.host.gpus if ctx.host is not None else ()
    listed = "; ".join(f"{n}={r.describe()}" for n, r in reqs)
    try:
        check(reqs, cuda_version=cuda, driver_version=driver_version, gpus=gpus, source="image env")
    except RequestError as exc:
        return Check(
            "request",
            name,
            "FAIL",
            f"will not run on driver {driver_version} (CUDA {cuda or 'unknown'}): {exc.message}",
            exc.hint or "",
        )
    return Check(
        "request",
        name,
        "PASS",
        f"will run on driver {driver_version}: it supports CUDA {cuda or 'unknown'}; {listed} met",
    )
