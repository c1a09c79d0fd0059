"""The start path's module image: ocihook's compiled modules in one file of a private
store (root's, or a user's own).

A hook or the wrapper imports 15-60 of ocihook's modules on every container start. For
each, Python's path finder looks the name up in its directory, ``stat``-s the source, opens
and reads its ``.pyc`` and checks its header: about 25 µs a module beyond unmarshalling and
running it (0.8 ms of the CDI spec's hook's 14.5 ms, Debian's Python, this 2-core
machine). :func:`write_image` (run by ``ocihook cdi generate --warm-cache``: the boot
unit, or a user for their own store) compiles the start path's modules
(:data:`ocihook.core.startpath.START_PATH_MODULES`) into one file of the store,
``/run/ocihook/modules-<tag>.img`` for root (``tag``: a checksum of the package's
directory, so that two installations keep one each; a user's in
``/run/user/<uid>/ocihook``, see :func:`ocihook.linux.cachestore.install_user_module_image`);
:func:`install`, called first by the one-shot programs (:func:`ocihook._main.run`,
:func:`ocihook._main.run_nvidia_hook`, :func:`ocihook.runtime.run`), puts a finder in
front of the import system that serves those modules' code from it.

Only the code comes from the image; everything else is the import system's own: the
module's spec, ``__file__``, ``__cached__`` and ``__path__`` are what a normal import
gives, and its loader is a ``SourceFileLoader`` subclass whose ``get_code`` reads the
image.
The image is used only when:

* the store's directory and the file are owned by this process's effective user and
  writable by neither group nor others (as :mod:`ocihook.linux.cachestore` requires), and
  the file is a regular file of at most :data:`MAX_IMAGE_BYTES`;
* it was written by an interpreter of the same bytecode (``MAGIC_NUMBER``) and
  optimization level for the package directory this process imports ocihook from (its
  real path: the file paths the modules get are spelled as this process's import
  system spells them);
* and, for each module (``ocihook`` and ``ocihook.*`` only), its source file and the
  directory holding it still have the identity (device, inode, size, ``mtime_ns``,
  ``ctime_ns``) they had when it was compiled: an upgrade, an edited file, or a file
  added beside it (a package or an extension module of its name, which a normal import
  would take instead) means that module is imported from its source as usual, the rest
  from the image.

Anything else — no image (a host without the boot unit, a user without one of their own), a
corrupt or foreign file, code that does not unmarshal — means the normal import, never an
error: the image only saves time.
"""

from __future__ import annotations

import marshal
import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import CodeType, ModuleType

    #: Module name -> (is a package, source identity, directory identity, offset, length).
    _Index = dict[str, tuple[bool, tuple[int, ...], tuple[int, ...], int, int]]

__all__ = [
    "DEFAULT_DIR",
    "FORMAT",
    "MAX_IMAGE_BYTES",
    "host_root",
    "image_path",
    "install",
    "write_image",
]

#: The root-owned store the image lives in (:data:`ocihook.linux.cachestore.DEFAULT_DIR`).
DEFAULT_DIR = "/run/ocihook"
#: The first bytes of an image: its format.
FORMAT = b"OCIHMOD1"
#: Largest image read, in bytes (the start path's modules take about 1 MiB).
MAX_IMAGE_BYTES = 16 << 20
#: Largest index (the table of modules before their code), in bytes.
MAX_INDEX_BYTES = 1 << 20
#: Most images kept in the store (one per installation that wrote one; the oldest go).
MAX_IMAGES = 4


def _package_root() -> str:
    """The directory holding the ``ocihook`` package this process runs, spelled as the
    import system spells it (the parent of the package's ``__path__``; a file path built
    from it is the one a normal import gives)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def image_path(directory: str = DEFAULT_DIR, package_root: str | None = None) -> str:
    """The image's path in ``directory`` for the installation whose ``ocihook`` package is
    in ``package_root`` (default: this process's): ``modules-<16 hex digits>.img``, the
    64-bit FNV-1a checksum of that directory's real path (``os.path.realpath``: every
    spelling of one installation shares one image)."""
    return _image_of(directory, os.path.realpath(package_root or _package_root()))


def _image_of(directory: str, real: str) -> str:
    """:func:`image_path` for the package directory's real path ``real``."""
    h = 0xCBF29CE484222325
    for byte in os.fsencode(real):
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return os.path.join(directory, f"modules-{h:016x}.img")


