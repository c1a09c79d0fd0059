"""CRI-O: ``crio.conf`` and its drop-ins read (:func:`read_crio`), and a drop-in
configured (:func:`configure_crio`): ``[crio.runtime.runtimes.<name>]`` (``runtime_path``,
``runtime_type``), ``crio.runtime.default_runtime`` and ``crio.runtime.cdi_spec_dirs``
(crio.conf(5)).
"""

from __future__ import annotations

import os

from .common import (
    CDI_SPEC_DIRS,
    RUNTIME_NAME,
    EngineConfig,
    Registration,
    decode_text,
    load_toml_file,
    replaced_runtime_note,
    table_value,
    under_root,
)
from .tomledit import (
    check_toml,
    edit_error,
    parse_toml,
    set_key,
    sub_table,
    unchanged_meaning,
)

__all__ = [
    "CONFIG_PATH",
    "CRIO_HEADER",
    "DEFAULT_PATH",
    "DROP_IN_DIR",
    "configure_crio",
    "read_crio",
]

#: CRI-O's main configuration file.
CONFIG_PATH = "/etc/crio/crio.conf"
#: The drop-in directory: its ``*.conf`` files are read after the main file, in name
#: order, each overriding what it sets (crio.conf.d(5)).
DROP_IN_DIR = "/etc/crio/crio.conf.d"
#: The drop-in ``ocihook runtime configure --runtime crio`` writes.
DEFAULT_PATH = "/etc/crio/crio.conf.d/99-ocihook.conf"

CRIO_HEADER = (
    "# CRI-O drop-in written by `ocihook runtime configure --runtime crio`:\n"
    "# ocihook-runtime as an OCI runtime (see crio.conf(5), [crio.runtime.runtimes]).\n"
)


def configure_crio(
    before: bytes | None,
    *,
    path: str,
    runtime_path: str,
    set_as_default: bool = False,
    cdi: bool = False,
    runtime_name: str = RUNTIME_NAME,
) -> tuple[bytes, tuple[str, ...]]:
    """A CRI-O drop-in (``crio.conf.d``) with ``[crio.runtime.runtimes.ocihook]``
    (``runtime_path``, ``runtime_type = "oci"``), ``default_runtime`` with
    ``set_as_default``, ``cdi_spec_dirs`` with ``cdi`` (crio.conf(5)); ``runtime_name``
    replaces ``ocihook`` as the runtime's name. An existing
    drop-in is edited, its other settings and comments kept.

    Returns:
        ``(after, notes)``.

    Raises:
        EngineConfigError: not TOML, a table ocihook writes into is not a table, or a
            layout tomlkit cannot edit faithfully (:func:`check_toml`).
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    text = decode_text(before, path)
    doc_text = text if text.strip() else CRIO_HEADER
    doc = parse_toml(doc_text, path)
    base = ("crio", "runtime")
    wrote: dict[tuple[str, ...], object] = {}
    old = table_value(doc, "crio", "runtime", "runtimes", runtime_name, "runtime_path")
    replaced = replaced_runtime_note(runtime_name, old, runtime_path)
    try:
        crio = sub_table(doc, "crio", path=path, field="crio")
        runtime = sub_table(crio, "runtime", path=path, field="crio.runtime")
        runtimes = sub_table(runtime, "runtimes", path=path, field="crio.runtime.runtimes")
        field = f"crio.runtime.runtimes.{runtime_name}"
        entry = sub_table(runtimes, runtime_name, path=path, field=field, super_table=False)
        set_key(entry, "runtime_path", runtime_path)
        wrote[(*base, "runtimes", runtime_name, "runtime_path")] = runtime_path
        if "runtime_type" not in entry:
            set_key(entry, "runtime_type", "oci")
            wrote[(*base, "runtimes", runtime_name, "runtime_type")] = "oci"
        if set_as_default:
            set_key(runtime, "default_runtime", runtime_name)
            wrote[(*base, "default_runtime")] = runtime_name
        if cdi and "cdi_spec_dirs" not in runtime:
            set_key(runtime, "cdi_spec_dirs", list(CDI_SPEC_DIRS))
            wrote[(*base, "cdi_spec_dirs")] = list(CDI_SPEC_DIRS)
        after = tomlkit.dumps(doc).encode()
    except (ValueError, TOMLKitError) as e:
        raise edit_error(e, path) from None
    if after == before:
        return after, ()
    if before is not None and unchanged_meaning(text, after.decode()):
        # configured already: the file's own bytes, not tomlkit's rendering of them
        return before, ()
    check_toml(doc_text, after.decode(), wrote, path=path)
    return after, (*replaced, "restart CRI-O to apply (systemctl restart crio)")


def read_crio(root: str = "/") -> EngineConfig:
    """The runtimes ``crio.conf`` and its drop-ins (under ``root``) register, later files
    winning, and the default runtime (``crio.runtime.default_runtime``, else ``crun``).

    Raises:
        EngineConfigError: a file is not valid TOML.
    """
    import glob

    files = [under_root(root, CONFIG_PATH)]
    files += sorted(glob.glob(os.path.join(under_root(root, DROP_IN_DIR), "*.conf")))
    runtimes: dict[str, tuple[str, str]] = {}
    default = "crun"
    read = []
    for name in files:
        d = load_toml_file(name)
        if d is None:
            continue
        read.append(name)
        section = (d.get("crio") or {}).get("runtime") or {}
        default = section.get("default_runtime", default)
        for rname, entry in (section.get("runtimes") or {}).items():
            if isinstance(entry, dict) and isinstance(entry.get("runtime_path"), str):
                runtimes[rname] = (name, entry["runtime_path"])
    if not read:
        return EngineConfig("crio")
    out = [Registration("crio", f, n, p, default=n == default) for n, (f, p) in runtimes.items()]
    facts = {
        "files": read,
        "defaultRuntime": default,
        "runtimes": {r.name: r.path for r in out},
    }
    return EngineConfig("crio", tuple(read), tuple(out), facts)
