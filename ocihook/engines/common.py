"""``ocihook runtime configure``: register ocihook with a container engine by editing its
configuration file, as ``nvidia-ctk runtime configure`` does for the NVIDIA toolkit.

=============  ==========================================  ===================================
engine         file (``--config``)                         what is written
=============  ==========================================  ===================================
docker         ``/etc/docker/daemon.json``                 ``runtimes.ocihook.path`` = the
                                                           wrapper; ``default-runtime``
                                                           (``--set-as-default``);
                                                           ``features.cdi`` (``--cdi``)
containerd     ``/etc/containerd/config.toml``             a CRI runtime ``ocihook``
                                                           (``runtime_type``
                                                           ``io.containerd.runc.v2``,
                                                           ``options.BinaryName`` = the
                                                           wrapper; other settings copied
                                                           from the ``runc`` runtime when it
                                                           is configured, else a ``runc``
                                                           entry is added too: the file's
                                                           ``runtimes`` table replaces
                                                           containerd's built-in one);
                                                           ``default_runtime_name``
                                                           (``--set-as-default``);
                                                           ``enable_cdi``, ``cdi_spec_dirs``
                                                           (``--cdi``). Config versions 2
                                                           (containerd 1.x, plugin
                                                           ``io.containerd.grpc.v1.cri``) and
                                                           3 (2.x, ``io.containerd.cri.v1.
                                                           runtime``); comments and layout
                                                           kept (tomlkit)
crio           ``/etc/crio/crio.conf.d/99-ocihook.conf``   ``crio.runtime.runtimes.ocihook``
                                                           (``runtime_path`` = the wrapper,
                                                           ``runtime_type = "oci"``);
                                                           ``crio.runtime.default_runtime``
                                                           (``--set-as-default``);
                                                           ``crio.runtime.cdi_spec_dirs``
                                                           (``--cdi``; CRI-O always reads CDI)
podman         ``/usr/share/containers/oci/hooks.d/        the hooks.d 1.0.0 file of
               ocihook-prestart.json``                     ``packaging/hooks.d/ocihook-
                                                           prestart.json.in`` with this
                                                           interpreter, and beside it
                                                           ``ocihook-poststop.json``
                                                           (:func:`configure_all`; CRI-O
                                                           reads the same directory)
=============  ==========================================  ===================================

An existing file that says the same already is left byte-identical. A file that is not
valid JSON (RFC 8259: no ``NaN``) / TOML, or has a value of the wrong type where ocihook
writes, is refused with :class:`~ocihook.core.errors.EngineConfigError` (exit 13) and left
untouched; so is a TOML layout tomlkit cannot edit faithfully (tables written with dotted
keys or inline on the path ocihook writes: every TOML edit is read back with
:mod:`tomllib` and must differ from the file only by what ocihook meant to write), and a
containerd file whose ``imports`` bring in a file that configures the CRI plugin (that
file would override the registration: it is the one to configure). Writes are atomic
and keep the file's mode (:func:`ocihook.oci.bundle.write_bytes_atomic`).

:mod:`tomlkit` is imported only here, only for TOML files.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from ..core.errors import EngineConfigError
from ..core.records import Record

__all__ = [
    "CDI_SPEC_DIRS",
    "CONTAINERD_PLUGINS",
    "DEFAULT_PATHS",
    "ENGINES",
    "HOOKS_D_STAGES",
    "RUNTIME_NAME",
    "Change",
    "configure",
    "configure_all",
    "configure_containerd",
    "configure_crio",
    "configure_docker",
    "configure_hooks_d",
    "default_runtime_path",
    "describe",
    "hooks_d_document",
    "poststop_path",
    "write_change",
]

ENGINES = ("docker", "containerd", "crio", "podman")
#: The file each engine's configuration is written to when ``--config`` is not given.
DEFAULT_PATHS = {
    "docker": "/etc/docker/daemon.json",
    "containerd": "/etc/containerd/config.toml",
    "crio": "/etc/crio/crio.conf.d/99-ocihook.conf",
    "podman": "/usr/share/containers/oci/hooks.d/ocihook-prestart.json",
}
#: The name of the runtime entry ocihook adds.
RUNTIME_NAME = "ocihook"
#: CDI spec directories written with ``--cdi`` (CDI ``SPEC.md``'s defaults).
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
#: containerd config version -> the CRI plugin that holds runtimes and the CDI switch
#: (containerd ``docs/cri/config.md``).
CONTAINERD_PLUGINS = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
#: The runtime shim the ``ocihook`` entry uses (containerd's runc shim, which runs
#: ``options.BinaryName`` instead of ``runc``).
CONTAINERD_RUNTIME_TYPE = "io.containerd.runc.v2"


class Change(Record):
    """What ``configure`` would do to one file.

    Attributes:
        engine: ``docker``, ``containerd``, ``crio`` or ``podman``.
        path: the file.
        before: its bytes, or ``None`` when it does not exist.
        after: its new bytes (equal to ``before`` when it is configured already).
        notes: things the user should know (a disabled CRI plugin, what to restart).
    """

    engine: str
    path: str
    before: bytes | None
    after: bytes
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether the file has to be written."""
        return self.before != self.after

    def diff(self) -> str:
        """A unified diff from the old file (or ``/dev/null``) to the new one."""
        import difflib

        old = (self.before or b"").decode(errors="replace").splitlines(keepends=True)
        new = self.after.decode(errors="replace").splitlines(keepends=True)
        return "".join(
            difflib.unified_diff(
                old,
                new,
                fromfile=self.path if self.before is not None else "/dev/null",
                tofile=self.path,
            )
        )


