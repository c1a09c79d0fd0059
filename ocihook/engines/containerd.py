"""containerd: ``config.toml`` and the files it imports read (:func:`read_containerd`)
and configured (:func:`configure_containerd`): a CRI runtime ``ocihook``
(``runtime_type`` ``io.containerd.runc.v2``, ``options.BinaryName`` = the wrapper; other
settings copied from the ``runc`` runtime when it is configured, else a ``runc`` entry is
added too: the file's ``runtimes`` table replaces containerd's built-in one),
``default_runtime_name`` and ``enable_cdi``/``cdi_spec_dirs``. Config versions 2
(containerd 1.x, plugin ``io.containerd.grpc.v1.cri``) and 3 (2.x,
``io.containerd.cri.v1.runtime``), containerd ``docs/cri/config.md``.

``imports`` are resolved by one function for both (:func:`resolve_imports`, containerd's
``resolveImports``), with Go's ``filepath.Glob`` (:func:`filepath_glob`), and followed
from file to file as containerd's ``LoadConfig`` does (:func:`load_imports`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.errors import EngineConfigError
from .common import (
    CDI_SPEC_DIRS,
    RUNTIME_NAME,
    EngineConfig,
    Registration,
    decode_text,
    load_toml_file,
    read_file,
    replaced_runtime_note,
    table_value,
    under_root,
)
from .tomledit import (
    check_toml,
    edit_error,
    indent_table,
    parse_toml,
    set_key,
    style_like,
    sub_table,
    unchanged_meaning,
)

__all__ = [
    "CONTAINERD_PLUGINS",
    "CONTAINERD_RUNTIME_TYPE",
    "DEFAULT_PATH",
    "MAX_IMPORTS",
    "configure_containerd",
    "filepath_glob",
    "filepath_match",
    "load_imports",
    "read_containerd",
    "resolve_imports",
]

#: The file containerd reads (``containerd --config``'s default).
DEFAULT_PATH = "/etc/containerd/config.toml"
#: containerd config version -> the CRI plugin that holds runtimes and the CDI switch
#: (containerd ``docs/cri/config.md``).
CONTAINERD_PLUGINS = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
#: The runtime shim the ``ocihook`` entry uses (containerd's runc shim, which runs
#: ``options.BinaryName`` instead of ``runc``).
CONTAINERD_RUNTIME_TYPE = "io.containerd.runc.v2"
#: The most files :func:`load_imports` follows (containerd has no bound; a directory
#: linked into itself would make its import chain endless).
MAX_IMPORTS = 256


# --- imports: Go's filepath.Glob and containerd's resolveImports ---------------------------


def _class(pattern: str, i: int) -> tuple[str, int]:
    """The regular expression of the Go character class starting after the ``[`` at
    ``pattern[i - 1]``, and the index after its ``]``.

    Raises:
        ValueError: a malformed class (Go's ``ErrBadPattern``).
    """
    import re

    negated = i < len(pattern) and pattern[i] == "^"
    i += negated
    parts: list[str] = []
    count = 0
    while True:
        if i >= len(pattern):
            raise ValueError("unterminated character class")
        if pattern[i] == "]" and count:
            i += 1
            break
        lo, i = _class_char(pattern, i)
        hi = lo
        if i < len(pattern) and pattern[i] == "-":
            hi, i = _class_char(pattern, i + 1)
        count += 1
        if lo <= hi:  # Go matches nothing for a reversed range; re would refuse it
            parts.append(f"{re.escape(lo)}-{re.escape(hi)}")
    body = "".join(parts)
    if negated:
        return (f"[^{body}]" if body else "[\\s\\S]"), i
    return (f"[{body}]" if body else "(?!)"), i


def _class_char(pattern: str, i: int) -> tuple[str, int]:
    """One character of a Go class range (``\\`` escapes the next one), and the index
    after it.

    Raises:
        ValueError: ``-`` or ``]`` where a character is due, or nothing left.
    """
    if i >= len(pattern) or pattern[i] in "-]":
        raise ValueError("bad character class")
    if pattern[i] == "\\":
        i += 1
        if i >= len(pattern):
            raise ValueError("trailing backslash in a character class")
    return pattern[i], i + 1


def filepath_match(pattern: str, name: str) -> bool:
    """Whether ``name`` matches the shell pattern ``pattern`` as Go's
    ``path/filepath.Match`` decides on Linux: ``*`` any run of characters but ``/``
    (a leading ``.`` included: unlike :mod:`glob`), ``?`` one such character,
    ``[...]``/``[^...]`` a class with ranges, ``\\`` escaping the next character.

    Raises:
        ValueError: a malformed pattern (Go's ``ErrBadPattern``).
    """
    import re

    out: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            part, i = _class(pattern, i + 1)
            out.append(part)
            continue
        elif c == "\\":
            if i + 1 >= len(pattern):
                raise ValueError("trailing backslash")
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return re.fullmatch("".join(out), name, re.DOTALL) is not None


def _has_meta(path: str) -> bool:
    return any(c in path for c in "*?[\\")


def filepath_glob(pattern: str) -> list[str]:
    """The paths matching ``pattern`` as Go's ``path/filepath.Glob`` finds them on
    Linux: each directory's names sorted, matched by :func:`filepath_match` (so ``*``
    matches names starting with ``.``); a pattern without meta characters is returned
    when it exists (``Lstat``); unreadable directories are skipped.

    Raises:
        ValueError: a malformed pattern (Go's ``ErrBadPattern``).
    """
    filepath_match(pattern, "")  # Go checks the whole pattern first
    if not _has_meta(pattern):
        return [pattern] if os.path.lexists(pattern) else []
    directory, name = os.path.split(pattern)
    if directory == pattern:
        raise ValueError("pattern recurses")
    parents = filepath_glob(directory) if _has_meta(directory) else [directory]
    out: list[str] = []
    for parent in parents:
        if not os.path.isdir(parent or "."):
            continue
        try:
            names = sorted(os.listdir(parent or "."))
        except OSError:
            continue
        out += [os.path.join(parent, n) for n in names if filepath_match(name, n)]
    return out


def _go_clean(path: str) -> str:
    """Go's ``filepath.Clean`` (lexical; ``//a`` is ``/a``, unlike :func:`os.path.normpath`)."""
    clean = os.path.normpath(path)
    return "/" + clean.lstrip("/") if clean.startswith("//") else clean


def resolve_imports(parent: str, imports: Sequence[str], *, root: str = "/") -> list[str]:
    """The files the ``imports`` of the config file ``parent`` name, as containerd's
    ``resolveImports`` (``cmd/containerd/server/config``) finds them: each import cleaned,
    a relative one joined to ``parent``'s directory (the path containerd was given: for
    a linked file, the link's directory, not its target's), then expanded by
    :func:`filepath_glob` when it holds ``*`` (no match: nothing), else taken as it is,
    existing or not. An absolute import is read under ``root`` (a config root such as
    ``ocihook doctor --config-root``; ``"/"``: as containerd). This is containerd 2.x's
    rule (containerd PR 9746); releases before it globbed a relative pattern against
    their working directory (``/`` under systemd) instead.

    Raises:
        EngineConfigError: an import holds a NUL byte or is a malformed pattern (``field``
            ``imports``; containerd refuses to start).
    """
    out: list[str] = []
    for entry in imports:
        if "\0" in entry:
            raise EngineConfigError(
                "an import names a file with a NUL byte", path=parent, field="imports"
            )
        path = _go_clean(entry)
        if os.path.isabs(path):
            path = _go_clean(under_root(root, path))
        else:
            path = _go_clean(os.path.join(os.path.dirname(parent), path))
        if "*" not in path:
            out.append(path)
            continue
        try:
            out += filepath_glob(path)
        except ValueError as e:
            raise EngineConfigError(
                f"import {entry!r} is not a valid pattern: {e}", path=parent, field="imports"
            ) from None
    return out


def _import_list(doc: Mapping[str, Any], path: str) -> list[str]:
    """``doc``'s ``imports`` (plain or tomlkit values).

    Raises:
        EngineConfigError: not a list of strings.
    """
    imports = doc.get("imports")
    if imports is None:
        return []
    imports = imports.unwrap() if hasattr(imports, "unwrap") else imports
    if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports):
        raise EngineConfigError("imports must be a list of strings", path=path, field="imports")
    return imports


