"""CDI qualified device names and the ``cdi.k8s.io/`` annotations that carry them.

A *qualified device name* is ``vendor/class=name`` (CDI ``SPEC.md``, "CDI JSON
Specification" → ``kind`` and "Devices" → ``name``). It is split at the first ``=``, then
at the first ``/`` before it. The character rules are the reference parser's
(``pkg/parser/parser.go``):

* vendor and class: an ASCII letter first, then letters, digits, ``_``, ``.`` or ``-``,
  ending with a letter or a digit (a one-letter name is fine);
* device name: a letter or digit first, then letters, digits, ``_``, ``.``, ``:`` or
  ``-``, ending with a letter or digit.

Annotations (``pkg/cdi/annotations.go`` semantics): a key ``cdi.k8s.io/<plugin>_<id>``
whose value is a comma list of qualified names. Everything here is pure: no file access.
"""

from __future__ import annotations

from ..core.errors import CdiError
from ..core.vocab import is_cdi_vendor_or_class

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "ANNOTATION_PREFIX",
    "CdiError",
    "annotation_key",
    "annotation_value",
    "is_qualified_name",
    "parse_annotations",
    "parse_qualified_name",
    "qualified_name",
    "validate_class",
    "validate_device_name",
    "validate_vendor",
]

#: Key prefix of the annotations that request CDI devices (CDI ``SPEC.md``, "Annotations").
ANNOTATION_PREFIX = "cdi.k8s.io/"


_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
#: Device names: ``[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?`` (checked without
#: :mod:`re`, whose import costs a third of the interpreter's start).
_DEVICE_CHARS = _ALNUM | frozenset("_.:-")
# Kubernetes annotation name part: alphanumerics, '-', '_', '.', alnum at both ends.
_ANNOTATION_NAME_CHARS = _ALNUM | frozenset("_.-")


def _fullmatch(value: str, inner: frozenset[str]) -> bool:
    """Whether ``value`` is ``[A-Za-z0-9](?:[INNER]*[A-Za-z0-9])?`` in full."""
    return bool(value) and value[0] in _ALNUM and value[-1] in _ALNUM and set(value) <= inner


_ANNOTATION_NAME_MAX = 63


def _check(what: str, chars: frozenset[str], value: str, rule: str) -> str:
    if not isinstance(value, str):
        raise CdiError(f"invalid {what}: not a string", value=value)
    if not value:
        raise CdiError(f"invalid {what}: empty", value=value)
    if not _fullmatch(value, chars):
        raise CdiError(f"invalid {what}: {rule}", value=value)
    return value


_VC_RULE = (
    "must start with an ASCII letter, contain only letters, digits, '_', '.' or '-', "
    "and end with a letter or digit"
)


def _check_vendor_class(what: str, value: str) -> str:
    if not isinstance(value, str):
        raise CdiError(f"invalid {what}: not a string", value=value)
    if not value:
        raise CdiError(f"invalid {what}: empty", value=value)
    if not is_cdi_vendor_or_class(value):
        raise CdiError(f"invalid {what}: {_VC_RULE}", value=value)
    return value


def validate_vendor(vendor: str) -> str:
    """Return ``vendor`` if it is a valid CDI vendor name, else raise :class:`CdiError`
    naming the reason (CDI ``SPEC.md``, ``kind``; ``parser.ValidateVendorName``)."""
    return _check_vendor_class("vendor", vendor)


def validate_class(cls: str) -> str:
    """Return ``cls`` if it is a valid CDI device class, else raise :class:`CdiError`
    (CDI ``SPEC.md``, ``kind``; ``parser.ValidateClassName``)."""
    return _check_vendor_class("class", cls)


def validate_device_name(name: str) -> str:
    """Return ``name`` if it is a valid CDI device name, else raise :class:`CdiError`
    (CDI ``SPEC.md``, "Devices" → ``name``; ``parser.ValidateDeviceName``)."""
    return _check(
        "device name",
        _DEVICE_CHARS,
        name,
        "must start with an ASCII letter or digit, contain only letters, digits, '_', "
        "'.', ':' or '-', and end with a letter or digit",
    )