def default_runtime_path() -> str:
    """The absolute path of this installation's ``ocihook-runtime``: beside the
    interpreter (a virtual environment's ``bin/``), else the first on ``PATH``.

    Raises:
        EngineConfigError: not found (pass ``--runtime-path``).
    """
    import shutil

    beside = os.path.join(os.path.dirname(sys.executable), "ocihook-runtime")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("ocihook-runtime")
    if found:
        return os.path.abspath(found)
    raise EngineConfigError(
        "ocihook-runtime not found beside the interpreter or on PATH",
        hint="install ocihook (pip install installs the ocihook-runtime script) or pass "
        "--runtime-path",
    )


def _text(before: bytes | None, path: str) -> str:
    if before is None:
        return ""
    try:
        return before.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EngineConfigError(f"not UTF-8 text at byte offset {e.start}", path=path) from None


def _load_json(text: str, path: str) -> Any:
    """``text`` as JSON (RFC 8259: ``NaN``, ``Infinity`` and ``-Infinity``, which Python's
    :mod:`json` accepts and Go's ``encoding/json`` refuses, are errors).

    Raises:
        EngineConfigError: not valid JSON.
    """

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON value")

    try:
        return json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as e:
        raise EngineConfigError(
            f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}", path=path
        ) from None
    except ValueError as e:
        raise EngineConfigError(f"not valid JSON: {e}", path=path) from None


# --- Docker -------------------------------------------------------------------------


def configure_docker(
    before: bytes | None,
    *,
    path: str,
    runtime_path: str,
    set_as_default: bool = False,
    cdi: bool = False,
) -> tuple[bytes, tuple[str, ...]]:
    """Docker's ``daemon.json`` with ocihook's runtime: ``runtimes.ocihook.path`` (other
    keys of an existing entry, such as ``runtimeArgs``, kept), ``default-runtime`` with
    ``set_as_default``, ``features.cdi = true`` with ``cdi`` (dockerd's ``daemon.json``
    keys). Written with 4-space indents, keys in their order; an unchanged document keeps
    the file's bytes.

    Returns:
        ``(after, notes)``.

    Raises:
        EngineConfigError: not JSON, not an object, or ``runtimes``/``features``/the
            entry not objects.
    """
    text = _text(before, path)
    doc = _load_json(text, path) if text.strip() else {}
    if not isinstance(doc, dict):
        raise EngineConfigError("daemon.json must hold a JSON object", path=path)
    new = json.loads(json.dumps(doc))

    def obj(parent: dict[str, Any], key: str, field: str) -> dict[str, Any]:
        value = parent.setdefault(key, {})
        if not isinstance(value, dict):
            raise EngineConfigError(f"{field} must be an object", path=path, field=field)
        return value

    entry = obj(obj(new, "runtimes", "runtimes"), RUNTIME_NAME, f"runtimes.{RUNTIME_NAME}")
    entry["path"] = runtime_path
    if set_as_default:
        new["default-runtime"] = RUNTIME_NAME
    if cdi:
        obj(new, "features", "features")["cdi"] = True
    # compared as JSON text: in Python 1 == True, but dockerd's features map holds booleans
    if json.dumps(new, sort_keys=True) == json.dumps(doc, sort_keys=True) and before is not None:
        return before, ()
    notes = ("restart dockerd to apply (systemctl restart docker)",)
    return (json.dumps(new, indent=4) + "\n").encode(), notes


