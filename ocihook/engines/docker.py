"""Docker: ``/etc/docker/daemon.json`` read (:func:`read_docker`) and configured
(:func:`configure_docker`): the ``runtimes`` map (name -> ``{"path", "runtimeArgs"}``),
``default-runtime`` and ``features.cdi`` (dockerd's ``daemon.json`` reference).
"""

from __future__ import annotations

import json
from typing import Any

from ..core.errors import EngineConfigError
from .common import (
    RUNTIME_NAME,
    EngineConfig,
    Registration,
    decode_text,
    load_json,
    load_json_file,
    replaced_runtime_note,
    under_root,
)

__all__ = ["DEFAULT_PATH", "configure_docker", "read_docker"]

#: The file dockerd reads (``dockerd --config-file``'s default).
DEFAULT_PATH = "/etc/docker/daemon.json"


def configure_docker(
    before: bytes | None,
    *,
    path: str,
    runtime_path: str,
    set_as_default: bool = False,
    cdi: bool = False,
    runtime_name: str = RUNTIME_NAME,
) -> tuple[bytes, tuple[str, ...]]:
    """Docker's ``daemon.json`` with ocihook's runtime: ``runtimes.ocihook.path`` (other
    keys of an existing entry, such as ``runtimeArgs``, kept), ``default-runtime`` with
    ``set_as_default``, ``features.cdi = true`` with ``cdi`` (dockerd's ``daemon.json``
    keys); ``runtime_name`` replaces ``ocihook`` as the runtime's name. Written with
    4-space indents, keys in their order; an unchanged document keeps the file's bytes.
    An entry of that name that ran another program gets a note
    (:func:`replaced_runtime_note`).

    Returns:
        ``(after, notes)``.

    Raises:
        EngineConfigError: not JSON, not an object, or ``runtimes``/``features``/the
            entry not objects.
    """
    text = decode_text(before, path)
    doc = load_json(text, path) if text.strip() else {}
    if not isinstance(doc, dict):
        raise EngineConfigError("daemon.json must hold a JSON object", path=path)
    new = json.loads(json.dumps(doc))

    def obj(parent: dict[str, Any], key: str, field: str) -> dict[str, Any]:
        value = parent.setdefault(key, {})
        if not isinstance(value, dict):
            raise EngineConfigError(f"{field} must be an object", path=path, field=field)
        return value

    entry = obj(obj(new, "runtimes", "runtimes"), runtime_name, f"runtimes.{runtime_name}")
    replaced = replaced_runtime_note(runtime_name, entry.get("path"), runtime_path)
    entry["path"] = runtime_path
    if set_as_default:
        new["default-runtime"] = runtime_name
    if cdi:
        obj(new, "features", "features")["cdi"] = True
    # compared as JSON text: in Python 1 == True, but dockerd's features map holds booleans
    if json.dumps(new, sort_keys=True) == json.dumps(doc, sort_keys=True) and before is not None:
        return before, ()
    notes = (*replaced, "restart dockerd to apply (systemctl restart docker)")
    return (json.dumps(new, indent=4) + "\n").encode(), notes


def read_docker(root: str = "/") -> EngineConfig:
    """The runtimes ``daemon.json`` under ``root`` registers (an entry without a string
    ``path`` is left out), which is the default (``default-runtime``, else ``runc``), and
    whether CDI is on (``features.cdi``).

    Raises:
        EngineConfigError: not JSON, or not a JSON object.
    """
    path = under_root(root, DEFAULT_PATH)
    doc = load_json_file(path)
    if doc is None:
        return EngineConfig("docker")
    if not isinstance(doc, dict):
        raise EngineConfigError("daemon.json must hold a JSON object", path=path)
    default = doc.get("default-runtime", "runc")
    out = []
    runtimes = doc.get("runtimes") or {}
    for name, entry in runtimes.items() if isinstance(runtimes, dict) else ():
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            out.append(Registration("docker", path, name, entry["path"], default=name == default))
    features = doc.get("features") or {}
    facts = {
        "files": [path],
        "defaultRuntime": default,
        "runtimes": {r.name: r.path for r in out},
        "cdi": bool(features.get("cdi")) if isinstance(features, dict) else False,
    }
    return EngineConfig("docker", (path,), tuple(out), facts)