def _private(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _ours(name: str) -> bool:
    return name == "ocihook" or name.startswith("ocihook.")


def _source(root: str, name: str, package: bool) -> str:
    """The source file of module ``name`` below ``root``."""
    base = os.path.join(root, *name.split("."))
    return os.path.join(base, "__init__.py") if package else base + ".py"


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """A file's or directory's identity: device, inode, size, ``mtime_ns`` and
    ``ctime_ns`` (the last changes whenever the file is written or replaced, or an entry
    of the directory is added, removed or renamed, and cannot be set back: a reinstall
    that keeps a file's size and packaged mtime, on an inode number freed a moment before,
    still differs)."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _magic() -> bytes:
    """The interpreter's bytecode magic number (``importlib.util.MAGIC_NUMBER``)."""
    magic: bytes = sys.modules["_frozen_importlib_external"].MAGIC_NUMBER
    return magic


def install(directory: str | None = None) -> bool:
    """Put the image's finder first on ``sys.meta_path`` when ``directory`` (default
    :data:`DEFAULT_DIR`) holds a usable image for this installation (see the module
    docstring). Returns whether it did; never raises for the image's state. Meant for a
    one-shot program: the image's descriptor stays open (close-on-exec) for the process's
    life."""
    try:
        found = _open(directory or DEFAULT_DIR)
        if found is None:
            return False
        finder = _finder(*found)
    except Exception:  # a corrupt image is only a slower start
        return False
    sys.meta_path.insert(0, finder)  # type: ignore[arg-type]
    return True


def host_root(uid_map: str = "/proc/self/uid_map") -> bool:
    """Whether this process is root of the initial user namespace: effective user 0 and
    the identity ``uid_map`` (``0 0 4294967295``, user_namespaces(7); without procfs,
    effective user 0 alone). Such a process has root's image or none; anyone else may
    have one of their own (see :func:`ocihook.linux.cachestore.install_user_module_image`)."""
    if os.geteuid() != 0:
        return False
    try:
        with open(uid_map, "rb") as f:
            return f.read(4096).split() == [b"0", b"0", b"4294967295"]
    except OSError:
        return True


def _open(directory: str) -> tuple[int, int, int, _Index] | None:
    """The image's descriptor, where its code starts and ends, and its index (see
    :func:`write_image`), or ``None`` when there is no usable image."""
    real = os.path.realpath(_package_root())
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(_image_of(directory, real), flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (
            not (st.st_mode & 0o170000 == 0o100000 and _private(st))
            or st.st_size > MAX_IMAGE_BYTES
            or not _private(os.stat(directory))
        ):
            os.close(fd)
            return None
        head = os.pread(fd, len(FORMAT) + 4, 0)
        size = int.from_bytes(head[len(FORMAT) :], "little")
        if head[: len(FORMAT)] != FORMAT or size > MAX_INDEX_BYTES:
            os.close(fd)
            return None
        magic, optimize, written_for, index = marshal.loads(os.pread(fd, size, len(head)))
        if (magic, optimize, written_for) != (_magic(), sys.flags.optimize, real):
            os.close(fd)
            return None
    except BaseException:
        os.close(fd)
        raise
    if not isinstance(index, dict):
        os.close(fd)
        return None
    return fd, len(head) + size, st.st_size, index


def _finder(fd: int, start: int, end: int, index: _Index) -> object:
    """The meta path finder serving ``index``'s modules from the image open at ``fd``,
    whose code is between offsets ``start`` and ``end``."""
    bootstrap = sys.modules["_frozen_importlib"]
    external = sys.modules["_frozen_importlib_external"]
    code_type = type(_identity.__code__)
    fix_co_filename = sys.modules["_imp"]._fix_co_filename
    root = _package_root()
    dirs: dict[str, bool] = {}  # directory -> unchanged since the image was written

    class ImageLoader(external.SourceFileLoader):  # type: ignore[misc, name-defined]
        """A source file's loader (a ``SourceFileLoader``) whose code comes from the image
        (its own ``get_code`` when the image's does not unmarshal to code)."""

        def __init__(self, fullname: str, path: str, where: tuple[int, int]) -> None:
            super().__init__(fullname, path)
            self.where = where

        def get_code(self, fullname: str) -> CodeType:
            if fullname == self.name:
                try:
                    code = marshal.loads(os.pread(fd, self.where[1], self.where[0]))
                except Exception:  # the module's own .pyc or source then
                    code = None
                if isinstance(code, code_type):
                    # the file name this process imports it by, in the code's frames and
                    # tracebacks too (as the import system does for a .pyc)
                    fix_co_filename(code, self.path)
                    return code
            return super().get_code(fullname)  # type: ignore[no-any-return]

    def unchanged(directory: str, identity: object) -> bool:
        if directory not in dirs:
            dirs[directory] = _identity(os.stat(directory)) == identity
        return dirs[directory]

    class ImageFinder:
        """Finds the image's modules whose source and directory are unchanged since it
        was written."""

        @staticmethod
        def find_spec(
            fullname: str, path: object = None, target: ModuleType | None = None
        ) -> object:
            if not _ours(fullname):
                return None
            try:
                entry = index.get(fullname)
                if entry is None:
                    return None
                package, identity, dir_identity, offset, length = entry
                package = package is True
                file = _source(root, fullname, package)
                if not (offset >= 0 and 0 < length <= end - start - offset):
                    return None
                # a changed source, or a file added beside it (a package or an extension
                # module of the same name would win): imported as usual
                if not unchanged(os.path.dirname(file), tuple(dir_identity)):
                    return None
                if _identity(os.stat(file)) != tuple(identity):
                    return None
                loader = ImageLoader(fullname, file, (start + offset, length))
                spec = bootstrap.ModuleSpec(fullname, loader, origin=file, is_package=package)
                spec.has_location = True
                if package:
                    spec.submodule_search_locations = [os.path.dirname(file)]
            except Exception:  # an unusable entry: imported as usual
                return None
            return spec

    return ImageFinder


def write_image(names: Iterable[str], directory: str = DEFAULT_DIR) -> str | None:
    """Compile the modules ``names`` (``ocihook`` and ``ocihook.*``, from this process's
    installation) into the image for it in ``directory`` (:func:`image_path`), written
    atomically (a temporary file, then ``os.replace``), mode 0600; then remove the store's
    other images beyond the :data:`MAX_IMAGES` newest, and temporary files of writers
    that are gone. The directory must exist and be owned by this process's user and
    writable by no one else. A module whose source cannot be read or compiled, that an
    extension module of its name would shadow, or that has a directory of its name beside
    it, is left out (imported as usual). Each directory's ``__pycache__`` is made first
    (:func:`_make_pycache`).

    The image: :data:`FORMAT`, the index's length (4 bytes, little-endian), the index —
    ``marshal`` of (bytecode magic number, optimization level, the package directory's real
    path, {module name: (is a package, the source's identity, its directory's identity,
    offset, length)}) — then each module's marshalled code at its offset from there.

    Returns the path written, or ``None`` (a debug line says why) when it was not."""
    from . import log

    root = _package_root()
    try:
        if not _private(os.stat(directory)):
            log.debug("module image not written: store not private", path=directory)
            return None
    except OSError as e:
        log.debug("module image not written", path=directory, error=e.strerror)
        return None
    suffixes = sys.modules["_frozen_importlib_external"].EXTENSION_SUFFIXES
    dirs: dict[str, tuple[int, ...]] = {}
    blobs: list[bytes] = []
    index: _Index = {}
    offset = 0
    for name in sorted(n for n in set(names) if _ours(n)):
        package = os.path.isfile(_source(root, name, True))
        file = _source(root, name, package)
        base = file.removesuffix(".py")
        try:
            where = os.path.dirname(file)
            if where not in dirs:  # before its files are read: a later change is seen
                _make_pycache(where)
                dirs[where] = _identity(os.stat(where))
            if any(os.path.exists(base + suffix) for suffix in suffixes):
                raise ValueError("an extension module of that name is imported instead")
            if not package and os.path.isdir(base):
                # an __init__ put in it later would make it the package a normal import
                # takes, without changing the directory holding this file
                raise ValueError("a directory of that name is beside it")
            fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                identity = _identity(os.fstat(fd))
                data = b""
                while chunk := os.read(fd, 1 << 20):
                    data += chunk
            finally:
                os.close(fd)
            code = compile(data, file, "exec", dont_inherit=True, optimize=-1)
        except (OSError, SyntaxError, ValueError) as e:
            log.debug("module left out of the image", module=name, error=str(e))
            continue
        blob = marshal.dumps(code)
        index[name] = (package, identity, dirs[where], offset, len(blob))
        blobs.append(blob)
        offset += len(blob)
    table = marshal.dumps((_magic(), sys.flags.optimize, os.path.realpath(root), index))
    path = image_path(directory, root)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as e:
        log.debug("module image not written", path=path, error=e.strerror)
        return None
    try:
        try:
            view = memoryview(FORMAT + len(table).to_bytes(4, "little") + table + b"".join(blobs))
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        try:  # noqa: SIM105 (contextlib is not imported here)
            os.unlink(tmp)
        except OSError:
            pass
        log.debug("module image not written", path=path, error=e.strerror)
        return None
    _prune(directory, path)
    return path


def _make_pycache(directory: str) -> None:
    """Make ``directory``'s ``__pycache__`` when Python would write bytecode there and it is
    missing (best effort): the first normal import of a module there would make it, and
    so change the directory the image recorded for that directory's modules."""
    if sys.dont_write_bytecode or sys.pycache_prefix is not None:
        return
    try:  # noqa: SIM105 (contextlib is not imported here)
        os.mkdir(os.path.join(directory, "__pycache__"))
    except OSError:
        pass


def _prune(directory: str, keep: str) -> None:
    """Remove the images in ``directory`` beyond the :data:`MAX_IMAGES` newest (never
    ``keep``), and the temporary files of writers no longer running (best effort)."""
    images: list[tuple[int, str]] = []
    for entry in os.scandir(directory):
        if not entry.name.startswith("modules-"):
            continue
        try:
            if entry.name.endswith(".tmp"):
                pid = int(entry.name.rsplit(".", 2)[-2])
                if pid != os.getpid() and not os.path.exists(f"/proc/{pid}"):
                    os.unlink(entry.path)
            elif entry.name.endswith(".img") and entry.path != keep:
                images.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.path))
        except (OSError, ValueError):
            continue
    for _mtime, stale in sorted(images, reverse=True)[MAX_IMAGES - 1 :]:
        try:  # noqa: SIM105 (contextlib is not imported here)
            os.unlink(stale)
        except OSError:
            pass