# --- TOML helpers (tomlkit) ----------------------------------------------------------


def _parse_toml(text: str, path: str) -> Any:
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        return tomlkit.parse(text)
    except (TOMLKitError, ValueError) as e:  # ValueError: an integer int() refuses
        raise EngineConfigError(f"not valid TOML: {e}", path=path) from None


def _table(parent: Any, key: str, *, path: str, field: str, super_table: bool = True) -> Any:
    """``parent[key]`` as a table, created when missing (a super table: written only as
    the dotted header of its sub-tables)."""
    import tomlkit
    from tomlkit.items import InlineTable, Table

    if key not in parent:
        parent[key] = tomlkit.table(is_super_table=super_table)
    value = parent[key]
    if not isinstance(value, Table | InlineTable | dict):
        raise EngineConfigError(f"{field} must be a table", path=path, field=field)
    return value


def _key_indent(table: Any) -> str:
    """The indentation of the first plain key of a tomlkit table (``""`` if none, or for
    a table defined in several out-of-order parts, which tomlkit gives as a proxy)."""
    from tomlkit.items import Table

    for key, item in getattr(getattr(table, "value", table), "body", ()):
        if key is not None and not isinstance(item, Table) and hasattr(item, "trivia"):
            return str(item.trivia.indent)
    return ""


def _set(table: Any, key: str, value: object) -> None:
    """Set ``table[key]`` only when it differs, so an unchanged file keeps its bytes; a
    new key is indented as the table's other keys."""
    current = table.get(key)
    plain = current.unwrap() if hasattr(current, "unwrap") else current
    if key in table and plain == value and type(plain) is type(value):
        return
    indent = _key_indent(table)
    table[key] = value
    container = getattr(table, "value", table)
    if current is None and hasattr(container, "item"):
        item = container.item(key)
        if hasattr(item, "trivia"):
            item.trivia.indent = indent


def _strip(doc: dict[str, Any], paths: list[tuple[str, ...]]) -> None:
    """Remove each path of ``paths`` from ``doc`` (plain dicts), and the tables on the
    way that are left empty by it."""
    for keys in paths:
        chain = [doc]
        for key in keys[:-1]:
            sub = chain[-1].get(key)
            if not isinstance(sub, dict):
                break
            chain.append(sub)
        else:
            chain[-1].pop(keys[-1], None)
            for parent, key in zip(reversed(chain[:-1]), reversed(keys[:-1]), strict=True):
                if parent.get(key) == {}:
                    del parent[key]


def _check_toml(
    before: str, after: str, wrote: dict[tuple[str, ...], object], *, path: str
) -> None:
    """Check the edit tomlkit made: ``after`` read by a strict TOML reader (:mod:`tomllib`)
    holds each value of ``wrote`` (path of keys -> plain value) and, apart from those
    paths, the same as ``before``. tomlkit keeps layout but can misplace what it adds to
    some valid layouts (a table written with dotted keys, tables out of order): such a
    file is refused rather than written wrong.

    Raises:
        EngineConfigError: ``before`` is not TOML for tomllib, or the edit is not as
            meant.
    """
    import tomllib

    try:
        old = tomllib.loads(before)
    except tomllib.TOMLDecodeError as e:
        raise EngineConfigError(f"not valid TOML: {e}", path=path) from None
    try:
        new = tomllib.loads(after)
    except tomllib.TOMLDecodeError:
        new = None
    ok = new is not None
    for keys, value in wrote.items():
        got: Any = new
        for key in keys:
            got = got.get(key) if isinstance(got, dict) else None
        ok = ok and _same(got, value)
    if ok and new is not None:
        _strip(old, list(wrote))
        _strip(new, list(wrote))
        ok = _same(old, new)
    if not ok:
        raise EngineConfigError(
            "cannot edit this layout of TOML and keep its meaning (tables written with "
            "dotted keys or inline, or defined in parts)",
            path=path,
            field=".".join(
                k if k.replace("_", "").isalnum() else f'"{k}"' for k in next(iter(wrote))
            )
            if wrote
            else None,
            hint="write the tables ocihook edits with [table] headers, each in one place, "
            "or add the runtime by hand (see ocihook runtime configure --dry-run on an "
            "empty file)",
        )