def parse_qualified_name(name: str) -> tuple[str, str, str]:
    """Split a qualified device name ``vendor/class=name`` into ``(vendor, class, name)``.

    The split is at the first ``=``, then at the first ``/`` of what precedes it; each part
    is then validated. Raises :class:`CdiError` (``value`` = ``name``) saying which part is
    wrong. Source: CDI ``SPEC.md`` ("Devices"), ``parser.ParseQualifiedName``.
    """
    if not isinstance(name, str):
        raise CdiError("invalid qualified device name: not a string", value=name)
    kind, eq, device = name.partition("=")
    if not eq:
        raise CdiError(
            "invalid qualified device name: no '=' (expected vendor/class=name)", value=name
        )
    vendor, slash, cls = kind.partition("/")
    if not slash:
        raise CdiError(
            "invalid qualified device name: no '/' before '=' (expected vendor/class=name)",
            value=name,
        )
    try:
        validate_vendor(vendor)
        validate_class(cls)
        validate_device_name(device)
    except CdiError as err:
        raise CdiError(f"invalid qualified device name: {err.message}", value=name) from None
    return vendor, cls, device


def qualified_name(vendor: str, cls: str, name: str) -> str:
    """Return ``"vendor/class=name"`` after validating each part (raises :class:`CdiError`)."""
    validate_vendor(vendor)
    validate_class(cls)
    validate_device_name(name)
    return f"{vendor}/{cls}={name}"


def is_qualified_name(name: str) -> bool:
    """Whether ``name`` is a valid qualified device name (see :func:`parse_qualified_name`)."""
    try:
        parse_qualified_name(name)
    except CdiError:
        return False
    return True


def annotation_key(plugin: str, device_id: str) -> str:
    """Return the annotation key ``cdi.k8s.io/<plugin>_<device_id>`` for a device plugin
    (or DRA driver) and the id of the device it allocates.

    ``/`` in ``device_id`` becomes ``_``; the name after the prefix must be a Kubernetes
    annotation name (at most 63 characters, alphanumerics, ``-``, ``_``, ``.``, starting
    and ending alphanumeric). Raises :class:`CdiError` otherwise. Source: CDI ``SPEC.md``
    ("Annotations"), ``cdi.AnnotationKey``.
    """
    if not plugin:
        raise CdiError("invalid CDI annotation key: empty plugin name", value=plugin)
    if not device_id:
        raise CdiError("invalid CDI annotation key: empty device id", value=device_id)
    name = plugin + "_" + device_id.replace("/", "_")
    if len(name) > _ANNOTATION_NAME_MAX:
        raise CdiError(
            f"invalid CDI annotation key: name longer than {_ANNOTATION_NAME_MAX} characters",
            value=name,
        )
    if not _fullmatch(name, _ANNOTATION_NAME_CHARS):
        raise CdiError(
            "invalid CDI annotation key: only alphanumerics, '-', '_' and '.' allowed, "
            "alphanumeric at both ends",
            value=name,
        )
    return ANNOTATION_PREFIX + name


def annotation_value(devices: Iterable[str]) -> str:
    """Return the annotation value for ``devices``: their qualified names joined by ``,``.
    Each is validated (raises :class:`CdiError`); an empty list is an error."""
    names = list(devices)
    if not names:
        raise CdiError("invalid CDI annotation value: no devices")
    for name in names:
        parse_qualified_name(name)
    return ",".join(names)


def parse_annotations(
    annotations: Mapping[str, str], prefixes: tuple[str, ...] = (ANNOTATION_PREFIX,)
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Find the CDI device requests in ``annotations`` (an OCI spec's or a pod's).

    Returns ``(keys, devices)``: the keys that start with one of ``prefixes``, in mapping
    order, and the qualified names of their comma-list values in order (duplicates kept:
    a registry resolves each once). Surrounding blanks around entries are ignored and empty
    entries skipped. A malformed name raises :class:`CdiError` with ``field`` = the key.
    Source: CDI ``SPEC.md`` ("Annotations"), ``cdi.ParseAnnotations``.
    """
    keys: list[str] = []
    devices: list[str] = []
    for key, value in annotations.items():
        if not any(key.startswith(p) for p in prefixes):
            continue
        if not isinstance(value, str):
            raise CdiError("invalid CDI annotation: value is not a string", field=key, value=value)
        entries = [e.strip() for e in value.split(",")]
        entries = [e for e in entries if e]
        if not entries:
            raise CdiError("invalid CDI annotation: no device names", field=key, value=value)
        for entry in entries:
            try:
                parse_qualified_name(entry)
            except CdiError as err:
                raise CdiError(err.message, field=key, value=entry) from None
        keys.append(key)
        devices.extend(entries)
    return tuple(keys), tuple(devices)
