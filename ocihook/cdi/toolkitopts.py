"""The options of ``nvidia-ctk cdi generate`` that shape a spec, read as the NVIDIA
Container Toolkit reads them (``cmd/nvidia-ctk/cdi/generate/generate.go``), for
``ocihook cdi generate`` (:mod:`ocihook.cdi.generate` makes the spec):

* ``--device-id``: :func:`parse_device_ids` (go-nvlib's device identifiers);
* ``--disable-hook``/``--enable-hook``: :func:`resolve_hooks`; :data:`SPEC_HOOKS` says which
  part of ocihook's one ``hook cdi`` hook stands for each of the toolkit's hooks
  (``internal/discover/hooks.go``), :data:`HOOKS_WITHOUT_EQUIVALENT` which have none;
* ``--mode``: :func:`check_mode`; :data:`GENERATE_MODES` are generated,
  :data:`OTHER_TOOLKIT_MODES` (``pkg/nvcdi/mode.go``) are not.

A list option's value is a comma-separated list, as the toolkit's list flags are. Errors
are :class:`~ocihook.core.errors.CdiError` naming the option (``field``) and the value;
the command reports them as usage errors (exit 2). str methods only.
"""

from __future__ import annotations

from ..core.errors import CdiError

TYPE_CHECKING = False
if TYPE_CHECKING:  # collections.abc imports collections: milliseconds at start
    from collections.abc import Sequence

__all__ = [
    "ALL_HOOKS",
    "DEFAULT_HOOKS",
    "GENERATE_MODES",
    "HOOKS_WITHOUT_EQUIVALENT",
    "OTHER_TOOLKIT_MODES",
    "SPEC_HOOKS",
    "check_mode",
    "parse_device_ids",
    "resolve_hooks",
]

#: The ``--mode`` values (``nvidia-ctk cdi generate --mode``) ocihook generates a spec
#: for: ``auto`` (WSL2's spec where ``/dev/dxg`` exists without ``/proc/driver/nvidia``,
#: else the GPUs'), ``nvml`` (the GPUs enumerated with NVML: ``--gpu-backend nvml``) and
#: ``wsl`` (WSL2's spec; another host is an error).
GENERATE_MODES = ("auto", "nvml", "wsl")

#: The toolkit's other modes (``pkg/nvcdi/mode.go``), which ocihook does not generate a
#: spec for: what each is, and what ocihook offers instead.
OTHER_TOOLKIT_MODES = {
    "csv": "Tegra (Jetson) systems, whose driver files are listed in CSV files; ocihook "
    "serves discrete GPUs",
    "management": "the management containers' spec; ocihook gives a privileged container "
    "the MIG management nodes it asks for with NVIDIA_MIG_CONFIG_DEVICES and "
    "NVIDIA_MIG_MONITOR_DEVICES (spec and hook mode)",
    "gds": "GPUDirect Storage nodes; ocihook gives them to a container that sets "
    "NVIDIA_GDS=enabled (spec and hook mode)",
    "mofed": "MOFED (InfiniBand) nodes; ocihook gives them to a container that sets "
    "NVIDIA_MOFED=enabled (spec and hook mode)",
    "nvswitch": "NVSwitch nodes; ocihook gives them to a container that sets "
    "NVIDIA_NVSWITCH=enabled (spec and hook mode)",
    "gdrcopy": "the GDRCopy node; ocihook gives it to a container that sets "
    "NVIDIA_GDRCOPY=enabled (spec and hook mode)",
    "imex": "IMEX channels; ocihook gives a container the channels it names in "
    "NVIDIA_IMEX_CHANNELS (spec and hook mode)",
}

#: The hook names of ``nvidia-ctk cdi generate --disable-hook``/``--enable-hook``
#: (``internal/discover/hooks.go``) that ocihook's spec has an equivalent for, and the
#: part of its ``hook cdi`` arguments each stands for. Every one is on by default.
SPEC_HOOKS = {
    "create-symlinks": "--links: the development links (libcuda.so -> libcuda.so.1, ...), "
    "the /dev/dri/by-path links of each GPU, WSL2's nvidia-smi link",
    "update-ldcache": "--libs and --ld-so-conf: the container's ld.so.cache and "
    "ld.so.conf.d drop-in, with the soname links (which the toolkit leaves to ldconfig)",
    "enable-cuda-compat": "--cuda-compat: CUDA forward compatibility, applied through the "
    "container's ld.so.cache (so only with update-ldcache)",
    "disable-device-node-modification": "--mask-proc and --proc-gpus-from-devices: the "
    "/proc/driver/nvidia mask with ModifyDeviceFiles: 0",
}

#: The toolkit's hook names that ocihook's spec has no equivalent for, and why: accepted,
#: with a note that they change nothing.
HOOKS_WITHOUT_EQUIVALENT = {
    "chmod": "ocihook's spec has no chmod hook: device nodes carry their mode in the spec "
    "(the toolkit's hook, off by default there too, worked around old crun releases)",
    "update-application-profile": "ocihook's spec writes no driver application profile (the "
    "toolkit's hook limits what EGL and Vulkan see to the container's GPUs)",
}

#: The special hook name that stands for every hook.
ALL_HOOKS = "all"
#: The hooks a spec carries when none is disabled: every one of :data:`SPEC_HOOKS`.
DEFAULT_HOOKS = frozenset(SPEC_HOOKS)


def _split_list(values: Sequence[str]) -> list[str]:
    """The items of repeatable list options: each value split at commas, as the toolkit's
    list flags are, and stripped of surrounding blanks."""
    return [item.strip() for value in values for item in value.split(",")]