def _canonical(value: Any) -> Any:
    """``value`` (tomllib output) for comparing meanings: NaN made equal to NaN, dates and
    times as their text, containers recursively. Integers stay integers: comparing them
    needs no conversion to text, which :func:`int` refuses past 4300 digits."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and value != value:
        return ("nan",)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)  # datetime, date, time


def _same(a: Any, b: Any) -> bool:
    """Whether two parsed TOML values mean the same (:func:`_canonical`)."""
    return bool(_canonical(a) == _canonical(b))


def _edit_error(e: Exception, path: str) -> EngineConfigError:
    """A tomlkit error raised while editing (such as ``Inline tables cannot contain a
    table``) as the file's error (exit 13), not a usage error."""
    return EngineConfigError(f"cannot edit this TOML layout: {e}", path=path)


def _style_like(new: Any, like: Any) -> None:
    """Indent a table ocihook added (its header, keys and sub-tables) as ``like``, a
    sibling table of the same shape (containerd's ``runc`` runtime)."""
    from tomlkit.items import Table

    new.trivia.indent = like.trivia.indent
    indent = _key_indent(like)
    for key, item in new.value.body:
        if key is None:
            continue
        if isinstance(item, Table):
            sub = like.get(key.key)
            if isinstance(sub, Table):
                _style_like(item, sub)
        elif hasattr(item, "trivia"):
            item.trivia.indent = indent


# --- containerd ------------------------------------------------------------------------


def _edit_containerd(
    doc: Any,
    plugin: str,
    *,
    path: str,
    runtime_path: str,
    set_as_default: bool,
    cdi: bool,
) -> dict[tuple[str, ...], object]:
    """Edit ``doc`` (tomlkit) for :func:`configure_containerd`; returns what was written
    (path of keys -> plain value) for :func:`_check_toml`."""
    import tomlkit

    where = f'plugins."{plugin}"'
    base = ("plugins", plugin, "containerd", "runtimes")
    wrote: dict[tuple[str, ...], object] = {}
    plugins = _table(doc, "plugins", path=path, field="plugins")
    cri = _table(plugins, plugin, path=path, field=where)
    runtimes_parent = _table(cri, "containerd", path=path, field=f"{where}.containerd")
    runtimes = _table(runtimes_parent, "runtimes", path=path, field=f"{where}.containerd.runtimes")
    field = f"{where}.containerd.runtimes.{RUNTIME_NAME}"
    if RUNTIME_NAME in runtimes:
        entry = _table(runtimes, RUNTIME_NAME, path=path, field=field)
        if "runtime_type" not in entry:
            _set(entry, "runtime_type", CONTAINERD_RUNTIME_TYPE)
            wrote[(*base, RUNTIME_NAME, "runtime_type")] = CONTAINERD_RUNTIME_TYPE
        options = _table(entry, "options", path=path, field=f"{field}.options", super_table=False)
        _set(options, "BinaryName", runtime_path)
        wrote[(*base, RUNTIME_NAME, "options", "BinaryName")] = runtime_path
    else:
        # runc's settings (SystemdCgroup, runtime_root...) carry over, as a runtime that
        # differs from runc only by its binary; zero values are containerd's defaults
        runc_field = f"{where}.containerd.runtimes.runc"
        runc = _table(runtimes, "runc", path=path, field=runc_field) if "runc" in runtimes else None
        if runc is None:
            # a runtimes table in the file replaces containerd's built-in one (which holds
            # runc, the default runtime): keep runc usable
            default = tomlkit.table()
            default["runtime_type"] = CONTAINERD_RUNTIME_TYPE
            default.add(tomlkit.nl())
            runtimes["runc"] = default
            wrote[(*base, "runc")] = {"runtime_type": CONTAINERD_RUNTIME_TYPE}
        plain: dict[str, Any] = runc.unwrap() if runc is not None else {}
        old_options = plain.get("options", {})
        if not isinstance(old_options, dict):
            raise EngineConfigError(
                f"{runc_field}.options must be a table", path=path, field=f"{runc_field}.options"
            )
        entry = tomlkit.table()
        entry["runtime_type"] = CONTAINERD_RUNTIME_TYPE
        for key, value in plain.items():
            if key not in ("options", "runtime_type", "runtime_path") and value:
                entry[key] = value
        options = tomlkit.table()
        options["BinaryName"] = runtime_path
        for key, value in old_options.items():
            if key != "BinaryName" and value:
                options[key] = value
        options.add(tomlkit.nl())
        entry.add(tomlkit.nl())
        entry["options"] = options
        wrote[(*base, RUNTIME_NAME)] = entry.unwrap()
        runtimes[RUNTIME_NAME] = entry
        if runc is not None and hasattr(runc, "trivia"):
            _style_like(runtimes[RUNTIME_NAME], runc)
    if set_as_default:
        _set(runtimes_parent, "default_runtime_name", RUNTIME_NAME)
        wrote[("plugins", plugin, "containerd", "default_runtime_name")] = RUNTIME_NAME
    if cdi:
        _set(cri, "enable_cdi", True)
        wrote[("plugins", plugin, "enable_cdi")] = True
        if "cdi_spec_dirs" not in cri:
            _set(cri, "cdi_spec_dirs", list(CDI_SPEC_DIRS))
            wrote[("plugins", plugin, "cdi_spec_dirs")] = list(CDI_SPEC_DIRS)
    return wrote