def load_imports(
    path: str, doc: Mapping[str, Any], *, root: str = "/", strict: bool = True
) -> list[tuple[str, dict[str, Any]]]:
    """Every file containerd loads after the config file ``path`` (whose parsed document
    is ``doc``), in its order, with its document: ``doc``'s imports
    (:func:`resolve_imports`), then their own imports, breadth first, each path once and
    never ``path`` itself (``LoadConfig``'s ``loaded`` set; a file that is ``path`` by
    another name is skipped too). Files that do not exist are left out; at most
    :data:`MAX_IMPORTS`. Later files win (containerd 1.x replaces a plugin's table by the
    imported one, 2.x merges them key by key).

    Args:
        strict: raise for an imported file that is not TOML or whose ``imports`` are
            malformed (doctor reports it); ``False``: leave such a file out (the main
            file's edit is checked against what containerd can load).

    Raises:
        EngineConfigError: ``imports`` (of ``doc``, or with ``strict`` of any file) is not
            a list of strings or names a bad pattern or a NUL byte; with ``strict``, an
            imported file is not valid TOML or cannot be read.
    """
    import tomllib

    loaded = {path}
    pending = resolve_imports(path, _import_list(doc, path), root=root)
    out: list[tuple[str, dict[str, Any]]] = []
    while pending and len(out) < MAX_IMPORTS:
        name, pending = pending[0], pending[1:]
        if name in loaded:
            continue
        loaded.add(name)
        try:
            if os.path.samefile(name, path):
                continue
        except OSError:
            pass
        try:
            raw = read_file(name)
            if raw is None:
                continue
            sub = tomllib.loads(decode_text(raw, name))
        except EngineConfigError:
            if strict:
                raise
            continue
        except tomllib.TOMLDecodeError as exc:
            if strict:
                raise EngineConfigError(f"not valid TOML: {exc}", path=name) from None
            continue
        out.append((name, sub))
        try:
            pending += resolve_imports(name, _import_list(sub, name), root=root)
        except EngineConfigError:
            if strict:
                raise
    return out


