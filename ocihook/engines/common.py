"""What the engine modules share: the :class:`Change` a configuration edit makes, reading
and writing engine files, strict JSON, and the :class:`Registration` a reader finds.

Engine files are read as bytes (:func:`read_file`) and decoded as UTF-8
(:func:`decode_text`); a file that is not valid JSON (RFC 8259: no ``NaN``) is refused
with :class:`~ocihook.core.errors.EngineConfigError` (exit 13). Writes are atomic and keep
the file's mode (:func:`ocihook.oci.bundle.write_bytes_atomic`).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from ..core.errors import EngineConfigError
from ..core.records import Record

__all__ = [
    "CDI_SPEC_DIRS",
    "NVIDIA_TOOLKIT_PROGRAMS",
    "RUNTIME_NAME",
    "Change",
    "EngineConfig",
    "Registration",
    "decode_text",
    "default_runtime_path",
    "describe",
    "load_json",
    "load_json_file",
    "load_toml_file",
    "read_file",
    "read_text_if_regular",
    "replaced_runtime_note",
    "table_value",
    "under_root",
    "write_change",
]

#: The name of the runtime entry ocihook adds.
RUNTIME_NAME = "ocihook"


def table_value(doc: object, *keys: str) -> object:
    """``doc[k1][k2]...`` through nested mappings (TOML tables, JSON objects), or ``None``
    where a key is missing or a level is not a mapping."""
    for key in keys:
        if not hasattr(doc, "get") or not hasattr(doc, "keys"):
            return None
        doc = doc.get(key)
    return getattr(doc, "unwrap", lambda: doc)()


def replaced_runtime_note(name: str, old: object, new: str) -> tuple[str, ...]:
    """The note ``runtime configure`` gives when the runtime entry ``name`` already ran
    another program (``old``, a path or name as the file had it) and now runs ``new``: the
    NVIDIA toolkit's ``nvidia-container-runtime`` replaced by ``--nvidia-runtime-name
    nvidia``, say. ``()`` when there was no such program or it was ``new`` already."""
    if not isinstance(old, str) or not old or old == new:
        return ()
    return (
        f"runtime {name!r} ran {old}; it now runs {new} (put {old} back in this entry to undo)",
    )


#: CDI spec directories written with ``--cdi`` (CDI ``SPEC.md``'s defaults).
CDI_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")
#: Programs of the NVIDIA Container Toolkit that inject GPUs when registered.
NVIDIA_TOOLKIT_PROGRAMS = (
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
    "nvidia-container-toolkit",
    "nvidia-container-runtime.cdi",
    "nvidia-container-runtime.legacy",
    "nvidia-cdi-hook",
)


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


def decode_text(before: bytes | None, path: str) -> str:
    """``before`` (a file's bytes, ``None`` when it does not exist) as UTF-8 text; ``""``
    for ``None``.

    Raises:
        EngineConfigError: not UTF-8, naming the byte offset.
    """
    if before is None:
        return ""
    try:
        return before.decode("utf-8")
    except UnicodeDecodeError as e:
        raise EngineConfigError(f"not UTF-8 text at byte offset {e.start}", path=path) from None


def load_json(text: str, path: str) -> Any:
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


#: Larger engine configuration files are refused, in bytes (real ones are a few KiB).
MAX_ENGINE_CONFIG_BYTES = 16 << 20


def read_file(path: str) -> bytes | None:
    """A regular file's bytes (an engine's configuration), ``None`` when it does not exist.

    Raises:
        EngineConfigError: unreadable, not a regular file, or larger than
            :data:`MAX_ENGINE_CONFIG_BYTES`.
    """
    from ..core.readfile import read_regular

    try:
        return read_regular(path, MAX_ENGINE_CONFIG_BYTES)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise EngineConfigError(f"cannot read: {e.strerror}", path=path) from None


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


def under_root(root: str, path: str) -> str:
    """The absolute ``path`` as seen under ``root`` (``"/"``: itself); lexical, no link
    followed. Readers take a config root so that a copy of a host's ``/etc`` can be read."""
    return os.path.join(os.path.abspath(root), path.lstrip("/"))


def read_text_if_regular(path: str, limit: int = 1 << 20) -> str | None:
    """Up to ``limit`` bytes of the regular file at ``path`` (a final link followed,
    opened without blocking), undecodable bytes replaced; ``None`` when it is missing,
    unreadable or not a regular file. For reading what a host has (doctor's engine
    readers and procfs files), where an absent file is a finding, not an error."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("utf-8", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def load_json_file(path: str) -> Any:
    """The JSON document in the file at ``path`` (:func:`load_json`), ``None`` when
    :func:`read_text_if_regular` finds no file.

    Raises:
        EngineConfigError: not valid JSON.
    """
    text = read_text_if_regular(path)
    if text is None:
        return None
    return load_json(text, path)


def load_toml_file(path: str) -> dict[str, Any] | None:
    """The TOML document in the file at ``path`` (:mod:`tomllib`), ``None`` when
    :func:`read_text_if_regular` finds no file.

    Raises:
        EngineConfigError: not valid TOML.
    """
    import tomllib

    text = read_text_if_regular(path)
    if text is None:
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise EngineConfigError(f"not valid TOML: {exc}", path=path) from None


class Registration(Record):
    """One runtime or hook an engine's configuration registers.

    Attributes:
        engine: docker, containerd, crio or podman.
        file: the configuration file.
        name: the runtime name, or the hooks.d file name.
        path: the program the engine runs.
        args: its arguments (hooks.d), else ``()``.
        default: whether it is the engine's default runtime.
    """

    engine: str
    file: str
    name: str
    path: str
    args: tuple[str, ...] = ()
    default: bool = False

    @property
    def is_ocihook(self) -> bool:
        """Registers ocihook: named so, or runs ocihook's program."""
        return (
            self.name == RUNTIME_NAME
            or os.path.basename(self.path).startswith("ocihook")
            or any("ocihook" in a for a in self.args)
        )

    @property
    def is_nvidia_toolkit(self) -> bool:
        """Registers the NVIDIA Container Toolkit (:data:`NVIDIA_TOOLKIT_PROGRAMS`)."""
        base = os.path.basename(self.path)
        return base in NVIDIA_TOOLKIT_PROGRAMS or any(
            os.path.basename(a) in NVIDIA_TOOLKIT_PROGRAMS for a in self.args[:1]
        )


class EngineConfig(Record):
    """What a reader found in one engine's configuration.

    Attributes:
        engine: docker, containerd, crio or podman.
        files: the files read, in the order the engine reads them (``()``: none exists).
        registrations: the runtimes or hooks they register.
        facts: for the deployment record (``specs/doctor-record.schema.json``,
            ``engines.<engine>``): ``files``, ``defaultRuntime``, ``runtimes`` (name ->
            program), ``cdi``; for podman ``files`` and ``hooks``. Empty when no file
            exists.
    """

    engine: str
    files: tuple[str, ...] = ()
    registrations: tuple[Registration, ...] = ()
    facts: Mapping[str, Any] | None = None