def _containerd_imports(doc: Any, path: str, base: str | None = None) -> tuple[str, ...]:
    """Check the files ``doc``'s ``imports`` names (containerd resolves a relative one
    against the directory of ``path`` and expands ``*`` patterns, in sorted order:
    ``services/server/config`` ``resolveImports``; ``base``, when given, is that
    directory: the one of the path containerd was given, which for a linked config file
    is not its target's). An imported file is read after the
    main one and its plugin tables win (containerd 1.x replaces a plugin's table by the
    imported one, 2.x merges them key by key), so a registration written in the main
    file is undone by an imported file that configures the CRI plugin.

    Returns:
        notes: the imports that exist but do not configure the CRI plugin now.

    Raises:
        EngineConfigError: ``imports`` is not a list of strings, or an imported file
            configures the CRI plugin (it is to be configured instead).
    """
    import glob
    import tomllib

    imports = doc.get("imports")
    if imports is None:
        return ()
    imports = imports.unwrap() if hasattr(imports, "unwrap") else imports
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise EngineConfigError("imports must be a list of strings", path=path, field="imports")
    if not imports:
        return ()
    if any("\0" in i for i in imports):
        raise EngineConfigError(
            "an import names a file with a NUL byte", path=path, field="imports"
        )
    files: list[str] = []
    for pattern in imports:
        full = os.path.join(base or os.path.dirname(path), pattern)
        files.extend(sorted(glob.glob(full)) if "*" in full else [full])
    for name in files:
        try:
            if os.path.samefile(name, path):
                continue  # containerd does not load a file twice
        except OSError:
            pass
        raw = _read(name)
        try:
            imported = tomllib.loads(_text(raw, name)) if raw else {}
        except tomllib.TOMLDecodeError:
            continue  # containerd refuses it: nothing of it wins
        plugins = imported.get("plugins")
        cri = [p for p in CONTAINERD_PLUGINS.values() if isinstance(plugins, dict) and p in plugins]
        if cri:
            raise EngineConfigError(
                f"the imported file {name} configures the CRI plugin ({cri[0]}) and overrides "
                "this file's runtimes",
                path=path,
                field="imports",
                hint=f"register ocihook in the imported file: ocihook runtime configure "
                f"--runtime containerd --config {name}",
            )
    return (
        f"this file imports {', '.join(imports)}: a file there that configures the CRI "
        "plugin would override this registration",
    )