# --- reading ----------------------------------------------------------------------------


def read_containerd(root: str = "/") -> EngineConfig:
    """The CRI runtimes containerd's ``config.toml`` (under ``root``) and the files it
    imports (:func:`load_imports`) register, later files winning: each runtime's program
    (``options.BinaryName``, else ``runtime_path``), the default
    (``default_runtime_name``, else ``runc``) and ``enable_cdi``.

    Raises:
        EngineConfigError: a file is not valid TOML, or ``imports`` is malformed.
    """
    path = under_root(root, DEFAULT_PATH)
    doc = load_toml_file(path)
    if doc is None:
        return EngineConfig("containerd")
    docs = [(path, doc), *load_imports(path, doc, root=root)]
    version = doc.get("version", 1)
    plugin = CONTAINERD_PLUGINS.get(version, "cri") if isinstance(version, int) else "cri"
    runtimes: dict[str, tuple[str, str]] = {}
    default = "runc"
    cdi = False
    for name, d in docs:
        cri = (d.get("plugins") or {}).get(plugin) or {}
        cdi = bool(cri.get("enable_cdi", cdi))
        section = cri.get("containerd") or {}
        default = section.get("default_runtime_name", default)
        for rname, entry in (section.get("runtimes") or {}).items():
            if not isinstance(entry, dict):
                continue
            options = entry.get("options") or {}
            binary = options.get("BinaryName") or entry.get("runtime_path") or ""
            if isinstance(binary, str) and binary:
                runtimes[rname] = (name, binary)
    out = [
        Registration("containerd", f, n, b, default=n == default) for n, (f, b) in runtimes.items()
    ]
    files = [name for name, _d in docs]
    facts = {
        "files": files,
        "defaultRuntime": default,
        "runtimes": {r.name: r.path for r in out},
        "cdi": cdi,
    }
    return EngineConfig("containerd", tuple(files), tuple(out), facts)


# --- configuring ------------------------------------------------------------------------


def _edit_containerd(
    doc: Any,
    plugin: str,
    *,
    path: str,
    runtime_path: str,
    set_as_default: bool,
    cdi: bool,
    runtime_name: str = RUNTIME_NAME,
) -> dict[tuple[str, ...], object]:
    """Edit ``doc`` (tomlkit) for :func:`configure_containerd`; returns what was written
    (path of keys -> plain value) for :func:`check_toml`."""
    import tomlkit

    where = f'plugins."{plugin}"'
    base = ("plugins", plugin, "containerd", "runtimes")
    wrote: dict[tuple[str, ...], object] = {}
    plugins = sub_table(doc, "plugins", path=path, field="plugins")
    cri = sub_table(plugins, plugin, path=path, field=where)
    runtimes_parent = sub_table(cri, "containerd", path=path, field=f"{where}.containerd")
    runtimes = sub_table(
        runtimes_parent, "runtimes", path=path, field=f"{where}.containerd.runtimes"
    )
    field = f"{where}.containerd.runtimes.{runtime_name}"
    if runtime_name in runtimes:
        entry = sub_table(runtimes, runtime_name, path=path, field=field)
        if "runtime_type" not in entry:
            set_key(entry, "runtime_type", CONTAINERD_RUNTIME_TYPE)
            wrote[(*base, runtime_name, "runtime_type")] = CONTAINERD_RUNTIME_TYPE
        options = sub_table(
            entry, "options", path=path, field=f"{field}.options", super_table=False
        )
        set_key(options, "BinaryName", runtime_path)
        wrote[(*base, runtime_name, "options", "BinaryName")] = runtime_path
    else:
        # runc's settings (SystemdCgroup, runtime_root...) carry over, as a runtime that
        # differs from runc only by its binary; zero values are containerd's defaults
        runc_field = f"{where}.containerd.runtimes.runc"
        runc = (
            sub_table(runtimes, "runc", path=path, field=runc_field) if "runc" in runtimes else None
        )
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
        wrote[(*base, runtime_name)] = entry.unwrap()
        runtimes[runtime_name] = entry
        if runc is not None and hasattr(runc, "trivia"):
            style_like(runtimes[runtime_name], runc)
        elif runc is None:
            # no runc to look like: tomlkit indents the headers it adds under an indented
            # table by that table's indentation but not their keys; write them flat
            for added in (runtimes["runc"], runtimes[runtime_name]):
                if hasattr(added, "trivia"):
                    indent_table(added, "")
    if set_as_default:
        set_key(runtimes_parent, "default_runtime_name", runtime_name)
        wrote[("plugins", plugin, "containerd", "default_runtime_name")] = runtime_name
    if cdi:
        set_key(cri, "enable_cdi", True)
        wrote[("plugins", plugin, "enable_cdi")] = True
        if "cdi_spec_dirs" not in cri:
            set_key(cri, "cdi_spec_dirs", list(CDI_SPEC_DIRS))
            wrote[("plugins", plugin, "cdi_spec_dirs")] = list(CDI_SPEC_DIRS)
    return wrote


