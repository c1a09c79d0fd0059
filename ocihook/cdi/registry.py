"""A registry of CDI devices loaded from spec directories (the reference "cache").

Rules (CDI ``SPEC.md``, "CDI spec file location"; reference ``pkg/cdi/cache.go``
``Cache.refresh`` and ``pkg/cdi/spec-dirs.go`` ``scanSpecDirs``):

* spec directories are given lowest priority first (default ``/etc/cdi`` then
  ``/var/run/cdi``); the index of a directory in that list is its priority;
* only the regular files directly inside a directory whose name ends in ``.json`` or
  ``.yaml`` are read, in name order; a missing directory is skipped;
* a file that cannot be read or fails :func:`~ocihook.cdi.spec.load_spec` is recorded in
  :attr:`Registry.errors` and the other files still load;
* a device name met again at a higher priority replaces the earlier one (the earlier files
  are recorded in :attr:`Registry.overridden`); met again at the same priority, every copy
  at that priority is dropped and the name is recorded in :attr:`Registry.conflicts`.

Two producers of one qualified name (two generators writing the same kind into one
directory: ``ocihook cdi generate``'s ``nvidia.com/gpu`` beside ``nvidia-ctk``'s) are
told in one line per pair of files, naming both (:meth:`Registry.collisions`,
:meth:`Collision.message`), wherever ocihook reads specs: ``ocihook cdi list``,
``ocihook doctor`` and the injection of a requested device.

One deliberate difference from ``cache.go``: there a same-priority conflict at a lower
priority also removes a device that a higher-priority directory defines; here the
higher-priority definition wins (the documented "later dir wins" rule).

File access happens only in :meth:`Registry.load`; :meth:`Registry.from_specs` builds a
registry from already-parsed specs (for tests and callers that read files themselves).
"""

from __future__ import annotations

import os

from ..core.readfile import read_regular
from ..core.records import Record
from .names import CdiError
from .spec import Device, Spec, load_spec

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

__all__ = ["DEFAULT_SPEC_DIRS", "Collision", "Registry", "RegistryDevice"]

#: Default spec directories, lowest priority first (CDI ``SPEC.md``; ``cache.go``
#: ``DefaultSpecDirs``).
DEFAULT_SPEC_DIRS: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
_SPEC_EXTENSIONS = (".json", ".yaml")


class RegistryDevice(Record):
    """One resolvable device: its qualified name (``vendor/class=name``), the spec and
    device that define it, the spec file's path and its priority (directory index)."""

    qualified_name: str
    spec: Spec
    device: Device
    path: str
    priority: int


#: How many qualified names a :class:`Collision` message spells out.
_NAMES_SHOWN = 3


class Collision(Record):
    """Spec files that define the same qualified device names.

    Attributes:
        paths: the files. ``overrides`` false: files of one priority, none of whose
            definitions of ``names`` is used; true: the first file, of the highest
            priority, is used and replaces the others.
        names: the qualified names they share, sorted.
        overrides: whether a higher-priority file wins (the CDI rule "a later directory
            wins") rather than every copy being dropped.
    """

    paths: tuple[str, ...]
    names: tuple[str, ...]
    overrides: bool = False

    def shown_names(self) -> str:
        """The names, the first few spelt out: ``a=0, a=1, a=2 and 14 more``."""
        shown = ", ".join(self.names[:_NAMES_SHOWN])
        more = len(self.names) - _NAMES_SHOWN
        return f"{shown} and {more} more" if more > 0 else shown

    def message(self) -> str:
        """One line naming every file and the names they share."""
        files = " and ".join(self.paths) if len(self.paths) < 3 else ", ".join(self.paths)
        if self.overrides:
            return (
                f"CDI spec {self.paths[0]} overrides {', '.join(self.paths[1:])} for "
                f"{self.shown_names()} (a later spec directory wins)"
            )
        return (
            f"CDI specs {files} all define {self.shown_names()} at one priority: "
            "a CDI registry uses none of these devices"
        )

    def hint(self) -> str:
        """What to do about it, one clause."""
        if self.overrides:
            return f"remove {', '.join(self.paths[1:])} if its producer is gone"
        return (
            "keep one producer per kind in a spec directory (remove or move one of the "
            "files, or have one producer write another kind)"
        )