def configure_containerd(
    before: bytes | None,
    *,
    path: str,
    runtime_path: str,
    set_as_default: bool = False,
    cdi: bool = False,
    import_base: str | None = None,
) -> tuple[bytes, tuple[str, ...]]:
    """containerd's ``config.toml`` with a CRI runtime ``ocihook`` (see the module
    docstring), comments and layout of the rest kept. ``import_base``: the directory
    relative ``imports`` are resolved against (default ``path``'s; for a linked file, the
    link's, as containerd does). A missing or empty file becomes a
    version 2 file (containerd 1.x; 2.x reads it too). A file without ``version`` and
    without ``plugins`` gets ``version = 2``.

    Returns:
        ``(after, notes)``.

    Raises:
        EngineConfigError: not TOML; config version 1 (no ``version`` but ``plugins``) or
            unknown; a table ocihook writes into is not a table; an imported file
            configures the CRI plugin (:func:`_containerd_imports`); a layout tomlkit
            cannot edit faithfully (:func:`_check_toml`).
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    text = _text(before, path)
    doc_text = text
    doc = _parse_toml(text, path)
    version = doc.get("version")
    if hasattr(version, "unwrap"):
        version = version.unwrap()
    if version is None:
        if "plugins" in doc:
            raise EngineConfigError(
                "containerd config version 1 (no version key) is not edited",
                path=path,
                field="version",
                hint="convert it to version 2 (containerd config migrate, or add version = 2 "
                'and the full plugin names such as plugins."io.containerd.grpc.v1.cri")',
            )
        doc_text = "version = 2\n" + ("\n" + text if text.strip() else "")
        doc = _parse_toml(doc_text, path)
        version = 2
    plugin = CONTAINERD_PLUGINS.get(version) if type(version) is int else None
    if plugin is None:
        raise EngineConfigError(
            "unsupported containerd config version",
            path=path,
            field="version",
            value=version,
            hint="ocihook edits versions 2 (containerd 1.x) and 3 (containerd 2.x)",
        )
    import_notes = _containerd_imports(doc, path, import_base)
    try:
        wrote = _edit_containerd(
            doc,
            plugin,
            path=path,
            runtime_path=runtime_path,
            set_as_default=set_as_default,
            cdi=cdi,
        )
        after = tomlkit.dumps(doc).encode()
    except (ValueError, TOMLKitError) as e:
        raise _edit_error(e, path) from None
    if after == before:
        return after, ()
    _check_toml(doc_text, after.decode(), wrote, path=path)
    notes = [*import_notes, "restart containerd to apply (systemctl restart containerd)"]
    disabled = doc.get("disabled_plugins") or []
    if any(p in (plugin, "cri") for p in disabled):
        notes.insert(
            0,
            f"the CRI plugin is disabled (disabled_plugins): the {RUNTIME_NAME} runtime is "
            "for CRI clients (kubelet, crictl, nerdctl); ctr can use the wrapper with "
            "--runc-binary",
        )
    return after, tuple(notes)


# --- CRI-O ------------------------------------------------------------------------------

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
) -> tuple[bytes, tuple[str, ...]]:
    """A CRI-O drop-in (``crio.conf.d``) with ``[crio.runtime.runtimes.ocihook]``
    (``runtime_path``, ``runtime_type = "oci"``), ``default_runtime`` with
    ``set_as_default``, ``cdi_spec_dirs`` with ``cdi`` (crio.conf(5)). An existing
    drop-in is edited, its other settings and comments kept.

    Returns:
        ``(after, notes)``.

    Raises:
        EngineConfigError: not TOML, a table ocihook writes into is not a table, or a
            layout tomlkit cannot edit faithfully (:func:`_check_toml`).
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    text = _text(before, path)
    doc_text = text if text.strip() else CRIO_HEADER
    doc = _parse_toml(doc_text, path)
    base = ("crio", "runtime")
    wrote: dict[tuple[str, ...], object] = {}
    try:
        crio = _table(doc, "crio", path=path, field="crio")
        runtime = _table(crio, "runtime", path=path, field="crio.runtime")
        runtimes = _table(runtime, "runtimes", path=path, field="crio.runtime.runtimes")
        field = f"crio.runtime.runtimes.{RUNTIME_NAME}"
        entry = _table(runtimes, RUNTIME_NAME, path=path, field=field, super_table=False)
        _set(entry, "runtime_path", runtime_path)
        wrote[(*base, "runtimes", RUNTIME_NAME, "runtime_path")] = runtime_path
        if "runtime_type" not in entry:
            _set(entry, "runtime_type", "oci")
            wrote[(*base, "runtimes", RUNTIME_NAME, "runtime_type")] = "oci"
        if set_as_default:
            _set(runtime, "default_runtime", RUNTIME_NAME)
            wrote[(*base, "default_runtime")] = RUNTIME_NAME
        if cdi and "cdi_spec_dirs" not in runtime:
            _set(runtime, "cdi_spec_dirs", list(CDI_SPEC_DIRS))
            wrote[(*base, "cdi_spec_dirs")] = list(CDI_SPEC_DIRS)
        after = tomlkit.dumps(doc).encode()
    except (ValueError, TOMLKitError) as e:
        raise _edit_error(e, path) from None
    if after == before:
        return after, ()
    _check_toml(doc_text, after.decode(), wrote, path=path)
    return after, ("restart CRI-O to apply (systemctl restart crio)",)


