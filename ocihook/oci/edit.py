"""Helpers that edit a parsed ``config.json`` in place, shared by the spec applier
(:mod:`ocihook.appliers.spec`) and CDI injection (:mod:`ocihook.cdi.inject`): child
objects and lists created on demand with their types checked, ``KEY=value`` environment
entries replaced or appended, device cgroup rules added, and a deep copy of JSON data.

Fields follow the OCI runtime-spec (``config.md``); ``null`` counts as absent.
"""

from __future__ import annotations

from ..core.errors import SpecError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

__all__ = ["add_device_rules", "child_list", "child_object", "copy_json", "set_env"]


def child_object(
    doc: dict[str, Any], key: str, *, path: str | None = None, field: str | None = None
) -> dict[str, Any]:
    """``doc[key]``, created as ``{}`` when absent or ``null``.

    Raises:
        SpecError: it is there but not an object (``path``, ``field`` = its JSON path).
    """
    value = doc.get(key)
    if value is None:
        value = doc[key] = {}
    if not isinstance(value, dict):
        raise SpecError(f"{field or key} must be an object", path=path, field=field or key)
    return value


def child_list(
    doc: dict[str, Any], key: str, *, path: str | None = None, field: str | None = None
) -> list[Any]:
    """``doc[key]``, created as ``[]`` when absent or ``null``.

    Raises:
        SpecError: it is there but not a list (``path``, ``field`` = its JSON path).
    """
    value = doc.get(key)
    if value is None:
        value = doc[key] = []
    if not isinstance(value, list):
        raise SpecError(f"{field or key} must be a list", path=path, field=field or key)
    return value


def set_env(env: list[str], entries: Sequence[str], *, replace_last: bool = False) -> None:
    """Put each ``KEY=value`` of ``entries`` into ``env``: an entry with the same key is
    replaced in place — the first one, or with ``replace_last`` the last one, as
    runtime-tools' ``AddMultipleProcessEnv`` does for CDI — or else it is appended."""
    for entry in entries:
        key = entry.partition("=")[0]
        found = [i for i, old in enumerate(env) if old.partition("=")[0] == key]
        if found:
            env[found[-1] if replace_last else found[0]] = entry
        else:
            env.append(entry)


def add_device_rules(doc: dict[str, Any], rules: Iterable[Any], *, path: str | None = None) -> None:
    """Append device cgroup rules to ``linux.resources.devices`` of the OCI document
    ``doc`` (objects and list made when absent), each once: an existing equal entry is not
    repeated.

    Each of ``rules`` has ``allow`` (bool), ``type`` (``"c"``, ``"b"``, ``"a"``),
    ``major`` and ``minor`` (int, or ``None`` for any) and ``access`` (a subset of
    ``"rwm"``), as :class:`ocihook.plan.edits.CgroupRule`; it becomes the runtime-spec
    entry ``{"allow", "type", "major", "minor", "access"}`` (``config-linux.md``, "Allowed
    Device List"), ``major``/``minor`` left out when ``None`` (any).

    Raises:
        SpecError: ``linux``, ``linux.resources`` or its ``devices`` of the wrong JSON type
            (``path`` = ``path``).
    """
    linux = child_object(doc, "linux", path=path, field="linux")
    resources = child_object(linux, "resources", path=path, field="linux.resources")
    entries = child_list(resources, "devices", path=path, field="linux.resources.devices")
    for r in rules:
        entry: dict[str, Any] = {"allow": r.allow, "type": r.type, "access": r.access}
        if r.major is not None:
            entry["major"] = r.major
        if r.minor is not None:
            entry["minor"] = r.minor
        if entry not in entries:
            entries.append(entry)


def copy_json(value: Any) -> Any:
    """A deep copy of JSON data (what :func:`copy.deepcopy` gives for it, without
    importing :mod:`copy` on the container start path): a round trip through the C JSON
    encoder and decoder, which handles nesting as deep as :func:`json.loads` accepted.

    Raises:
        SpecError: data nested too deep to copy (``RecursionError``).
    """
    from ..core import jsonfast

    try:
        return jsonfast.loads(jsonfast.dumps(value))
    except RecursionError:
        raise SpecError("config.json is nested too deeply") from None
