"""Which requests an operator lets a container make: the unprivileged policy of the
NVIDIA Container Toolkit's ``config.toml`` (:class:`RequestPolicy`), whether a container's
environment and annotations are trusted under it, and the message that says what it
ignored. Pure: no file or host access.
"""

from __future__ import annotations

from ..core.errors import OcihookError
from ..core.records import Record
from .sources import ENV_VISIBLE_DEVICES, REQUEST_VARIABLES, env_from_spec, is_privileged

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

__all__ = [
    "ANNOTATION_POLICY_KEY",
    "ENV_POLICY_KEY",
    "RequestPolicy",
    "annotations_trusted",
    "env_trusted",
    "ignored_by_policy",
    "policy_note",
]


class RequestPolicy(Record):
    """What an operator lets containers ask by, and how (toolkit ``config.toml`` keys).

    Attributes:
        accept_env_unprivileged: honour the request variables of containers without
            ``CAP_SYS_ADMIN`` (``accept-nvidia-visible-devices-envvar-when-unprivileged``,
            default true). When false, every vendor's variables of such a container are
            ignored — ``NVIDIA_VISIBLE_DEVICES`` and the other ``NVIDIA_*`` request
            variables, the swarm variables, ``AMD_VISIBLE_DEVICES``,
            ``INTEL_VISIBLE_DEVICES`` — and :func:`ignored_by_policy` names them.
        accept_volume_mounts: read the device list from mounts under
            ``/var/run/nvidia-container-devices`` (``accept-nvidia-visible-devices-as-volume-
            mounts``, default false) — the way for clusters that cannot trust env.
        swarm_resource: names of variables Docker Swarm sets for generic resources
            (``swarm-resource``, e.g. ``DOCKER_RESOURCE_GPU``); the first set one is read
            before ``NVIDIA_VISIBLE_DEVICES``.
        accept_annotations_unprivileged: honour CDI request annotations
            (``cdi.k8s.io/...``) of containers without ``CAP_SYS_ADMIN``
            (``accept-cdi-annotations-when-unprivileged``, ocihook's own, default true as
            the toolkit, which never checks privilege for annotations).
    """

    accept_env_unprivileged: bool = True
    accept_volume_mounts: bool = False
    swarm_resource: tuple[str, ...] = ()
    accept_annotations_unprivileged: bool = True


#: The configuration keys of the unprivileged policy, for messages.
ENV_POLICY_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
ANNOTATION_POLICY_KEY = "accept-cdi-annotations-when-unprivileged"


def env_trusted(config: Mapping[str, Any], policy: RequestPolicy | None) -> bool:
    """Whether the request variables of ``config``'s container are honoured: it is
    privileged (:func:`is_privileged`) or ``policy.accept_env_unprivileged`` (``None``:
    the default policy, which honours them)."""
    return policy is None or policy.accept_env_unprivileged or is_privileged(config)


def annotations_trusted(config: Mapping[str, Any], policy: RequestPolicy | None) -> bool:
    """Whether the CDI request annotations of ``config``'s container are honoured (see
    :attr:`RequestPolicy.accept_annotations_unprivileged`)."""
    return policy is None or policy.accept_annotations_unprivileged or is_privileged(config)


def ignored_by_policy(
    config: Mapping[str, Any],
    policy: RequestPolicy | None,
    annotation_prefixes: Sequence[str] = ("cdi.k8s.io/",),
) -> tuple[str, ...]:
    """The requests of ``config`` that ``policy`` ignores because the container is
    unprivileged, for messages: the names of the request variables set to a non-empty
    value (:data:`REQUEST_VARIABLES`, the swarm variables; ``CUDA_VERSION`` of a legacy
    CUDA image, which asks for every GPU), then ``annotations[<key>]`` of each CDI
    request annotation. ``()`` when nothing is ignored. Never raises."""
    out: list[str] = []
    if not env_trusted(config, policy):
        try:
            env = env_from_spec(config)
        except OcihookError:
            env = {}
        swarm = policy.swarm_resource if policy is not None else ()
        out += [v for v in (*REQUEST_VARIABLES, *swarm) if env.get(v, "").strip(" ,")]
        legacy = env.get("CUDA_VERSION") and not env.get("NVIDIA_REQUIRE_CUDA")
        if ENV_VISIBLE_DEVICES not in env and legacy:
            out.append("CUDA_VERSION (a legacy CUDA image asks for all GPUs)")
    if not annotations_trusted(config, policy):
        annotations = config.get("annotations")
        if isinstance(annotations, dict):
            out += [
                f"annotations[{k}]"
                for k in annotations
                if isinstance(k, str) and any(k.startswith(p) for p in annotation_prefixes)
            ]
    return tuple(dict.fromkeys(out))


def policy_note(ignored: Sequence[str]) -> str:
    """The message for :func:`ignored_by_policy`'s list: ``"AMD_VISIBLE_DEVICES ignored:
    unprivileged container (no CAP_SYS_ADMIN in its bounding set) and
    accept-nvidia-visible-devices-envvar-when-unprivileged = false"``, naming the setting
    (or settings) that ignored them."""
    keys = []
    if any(not i.startswith("annotations[") for i in ignored):
        keys.append(f"{ENV_POLICY_KEY} = false")
    if any(i.startswith("annotations[") for i in ignored):
        keys.append(f"{ANNOTATION_POLICY_KEY} = false")
    return (
        f"{', '.join(ignored)} ignored by policy: unprivileged container (no CAP_SYS_ADMIN "
        f"in its bounding set) and {' and '.join(keys)}"
    )