# --- podman / CRI-O hooks.d ----------------------------------------------------------


#: The OCI stages ocihook registers in hooks.d, one file each (a hooks.d 1.0.0 file has one
#: hook, run at each of its ``stages``): the injection, and the removal of what it made in
#: the rootfs (:mod:`ocihook.appliers.live.leftovers`).
HOOKS_D_STAGES = ("prestart", "poststop")


def hooks_d_document(python: str | None = None, stage: str = "prestart") -> dict[str, Any]:
    """The hooks.d 1.0.0 document of ``packaging/hooks.d/ocihook-<stage>.json.in`` with
    ``@PYTHON@`` = ``python`` (default: this interpreter): ``ocihook hook <stage>`` run
    for every container (``when.always``; it exits at once for those that ask for no
    GPU, or, at ``poststop``, have no record of what hook mode made), with ``-I``, an
    explicit ``env`` and a timeout (containers/common ``pkg/hooks/docs/oci-hooks.5.md``).

    Raises:
        ValueError: ``stage`` is not one of :data:`HOOKS_D_STAGES`.
    """
    from ..settings import HOOK_ENV, HOOK_PROGRAM, HOOK_TIMEOUT

    if stage not in HOOKS_D_STAGES:
        raise ValueError(f"no hooks.d file for stage {stage!r}")
    python = python or sys.executable
    return {
        "version": "1.0.0",
        "hook": {
            "path": python,
            "args": [python, "-I", "-c", HOOK_PROGRAM, "hook", stage],
            "env": list(HOOK_ENV),
            "timeout": HOOK_TIMEOUT,
        },
        "when": {"always": True},
        "stages": [stage],
    }


def configure_hooks_d(
    before: bytes | None, *, path: str, python: str | None = None, stage: str = "prestart"
) -> tuple[bytes, tuple[str, ...]]:
    """The hooks.d file of ``stage`` (:func:`hooks_d_document`). An existing file holding
    the same document keeps its bytes; another valid JSON document is replaced.

    Raises:
        EngineConfigError: the existing file is not JSON.
    """
    want = hooks_d_document(python, stage)
    text = _text(before, path)
    if text.strip():
        doc = _load_json(text, path)
        if json.dumps(doc, sort_keys=True) == json.dumps(want, sort_keys=True) and before:
            return before, ()
    notes = (
        "podman reads hooks.d at each start; CRI-O reads the directory when it starts "
        "(its hooks_dir); the hook path must exist",
    )
    return (json.dumps(want, indent=2) + "\n").encode(), notes


def poststop_path(prestart: str) -> str:
    """Where the poststop hooks.d file goes beside the prestart one at ``prestart``: its
    name with ``prestart`` replaced by ``poststop`` (``ocihook-prestart.json`` ->
    ``ocihook-poststop.json``), or ``-poststop`` added before the extension
    (``gpu.json`` -> ``gpu-poststop.json``)."""
    directory, name = os.path.split(prestart)
    if "prestart" in name:
        head, _, tail = name.rpartition("prestart")
        return os.path.join(directory, f"{head}poststop{tail}")
    stem, ext = os.path.splitext(name)
    return os.path.join(directory, f"{stem}-poststop{ext}")


# --- the command -----------------------------------------------------------------------