class Registry:
    """CDI devices by qualified name, built by :meth:`load` or :meth:`from_specs`.

    Attributes:
        specs: every spec that loaded, as ``(priority, path, Spec)`` in load order.
        errors: spec file path -> the :class:`CdiError` that stopped it loading.
        conflicts: qualified name -> the paths of the same-priority specs that all define
            it (none of them is used).
        overridden: qualified name -> the paths of lower-priority specs that define it too
            (the one used is :meth:`resolve`'s ``path``).
    """

    __slots__ = ("_devices", "conflicts", "errors", "overridden", "specs")

    def __init__(
        self,
        specs: Sequence[tuple[int, str, Spec]],
        devices: Mapping[str, RegistryDevice],
        errors: Mapping[str, CdiError],
        conflicts: Mapping[str, tuple[str, ...]],
        overridden: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.specs: tuple[tuple[int, str, Spec], ...] = tuple(specs)
        self._devices: dict[str, RegistryDevice] = dict(devices)
        self.errors: dict[str, CdiError] = dict(errors)
        self.conflicts: dict[str, tuple[str, ...]] = dict(conflicts)
        self.overridden: dict[str, tuple[str, ...]] = dict(overridden or {})

    # -- building -----------------------------------------------------------------------

    @classmethod
    def from_specs(
        cls,
        specs: Iterable[tuple[int, str, Spec]],
        errors: Mapping[str, CdiError] | None = None,
    ) -> Registry:
        """Build a registry from parsed specs, each ``(priority, path, Spec)`` in load
        order (higher priority wins; see the module docstring for conflicts). ``errors``
        (path -> error) is kept as :attr:`errors`. No file access."""
        spec_list = list(specs)
        chosen: dict[str, RegistryDevice] = {}
        clashes: dict[str, list[str]] = {}  # name -> paths at the chosen priority
        replaced: dict[str, list[str]] = {}  # name -> paths of lower priorities
        for priority, path, spec in spec_list:
            for device in spec.devices:
                name = f"{spec.kind}={device.name}"
                entry = RegistryDevice(name, spec, device, path, priority)
                old = chosen.get(name)
                if old is None or priority > old.priority:
                    if old is not None:
                        lower = replaced.setdefault(name, [])
                        lower += [p for p in clashes.pop(name, [old.path]) if p not in lower]
                    chosen[name] = entry
                elif priority == old.priority:
                    paths = clashes.setdefault(name, [old.path])
                    if path not in paths:
                        paths.append(path)
                elif path not in replaced.setdefault(name, []):
                    replaced[name].append(path)  # a lower priority given after a higher one
        conflicts = {name: tuple(paths) for name, paths in clashes.items()}
        devices = {name: e for name, e in chosen.items() if name not in conflicts}
        overridden = {n: tuple(paths) for n, paths in replaced.items() if n in devices}
        return cls(spec_list, devices, dict(errors or {}), conflicts, overridden)

    @classmethod
    def load(
        cls, spec_dirs: Sequence[str] = DEFAULT_SPEC_DIRS, *, cache_dir: str | None = None
    ) -> Registry:
        """Read every ``*.json`` / ``*.yaml`` file directly in ``spec_dirs`` (lowest
        priority first) with :func:`load_spec` and build the registry. Never raises for a
        bad file or a missing directory: broken files go to :attr:`errors`.
        Source: ``pkg/cdi/spec-dirs.go`` ``scanSpecDirs``, ``pkg/cdi/cache.go``.

        With ``cache_dir`` (a container's start: the root-owned
        :mod:`ocihook.linux.cachestore` directory), a YAML spec is parsed once: the parsed
        spec is kept there, keyed by the file's path and identity (device, inode, size,
        mtime and ctime: any change of the file, even one that keeps its mtime, changes
        the ctime), and later starts read it back without importing PyYAML (about 10 ms
        of a start). JSON specs are parsed each time: that is as fast as reading a cached
        entry."""
        specs: list[tuple[int, str, Spec]] = []
        errors: dict[str, CdiError] = {}
        for priority, directory in enumerate(spec_dirs):
            try:
                names = sorted(os.listdir(directory))
            except FileNotFoundError:
                continue
            except OSError as err:
                errors[directory] = CdiError(
                    f"cannot list CDI spec directory: {err.strerror}", path=directory
                )
                continue
            for name in names:
                if not name.endswith(_SPEC_EXTENSIONS):
                    continue
                path = os.path.join(directory, name)
                try:
                    if not os.path.isfile(path):
                        continue
                    if cache_dir is not None and name.endswith((".yaml", ".yml")):
                        spec = _load_cached(path, cache_dir)
                    else:
                        spec = load_spec(read_regular(path), path=path)
                    specs.append((priority, path, spec))
                except OSError as err:
                    errors[path] = CdiError(f"cannot read CDI spec file: {err.strerror}", path=path)
                except CdiError as err:
                    errors[path] = err
        return cls.from_specs(specs, errors)

    # -- lookups ------------------------------------------------------------------------

    def resolve(self, qualified_name: str) -> RegistryDevice | None:
        """The :class:`RegistryDevice` for ``qualified_name``, or ``None``."""
        return self._devices.get(qualified_name)

    def device(self, qualified_name: str) -> tuple[Spec, Device] | None:
        """``(spec, device)`` for ``qualified_name`` (``vendor/class=name``), or ``None``
        when it is unknown or conflicting."""
        entry = self._devices.get(qualified_name)
        return None if entry is None else (entry.spec, entry.device)

    def devices(self) -> dict[str, tuple[Spec, Device]]:
        """Every resolvable device: qualified name -> ``(spec, device)``, sorted by name."""
        return {n: (e.spec, e.device) for n, e in sorted(self._devices.items())}

    def list_devices(self) -> list[str]:
        """The qualified names of every resolvable device, sorted."""
        return sorted(self._devices)

    def vendors(self) -> list[str]:
        """The vendors of every loaded spec, sorted, without repeats."""
        return sorted({spec.vendor for _, _, spec in self.specs})

    def classes(self) -> list[str]:
        """The device classes of every loaded spec, sorted, without repeats."""
        return sorted({spec.device_class for _, _, spec in self.specs})

    def collisions(self) -> list[Collision]:
        """Every set of spec files that define the same qualified names: the
        same-priority :attr:`conflicts` (none used) first, then the :attr:`overridden`
        ones; one :class:`Collision` per set of files, holding all the names they share,
        in path order."""
        groups: dict[tuple[tuple[str, ...], bool], list[str]] = {}
        for name, paths in self.conflicts.items():
            groups.setdefault((tuple(paths), False), []).append(name)
        for name, paths in self.overridden.items():
            groups.setdefault(((self._devices[name].path, *paths), True), []).append(name)
        return [
            Collision(paths, tuple(sorted(names)), overrides)
            for (paths, overrides), names in sorted(groups.items(), key=lambda g: (g[0][1], g[0]))
        ]

    def conflict_of(self, qualified_name: str) -> Collision | None:
        """The same-priority :class:`Collision` that makes ``qualified_name`` unusable
        (every name those files share), or ``None``."""
        paths = self.conflicts.get(qualified_name)
        if paths is None:
            return None
        names = sorted(n for n, p in self.conflicts.items() if p == paths)
        return Collision(tuple(paths), tuple(names))

    def __repr__(self) -> str:
        return (
            f"Registry({len(self._devices)} devices, {len(self.errors)} errors, "
            f"{len(self.conflicts)} conflicts)"
        )


#: Entries of :mod:`ocihook.linux.cachestore` holding parsed YAML specs.
CACHE_PREFIX = "cdi-spec"
#: Parsed YAML specs kept (one per spec file; a DRA driver may write one file per claim).
CACHE_ENTRIES = 1024


def _load_cached(path: str, cache_dir: str) -> Spec:
    """:func:`load_spec` of the YAML spec at ``path``, through the cache in ``cache_dir``
    (see :meth:`Registry.load`).

    Raises:
        OSError: the file cannot be read.
        CdiError: it is no valid spec (a broken file is never cached).
    """
    from ..core.readfile import MAX_JSON_BYTES, FileTooLarge
    from ..linux import cachestore
    from ..plan import edits

    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if st.st_size > MAX_JSON_BYTES:
        raise FileTooLarge(27, f"larger than {MAX_JSON_BYTES} bytes")
    key = {
        "path": path,
        "identity": [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns],
    }
    types: dict[str, type[Record]] = {
        "Spec": Spec,
        "Device": Device,
        **{
            name: getattr(edits, name)
            for name in ("ContainerEdits", "DeviceNode", "Mount", "Hook", "IntelRdt", "NetDevice")
        },
    }
    found = cachestore.lookup(key, types, cache_dir, prefix=CACHE_PREFIX)
    if isinstance(found, Spec):
        return found
    data = read_regular(path)
    spec = load_spec(data, path=path)
    after = os.stat(path)
    identity = [after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns, after.st_ctime_ns]
    if identity == key["identity"]:  # the file did not change while it was read
        cachestore.store(key, spec, (), cache_dir, prefix=CACHE_PREFIX, max_entries=CACHE_ENTRIES)
    return spec