def _check_imports(doc: Any, path: str, config_path: str | None) -> tuple[str, ...]:
    """Check the files containerd imports after ``path`` (:func:`load_imports`, relative
    imports resolved against the directory of ``config_path``, the path containerd is
    given). An imported file's plugin tables win, so a registration written in the main
    file is undone by an imported file that configures the CRI plugin.

    Returns:
        notes: the imports that exist but do not configure the CRI plugin now.

    Raises:
        EngineConfigError: ``imports`` is not a list of strings (or names a NUL byte or a
            bad pattern), or an imported file configures the CRI plugin (it is to be
            configured instead).
    """
    imports = _import_list(doc, path)
    if not imports:
        return ()
    parent = config_path or path
    for name, imported in load_imports(parent, {"imports": imports}, strict=False):
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
    config_path: str | None = None,
    runtime_name: str = RUNTIME_NAME,
) -> tuple[bytes, tuple[str, ...]]:
    """containerd's ``config.toml`` with a CRI runtime ``ocihook`` (see the module
    docstring; ``runtime_name`` names it), comments and layout of the rest kept.
    ``config_path``: the path
    containerd is given, whose directory relative ``imports`` are resolved against
    (default ``path``; for a linked file, the link, as containerd does). A missing or
    empty file becomes a
    version 2 file (containerd 1.x; 2.x reads it too). A file without ``version`` and
    without ``plugins`` gets ``version = 2``.

    Returns:
        ``(after, notes)``.

    Raises:
        EngineConfigError: not TOML; config version 1 (no ``version`` but ``plugins``) or
            unknown; a table ocihook writes into is not a table; an imported file
            configures the CRI plugin (:func:`load_imports`); a layout tomlkit
            cannot edit faithfully (:func:`check_toml`).
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    text = decode_text(before, path)
    doc_text = text
    doc = parse_toml(text, path)
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
        doc = parse_toml(doc_text, path)
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
    import_notes = _check_imports(doc, path, config_path)
    old = table_value(
        doc, "plugins", plugin, "containerd", "runtimes", runtime_name, "options", "BinaryName"
    )
    import_notes = (*import_notes, *replaced_runtime_note(runtime_name, old, runtime_path))
    try:
        wrote = _edit_containerd(
            doc,
            plugin,
            path=path,
            runtime_path=runtime_path,
            set_as_default=set_as_default,
            cdi=cdi,
            runtime_name=runtime_name,
        )
        after = tomlkit.dumps(doc).encode()
    except (ValueError, TOMLKitError) as e:
        raise edit_error(e, path) from None
    if after == before:
        return after, ()
    if before is not None and unchanged_meaning(text, after.decode()):
        # configured already: the file's own bytes, not tomlkit's rendering of them
        return before, ()
    check_toml(doc_text, after.decode(), wrote, path=path)
    notes = [*import_notes, "restart containerd to apply (systemctl restart containerd)"]
    disabled = doc.get("disabled_plugins") or []
    if any(p in (plugin, "cri") for p in disabled):
        notes.insert(
            0,
            f"the CRI plugin is disabled (disabled_plugins): the {runtime_name} runtime is "
            "for CRI clients (kubelet, crictl, nerdctl); ctr can use the wrapper with "
            "--runc-binary",
        )
    return after, tuple(notes)