def _read(path: str) -> bytes | None:
    """A regular file's bytes, ``None`` when it does not exist.

    Raises:
        EngineConfigError: unreadable, or not a regular file.
    """
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise EngineConfigError(f"cannot open: {e.strerror}", path=path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise EngineConfigError("not a regular file", path=path)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError as e:
        raise EngineConfigError(f"cannot read: {e.strerror}", path=path) from None
    finally:
        os.close(fd)


def configure(
    engine: str,
    *,
    path: str | None = None,
    runtime_path: str | None = None,
    set_as_default: bool = False,
    cdi: bool = False,
    python: str | None = None,
) -> Change:
    """Compute the change ``ocihook runtime configure`` makes to ``engine``'s file;
    nothing is written (:func:`write_change` does).

    Args:
        engine: one of :data:`ENGINES`.
        path: the file (default :data:`DEFAULT_PATHS`; a symbolic link: its target);
            for ``podman`` an existing directory means ``ocihook-prestart.json`` inside it.
        runtime_path: the wrapper's absolute path (default :func:`default_runtime_path`).
        set_as_default: make ocihook the engine's default runtime (docker, containerd,
            crio).
        cdi: enable CDI in the engine (docker, containerd, crio).
        python: the hook's interpreter for ``podman`` (default this one).

    Raises:
        EngineConfigError: the existing file is unreadable or malformed (it is left as it
            was), or the wrapper is not found.
        ValueError: an unknown engine, or ``set_as_default`` for podman.
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}")
    # a link (a config kept elsewhere) is followed: its target is edited, the link stays
    given = os.path.abspath(path or DEFAULT_PATHS[engine])
    path = os.path.realpath(given)
    if engine == "podman":
        if set_as_default:
            raise ValueError(
                "--set-as-default: podman has no runtime entry here; ocihook registers "
                "as a hooks.d hook (to run the wrapper, use podman --runtime ocihook-runtime)"
            )
        if os.path.isdir(path):
            path = os.path.join(path, os.path.basename(DEFAULT_PATHS["podman"]))
        before = _read(path)
        after, notes = configure_hooks_d(before, path=path, python=python)
        if cdi:
            notes = (*notes, "podman reads CDI specs itself: --device nvidia.com/gpu=0")
        return Change(engine, path, before, after, notes)
    runtime_path = os.path.abspath(runtime_path) if runtime_path else default_runtime_path()
    before = _read(path)
    edit = {
        "docker": configure_docker,
        "containerd": configure_containerd,
        "crio": configure_crio,
    }[engine]
    extra = {"import_base": os.path.dirname(given)} if engine == "containerd" else {}
    after, notes = edit(
        before,
        path=path,
        runtime_path=runtime_path,
        set_as_default=set_as_default,
        cdi=cdi,
        **extra,
    )
    return Change(engine, path, before, after, notes)


def configure_all(
    engine: str,
    *,
    path: str | None = None,
    runtime_path: str | None = None,
    set_as_default: bool = False,
    cdi: bool = False,
    python: str | None = None,
) -> tuple[Change, ...]:
    """Every file ``ocihook runtime configure`` changes for ``engine``: the one of
    :func:`configure` (same arguments), and for ``podman`` also the poststop hooks.d file
    beside it (:func:`poststop_path`; ``ocihook hook poststop``, which removes what the
    prestart hook made in a reused rootfs). Nothing is written.

    Raises:
        EngineConfigError: an existing file is unreadable or malformed (:func:`configure`).
        ValueError: as :func:`configure`.
    """
    first = configure(
        engine,
        path=path,
        runtime_path=runtime_path,
        set_as_default=set_as_default,
        cdi=cdi,
        python=python,
    )
    if engine != "podman":
        return (first,)
    other = poststop_path(first.path)
    before = _read(other)
    after, _notes = configure_hooks_d(before, path=other, python=python, stage="poststop")
    return first, Change(engine, other, before, after)


def write_change(change: Change) -> bool:
    """Write ``change.after`` atomically (mode and owner of an existing file kept, a new
    file 0644 in directories created 0755). Returns whether anything was written.

    Raises:
        EngineConfigError: the file or its directory cannot be written (nothing changed).
    """
    from ..oci.bundle import write_bytes_atomic

    if not change.changed:
        return False
    try:
        os.makedirs(os.path.dirname(change.path), mode=0o755, exist_ok=True)
        write_bytes_atomic(change.path, change.after)
    except OSError as e:
        raise EngineConfigError(f"cannot write: {e.strerror}", path=change.path) from None
    return True


def describe(change: Change, *, dry_run: bool = False) -> str:
    """One line saying what happened (or, with ``dry_run``, would happen) to the file."""
    if not change.changed:
        return f"{change.path}: already configured; unchanged"
    done = "updated" if change.before is not None else "created"
    return f"{change.path}: {'would be ' if dry_run else ''}{done}"
