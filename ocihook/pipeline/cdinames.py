"""Which CDI devices a container names: the CDI request annotations and the CDI names in
its ``*_VISIBLE_DEVICES`` variables (:func:`cdi_device_names`), and the AMD/Intel
requests that stay with host discovery beside them (:func:`drm_requests_beside_cdi`).
"""

from __future__ import annotations

from ..core.errors import CdiError, RequestError, SpecError
from ..request.drm import DRM_CDI_KINDS, DRM_VARIABLES, drm_request_from_env, is_drm_cdi_name
from ..request.policy import annotations_trusted, env_trusted
from ..request.sources import env_from_spec

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from typing import Any

    from ..config.options import Options
    from ..request.drm import DrmRequest
    from ..request.nvidia import Request

__all__ = [
    "cdi_device_names",
    "drm_cdi_names",
    "drm_requests_beside_cdi",
    "has_annotation_request",
]


def cdi_device_names(config: dict[str, Any], request: Request, options: Options) -> tuple[str, ...]:
    """The CDI devices a ``config.json`` requests (qualified names, request order, each
    once), or ``()`` when it is for the legacy path.

    Sources: ``annotations`` keys starting with one of ``options.annotation_prefixes``
    (comma lists of qualified names, CDI ``SPEC.md`` "Annotations"; skipped for an
    unprivileged container when ``accept-cdi-annotations-when-unprivileged = false``);
    when they name no device, the device list of ``NVIDIA_VISIBLE_DEVICES`` (or of the
    request's other source: swarm variables, volume mounts) when it names a CDI device
    (``nvidia.com/gpu=0``) or ``options.mode`` is ``"cdi"``: then every entry that is not
    qualified gets ``options.default_kind`` (``0`` -> ``nvidia.com/gpu=0``, ``all`` ->
    ``nvidia.com/gpu=all``). Annotations *replace* the NVIDIA request, as in the NVIDIA
    Container Toolkit (``internal/config/image`` ``CUDA.VisibleDevices``, ``internal/
    modifier/cdi.go``): a CUDA image's default ``NVIDIA_VISIBLE_DEVICES=all`` beside an
    annotation naming GPU 1 gives GPU 1 only. The AMD/Intel variables' CDI names are added
    in either case. ``"legacy"`` mode returns ``()`` (annotations are not read).

    Raises:
        CdiError: a malformed annotation (``field`` = its key) or device name.
    """
    from ..cdi.names import is_qualified_name, parse_annotations, parse_qualified_name

    if options.mode == "legacy":
        return ()
    annotations = config.get("annotations")
    from_annotations: tuple[str, ...] = ()
    if annotations is not None and not isinstance(annotations, dict):
        raise SpecError("annotations must be an object", field="annotations")
    if annotations and annotations_trusted(config, options.policy):
        _keys, from_annotations = parse_annotations(annotations, options.annotation_prefixes)
    devices: tuple[str, ...] = ()
    if request.kind == "all":
        devices = ("all",)
    elif request.kind == "list":
        devices = request.devices
    from_env: list[str] = []
    if options.mode == "cdi" or any(is_qualified_name(d) for d in devices):
        for d in devices:
            # an entry with "/" or "=" is meant as a qualified name: checked as written
            name = d if ("=" in d or "/" in d) else f"{options.default_kind}={d}"
            try:
                parse_qualified_name(name)
            except CdiError as err:
                raise CdiError(
                    err.message, field=f"{request.source}[NVIDIA_VISIBLE_DEVICES]", value=d
                ) from None
            from_env.append(name)
    if from_annotations:  # the toolkit: annotations replace NVIDIA_VISIBLE_DEVICES
        from_env = []
    from_env.extend(drm_cdi_names(config, options))
    names: list[str] = []
    for name in (*from_env, *from_annotations):
        if name not in names:
            names.append(name)
    return tuple(names)


def has_annotation_request(config: dict[str, Any], options: Options) -> bool:
    """Whether ``config`` has an annotation with one of ``options.annotation_prefixes``
    (outside ``legacy`` mode), so that its CDI devices replace the environment's request."""
    annotations = config.get("annotations")
    if options.mode == "legacy" or not isinstance(annotations, dict):
        return False
    return any(
        isinstance(k, str) and k.startswith(options.annotation_prefixes) for k in annotations
    )


def drm_cdi_names(config: dict[str, Any], options: Options) -> list[str]:
    """The CDI names in ``AMD_VISIBLE_DEVICES``/``INTEL_VISIBLE_DEVICES``: when one entry is
    a qualified name (or ``options.mode`` is ``"cdi"``), every entry is, the others given
    the vendor's kind (``amd.com/gpu``, ``intel.com/gpu``). None when the policy ignores
    the container's environment (:func:`ocihook.request.policy.env_trusted`)."""
    from ..cdi.names import parse_qualified_name

    env = env_from_spec(config)
    names: list[str] = []
    if not env_trusted(config, options.policy):
        return names
    for vendor, variable in DRM_VARIABLES.items():
        items = [i.strip() for i in env.get(variable, "").split(",") if i.strip()]
        if not items or any(i in ("void", "none") for i in items):
            continue
        if options.mode != "cdi" and not any(is_drm_cdi_name(i) for i in items):
            continue
        for item in items:
            name = item if is_drm_cdi_name(item) else f"{DRM_CDI_KINDS[vendor]}={item}"
            try:
                parse_qualified_name(name)
            except CdiError as err:
                raise CdiError(err.message, field=f"process.env[{variable}]", value=item) from None
            names.append(name)
    return names


def drm_requests_beside_cdi(
    config: dict[str, Any], options: Options, path: str
) -> tuple[DrmRequest, ...]:
    """The AMD/Intel requests that stay with host discovery when the container also names
    CDI devices: those of a variable that holds no CDI name (``mode = "cdi"``: none).

    Raises:
        RequestError: a malformed entry in such a variable (``path`` set).
    """
    if options.mode == "cdi" or not env_trusted(config, options.policy):
        return ()
    env = env_from_spec(config, path=path)
    found = []
    for vendor, variable in DRM_VARIABLES.items():
        if any(is_drm_cdi_name(item) for item in env.get(variable, "").split(",")):
            continue
        try:
            req = drm_request_from_env(vendor, env)
        except RequestError as e:
            raise e.with_path(path) from None
        if req is not None:
            found.append(req)
    return tuple(found)