def _is_decimal(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _device_id_form(item: str) -> bool:
    """Whether ``item`` is one of the forms ``nvidia-ctk cdi generate --device-id`` takes
    (go-nvlib ``pkg/nvlib/device/identifier.go``): a GPU index (decimal), a MIG device
    ``i:j`` (decimal GPU index and MIG index), a GPU UUID ``GPU-<uuid>`` or a MIG UUID
    (``MIG-<uuid>``, or ``MIG-GPU-<uuid>/<gi>/<ci>``)."""
    from ..request.nvidia import classify_device

    if _is_decimal(item):
        return True
    i, sep, j = item.partition(":")
    if sep and _is_decimal(i) and _is_decimal(j):
        return True
    return classify_device(item) in ("uuid", "mig-uuid")


def parse_device_ids(values: Sequence[str]) -> tuple[str, ...] | None:
    """The devices ``--device-id`` values limit a spec to, as ``nvidia-ctk cdi generate``
    reads them.

    Args:
        values: the option's values; each is a comma-separated list of ids (blanks around
            an id are dropped).

    Returns:
        ``None`` for every device (no value, or ``all`` among them); else the ids, each
        once, in the order given: GPU indices (``0``), MIG devices by index (``0:1``),
        GPU UUIDs (``GPU-...``) and MIG UUIDs (``MIG-...``). Whether the host has them is
        :func:`generate_spec`'s check.

    Raises:
        CdiError: an id of none of those forms, or ``none`` (a spec without devices is
            not a valid CDI spec, so ocihook writes none).
    """
    items = _split_list(values)
    for item in items:
        if item == "none":
            raise CdiError(
                "selects no device, and a CDI spec needs at least one",
                field="--device-id",
                value=item,
                hint="leave --device-id out for every GPU, or name the GPUs",
            )
        if item != "all" and not _device_id_form(item):
            raise CdiError(
                "not a device id",
                field="--device-id",
                value=item,
                hint="use all, a GPU index (0), a MIG device (0:1), a GPU UUID (GPU-...) or "
                "a MIG UUID (MIG-...); several: repeat the option or separate them with commas",
            )
    if not items or "all" in items:
        return None
    return tuple(dict.fromkeys(items))


def resolve_hooks(
    disabled: Sequence[str], enabled: Sequence[str] = ()
) -> tuple[frozenset[str], tuple[str, ...]]:
    """The :data:`SPEC_HOOKS` a spec keeps for ``nvidia-ctk cdi generate``'s
    ``--disable-hook`` and ``--enable-hook`` values, with the toolkit's rules: each value
    a comma-separated list; ``all`` disables every hook; an enabled hook stays whatever is
    disabled.

    Returns:
        ``(kept, notes)``: the names of :data:`SPEC_HOOKS` kept, and one sentence per name
        that changes nothing (:data:`HOOKS_WITHOUT_EQUIVALENT`; ``enable-cuda-compat``
        kept while ``update-ldcache`` is not).

    Raises:
        CdiError: a name the toolkit does not know (``field`` is the option), or ``all``
            given to ``--enable-hook`` (the toolkit refuses it too).
    """
    known = (ALL_HOOKS, *sorted((*SPEC_HOOKS, *HOOKS_WITHOUT_EQUIVALENT)))
    off, on = _split_list(disabled), _split_list(enabled)
    notes: list[str] = []
    for flag, names in (("--disable-hook", off), ("--enable-hook", on)):
        for name in dict.fromkeys(names):
            if name not in known:
                raise CdiError(
                    "unknown hook name",
                    field=flag,
                    value=name,
                    hint="the toolkit's hook names are " + ", ".join(known),
                )
            if flag == "--enable-hook" and name == ALL_HOOKS:
                raise CdiError(
                    "every hook is on unless disabled: name the hooks to enable",
                    field=flag,
                    value=name,
                )
            if name in HOOKS_WITHOUT_EQUIVALENT:
                notes.append(f"{flag} {name} has no effect: {HOOKS_WITHOUT_EQUIVALENT[name]}")
    kept = {h for h in SPEC_HOOKS if h not in off and ALL_HOOKS not in off}
    kept |= set(on) & set(SPEC_HOOKS)
    if "enable-cuda-compat" in kept and "update-ldcache" not in kept:
        notes.append(
            "enable-cuda-compat has no effect without update-ldcache: ocihook brings the "
            "compat libraries in through the container's ld.so.cache"
        )
    return frozenset(kept), tuple(notes)


def check_mode(mode: str) -> str:
    """``mode`` (``--mode``; any case, as the toolkit reads it) in lowercase when it is one
    of :data:`GENERATE_MODES`.

    Raises:
        CdiError: another of the toolkit's modes (:data:`OTHER_TOOLKIT_MODES`: the message
            says what it is and what ocihook offers instead), or a mode the toolkit does
            not know either.
    """
    lowered = mode.lower()
    if lowered in GENERATE_MODES:
        return lowered
    supported = "ocihook generates " + ", ".join(GENERATE_MODES)
    if lowered in OTHER_TOOLKIT_MODES:
        raise CdiError(
            f"the toolkit's {lowered} mode is not generated by ocihook: it is for "
            f"{OTHER_TOOLKIT_MODES[lowered]}",
            field="--mode",
            value=mode,
            hint=supported,
        )
    raise CdiError("unknown mode", field="--mode", value=mode, hint=supported)
