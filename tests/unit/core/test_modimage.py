"""The start path's module image (:mod:`ocihook.core.modimage`): modules served from it are
what a normal import gives (the same code, file, spec and package path); a module whose
source changed, an image that is not private, corrupt or another installation's, is
imported as usual; nothing about the image ever makes an import fail."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import REPO

from ocihook.core import modimage
from ocihook.core.startpath import START_PATH_MODULES
from ocihook.linux import cachestore

#: Modules of the CDI spec's hook, a package's __init__ among them.
MODULES = [
    "ocihook.appliers.live",
    "ocihook.appliers.live.hooks",
    "ocihook.cdi.hookargs",
    "ocihook.commands.cdihook",
    "ocihook.linux.ldcache",
]

#: strace, writing the files a process opens to the path that follows.
STRACE = ["strace", "-f", "-e", "trace=openat,execve", "-o"]

#: Run in a fresh ``python -I -S`` with the package's root first on sys.path: install the
#: image of ``DIR`` (when ``USE``), import ``MODULES`` and print, per module, its loader's
#: class, file, cached file, spec origin, package path and public names, and a value
#: computed by its code.
_PROBE = """
import json, sys
sys.path[:0] = [ROOT]
from ocihook.core import modimage
installed = modimage.install(DIR) if USE else False
out = {"installed": installed}
for name in MODULES:
    __import__(name)
    m = sys.modules[name]
    out[name] = [
        type(m.__loader__).__name__, m.__file__, m.__cached__, m.__spec__.origin,
        getattr(m, "__path__", None), sorted(n for n in vars(m) if not n.startswith("__")),
    ]
from ocihook.cdi.hookargs import expand_links
out["value"] = expand_links(["/usr/lib::libcuda.so.1/libcuda.so.1.2"])
print(json.dumps(out))
"""


def _probe(root: Path | str, image_dir: Path, use: bool = True) -> dict[str, object]:
    code = f"ROOT = {str(root)!r}\nDIR = {str(image_dir)!r}\nUSE = {use}\nMODULES = {MODULES!r}\n"
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code + _PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    out: dict[str, object] = json.loads(r.stdout)
    return out


def _write(root: Path | str, image_dir: Path, names: list[str]) -> str:
    """Write the image of the installation at ``root`` (in a fresh interpreter)."""
    code = (
        f"import sys\nsys.path[:0] = [{str(root)!r}]\n"
        "from ocihook.core import modimage\n"
        f"print(modimage.write_image({names!r}, {str(image_dir)!r}))\n"
    )
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _pycs_opened(trace: str) -> set[str]:
    """The .pyc files of the package (relative to it) a strace ``trace`` shows opened."""
    return {
        line.split('"')[1].split("/ocihook/", 1)[1]
        for line in trace.splitlines()
        if '.pyc"' in line and "/ocihook/" in line and "O_RDONLY" in line and "ENOENT" not in line
    }


def _compiled() -> None:
    """Compile the checkout's package, as an installation has it (a fresh clone has no
    .pyc: a normal import would compile rather than read them)."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", f"{REPO}/ocihook"], check=True, timeout=120
    )


def _pycs(modules: tuple[str, ...]) -> set[str]:
    """The .pyc files (relative to the package) of ``modules`` (``core/lazy``)."""
    tag = sys.implementation.cache_tag
    return {
        f"{os.path.dirname(m) + '/' if '/' in m else ''}__pycache__/{os.path.basename(m)}.{tag}.pyc"
        for m in modules
    }


def _edit_index(path: Path, edit: Callable[[str, dict[str, Any]], str]) -> None:
    """Rewrite the image at ``path`` with its index passed through ``edit(root, index)``
    (which changes the index in place and returns the root to write)."""
    import marshal

    data = path.read_bytes()
    head = len(modimage.FORMAT) + 4 + int.from_bytes(data[8:12], "little")
    magic, optimize, real, index = marshal.loads(data[12:head])
    real = edit(real, index)
    table = marshal.dumps((magic, optimize, real, index))
    path.write_bytes(modimage.FORMAT + len(table).to_bytes(4, "little") + table + data[head:])


@pytest.fixture
def image_dir(tmp_path: Path) -> Path:
    d = tmp_path / "store"
    d.mkdir(mode=0o700)
    return d


def test_modules_from_the_image_are_what_an_import_gives(image_dir: Path) -> None:
    path = _write(REPO, image_dir, MODULES)
    assert path == modimage.image_path(str(image_dir), REPO)
    assert os.stat(path).st_mode & 0o777 == 0o600
    served = _probe(REPO, image_dir)
    plain = _probe(REPO, image_dir, use=False)
    assert served["installed"] is True and plain["installed"] is False
    assert served["value"] == plain["value"] == ["libcuda.so.1.2::/usr/lib/libcuda.so.1"]
    for name in MODULES:
        loader, *rest = served[name]  # type: ignore[misc]
        assert loader == "ImageLoader", name
        assert plain[name][0] == "SourceFileLoader"  # type: ignore[index]
        assert rest == plain[name][1:], name  # type: ignore[index]


def test_a_changed_source_is_imported_from_itself(image_dir: Path, tmp_path: Path) -> None:
    """An upgrade or an edit: the module whose source changed since the image was written
    is compiled from its source; the others still come from the image."""
    root = tmp_path / "install"
    shutil.copytree(Path(REPO) / "ocihook", root / "ocihook")
    _write(root, image_dir, MODULES)
    hookargs = root / "ocihook/cdi/hookargs.py"
    hookargs.write_text(
        hookargs.read_text() + "\n\ndef expand_links(_v: object) -> list[str]:\n"
        "    return ['edited']\n"
    )
    served = _probe(root, image_dir)
    assert served["value"] == ["edited"]
    assert served["ocihook.cdi.hookargs"][0] == "SourceFileLoader"  # type: ignore[index]
    assert served["ocihook.linux.ldcache"][0] == "ImageLoader"  # type: ignore[index]
    # rewritten with the same size and mtime (a reinstall from a reproducible package),
    # maybe on the inode number it had: its ctime differs
    ldcache = root / "ocihook/linux/ldcache.py"
    st = ldcache.stat()
    ldcache.write_bytes(ldcache.read_bytes().replace(b"cache", b"CACHE", 1))  # its docstring
    os.utime(ldcache, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = ldcache.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
    )
    assert _probe(root, image_dir)["ocihook.linux.ldcache"][0] == "SourceFileLoader"  # type: ignore[index]


@pytest.mark.parametrize("what", ["file group-writable", "store world-writable", "a link"])
def test_an_image_that_is_not_private_is_not_used(image_dir: Path, what: str) -> None:
    path = Path(_write(REPO, image_dir, MODULES))
    if what == "file group-writable":
        path.chmod(0o620)
    elif what == "store world-writable":
        image_dir.chmod(0o777)
    else:
        moved = image_dir / "elsewhere.img"
        path.rename(moved)
        path.symlink_to(moved)
    served = _probe(REPO, image_dir)
    assert served["installed"] is False
    assert all(served[n][0] == "SourceFileLoader" for n in MODULES)  # type: ignore[index]


@pytest.mark.parametrize(
    "damage",
    ["empty", "format", "index", "truncated code", "code is not code", "index of another root"],
)
def test_a_damaged_image_means_a_normal_import(image_dir: Path, damage: str) -> None:
    """Never an error: the modules import, from their sources where the image's code is
    unusable."""
    import marshal

    path = Path(_write(REPO, image_dir, MODULES))
    data = path.read_bytes()
    head = len(modimage.FORMAT) + 4 + int.from_bytes(data[len(modimage.FORMAT) :][:4], "little")
    magic, optimize, root, index = marshal.loads(data[len(modimage.FORMAT) + 4 : head])
    if damage == "empty":
        data = b""
    elif damage == "format":
        data = b"OCIHMOD0" + data[8:]
    elif damage == "index":
        data = data[: len(modimage.FORMAT) + 4] + b"\xff" * 64 + data[head:]
    elif damage == "truncated code":
        data = data[: head + 10]
    elif damage == "code is not code":
        blob = marshal.dumps(["not", "code"])
        entry = index["ocihook.cdi.hookargs"]
        index["ocihook.cdi.hookargs"] = (*entry[:3], len(data) - head, len(blob))
        table = marshal.dumps((magic, optimize, root, index))
        data = modimage.FORMAT + len(table).to_bytes(4, "little") + table + data[head:] + blob
    else:
        table = marshal.dumps((magic, optimize, "/elsewhere", index))
        data = modimage.FORMAT + len(table).to_bytes(4, "little") + table + data[head:]
    path.write_bytes(data)
    served = _probe(REPO, image_dir)
    assert served["value"] == ["libcuda.so.1.2::/usr/lib/libcuda.so.1"]
    if damage in ("truncated code", "code is not code"):
        assert served["installed"] is True
    else:
        assert served["installed"] is False


def test_each_installation_has_its_own_image(image_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "other"
    shutil.copytree(Path(REPO) / "ocihook", root / "ocihook")
    ours, theirs = _write(REPO, image_dir, MODULES), _write(root, image_dir, MODULES)
    assert ours != theirs and {Path(ours).name, Path(theirs).name} == {
        p.name for p in image_dir.iterdir()
    }
    assert _probe(root, image_dir)["ocihook.linux.ldcache"][0] == "ImageLoader"  # type: ignore[index]


def test_write_image_refuses_a_store_that_is_not_private(image_dir: Path) -> None:
    image_dir.chmod(0o777)
    assert modimage.write_image(MODULES, str(image_dir)) is None
    assert list(image_dir.iterdir()) == []
    assert modimage.write_image(MODULES, str(image_dir / "missing")) is None


def test_the_image_holds_the_start_path() -> None:
    """The boot unit's image holds every start-path module, the store is the cache's."""
    assert modimage.DEFAULT_DIR == cachestore.DEFAULT_DIR
    assert "ocihook.core.modimage" in START_PATH_MODULES
    assert {"ocihook.commands.cdihook", "ocihook.linux.pathsafe"} <= START_PATH_MODULES


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_the_cdi_hook_reads_no_pyc_of_the_image(image_dir: Path, tmp_path: Path) -> None:
    """The CDI spec's hook program (:func:`ocihook._main.run`), run on a bundle: with the
    image, it opens the .pyc files of the modules it imported before the image was
    installed, and of none that the image holds; it does its work alike."""
    from support import make_bundle

    _compiled()
    _write(REPO, image_dir, sorted(START_PATH_MODULES))
    results = []
    for use in (True, False):
        bundle = make_bundle(tmp_path, name=f"b{use}")
        state = {"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 2147483647}
        code = (
            f"import sys\nsys.path[:0] = [{REPO!r}]\n"
            "from ocihook.core import modimage\n"
            f"modimage.DEFAULT_DIR = {str(image_dir if use else tmp_path / 'none')!r}\n"
            "sys.argv = ['ocihook', 'hook', 'cdi', '--links', '/usr/lib::libx.so.1/libx.so.1.0']\n"
            "from ocihook._main import run\nrun()\n"
        )
        trace = tmp_path / f"trace{use}"
        r = subprocess.run(
            [*STRACE, str(trace), sys.executable, "-I", "-S", "-c", code],
            input=json.dumps({**state, "bundle": str(bundle)}),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert (r.returncode, r.stderr) == (0, ""), r.stderr
        assert os.readlink(bundle / "rootfs/usr/lib/libx.so.1") == "libx.so.1.0"
        results.append(_pycs_opened(trace.read_text()))
    with_image, without = results
    # ocihook._main's imports, before run() installs the image
    before = _pycs(
        ("__init__", "_main", "core/__init__", "core/lazy", "core/stdio", "core/modimage")
    )
    assert len(without) > 25  # every module of the hook, from its .pyc
    assert with_image == before


def _copy(tmp_path: Path, name: str = "install") -> Path:
    root = tmp_path / name
    shutil.copytree(Path(REPO) / "ocihook", root / "ocihook")
    return root


def _value_of(root: Path | str, image_dir: Path, module: str, use: bool = True) -> list[str]:
    """``module``'s ``VALUE`` and ``__file__``, and whether the image's finder served it."""
    code = (
        f"import sys\nsys.path[:0] = [{str(root)!r}]\n"
        "from ocihook.core import modimage\n"
        f"{'modimage.install(' + repr(str(image_dir)) + ')' if use else ''}\n"
        f"import {module} as m\n"
        "print(m.VALUE, m.__file__, type(m.__loader__).__name__)\n"
    )
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_a_package_added_beside_a_module_wins_as_in_a_normal_import(
    image_dir: Path, tmp_path: Path
) -> None:
    """An install that copies over the old files (no removal) turned ``zz.py`` into the
    package ``zz/``: a normal import takes the package, and so does a start with the
    image, whose ``zz.py`` (unchanged) must not be served."""
    root = _copy(tmp_path)
    (root / "ocihook/zz.py").write_text("VALUE = 'module'\n")
    _write(root, image_dir, ["ocihook.zz"])
    assert _value_of(root, image_dir, "ocihook.zz")[::2] == ["module", "ImageLoader"]
    (root / "ocihook/zz").mkdir()
    (root / "ocihook/zz/__init__.py").write_text("VALUE = 'package'\n")
    assert _value_of(root, image_dir, "ocihook.zz") == _value_of(
        root, image_dir, "ocihook.zz", use=False
    )
    assert _value_of(root, image_dir, "ocihook.zz")[0] == "package"


def test_the_paths_are_spelled_as_the_import_system_spells_them(
    image_dir: Path, tmp_path: Path
) -> None:
    """One installation reached through another spelling of its directory (``..``, a
    symbolic link) uses its image, with the file names a normal import gives; another
    installation that only collapses to the same text does not."""
    root = _copy(tmp_path)
    (root / "ocihook/zz.py").write_text("VALUE = 'A'\n")
    _write(root, image_dir, ["ocihook.zz"])
    (tmp_path / "link").symlink_to(root)
    for spelling in (f"{tmp_path}/x/../install", f"{tmp_path}/link"):
        if "/x/" in spelling:
            (tmp_path / "x").mkdir(exist_ok=True)
        served = _value_of(spelling, image_dir, "ocihook.zz")
        assert served[:2] == _value_of(spelling, image_dir, "ocihook.zz", use=False)[:2]
        assert served[1].startswith(spelling) and served[2] == "ImageLoader"
    # B at deep/install, reached as link2/../install where link2 -> deep/sub: the text
    # collapses to tmp/install (A's), the kernel goes to deep/install (B's)
    other = tmp_path / "deep"
    _copy(other)
    (other / "install/ocihook/zz.py").write_text("VALUE = 'B'\n")
    (other / "sub").mkdir()
    (tmp_path / "link2").symlink_to(other / "sub")
    assert _value_of(f"{tmp_path}/link2/../install", image_dir, "ocihook.zz")[::2] == [
        "B",
        "SourceFileLoader",
    ]


@pytest.mark.parametrize(
    "entry",
    [
        ("x", 0),  # an offset that is no number
        (-1, 10),
        (0, 10**12),  # past the end
        (0, 0),
    ],
)
def test_an_entry_out_of_shape_is_a_normal_import(
    image_dir: Path, tmp_path: Path, entry: tuple[object, int]
) -> None:
    root = _copy(tmp_path)
    (root / "ocihook/zz.py").write_text("VALUE = 'source'\n")

    def edit(real: str, index: dict[str, Any]) -> str:
        index["ocihook.zz"] = (*index["ocihook.zz"][:3], *entry)
        return real

    _edit_index(Path(_write(root, image_dir, ["ocihook.zz"])), edit)
    assert _value_of(root, image_dir, "ocihook.zz")[::2] == ["source", "SourceFileLoader"]


def test_only_ocihook_modules_are_served(image_dir: Path, tmp_path: Path) -> None:
    """An index naming another module (a standard one, or one on sys.path) is ignored for
    it: the image serves ocihook's modules alone."""
    root = _copy(tmp_path)
    (root / "zzforeign.py").write_text("VALUE = 'source'\n")
    (root / "ocihook/zz.py").write_text("VALUE = 'image'\n")

    def edit(real: str, index: dict[str, Any]) -> str:
        index["zzforeign"] = index["ocihook.zz"]  # would give "image"
        return real

    _edit_index(Path(_write(root, image_dir, ["ocihook.zz"])), edit)
    assert _value_of(root, image_dir, "zzforeign")[::2] == ["source", "SourceFileLoader"]
    assert _value_of(root, image_dir, "ocihook.zz")[::2] == ["image", "ImageLoader"]


def test_the_store_keeps_a_few_images_and_no_dead_writers_files(
    image_dir: Path, tmp_path: Path
) -> None:
    dead = image_dir / "modules-0000000000000000.img.2147483646.tmp"
    dead.write_bytes(b"x")
    paths = [_write(_copy(tmp_path, f"i{n}"), image_dir, ["ocihook.core.lazy"]) for n in range(6)]
    left = sorted(p.name for p in image_dir.iterdir())
    assert len(left) == modimage.MAX_IMAGES
    assert Path(paths[-1]).name in left and not dead.exists()


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_the_wrapper_reads_no_pyc_of_the_image(image_dir: Path, tmp_path: Path) -> None:
    """``ocihook-runtime`` (:func:`ocihook.runtime.run`) for a container that asks for
    nothing, the real runtime a stand-in (``/bin/true``): with the image, it opens no .pyc
    but those of the modules it imported before installing it."""
    from support import make_bundle

    _compiled()
    _write(REPO, image_dir, sorted(START_PATH_MODULES))
    bundle = make_bundle(tmp_path)
    config = tmp_path / "config.toml"
    config.write_text('runtimes = ["/bin/true"]\n')
    code = (
        f"import sys\nsys.path[:0] = [{REPO!r}]\n"
        "from ocihook.core import modimage\n"
        f"modimage.DEFAULT_DIR = {str(image_dir)!r}\n"
        f"sys.argv = ['ocihook-runtime', 'create', '-b', {str(bundle)!r}, 'c1']\n"
        "from ocihook.runtime import run\nrun()\n"
    )
    trace = tmp_path / "trace"
    r = subprocess.run(
        [*STRACE, str(trace), sys.executable, "-I", "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "OCIHOOK_CONFIG": str(config)},
    )
    assert (r.returncode, r.stderr) == (0, ""), r.stderr
    text = trace.read_text()
    assert 'execve("/bin/true"' in text  # the wrapper handed over to the runtime
    opened = {
        line.split('"')[1].split("/ocihook/", 1)[1]
        for line in text.splitlines()
        if ".pyc" in line and "/ocihook/" in line and "ENOENT" not in line
    }
    tag = sys.implementation.cache_tag
    before = {  # what `from ocihook.runtime import run` loads, before run() installs it
        f"{os.path.dirname(m) + '/' if '/' in m else ''}__pycache__/{os.path.basename(m)}.{tag}.pyc"
        for m in (
            "__init__",
            "runtime",
            "core/__init__",
            "core/lazy",
            "core/stdio",
            "core/modimage",
        )
    }
    assert opened == before


def test_the_code_names_the_file_this_process_imports(image_dir: Path, tmp_path: Path) -> None:
    """Written through one spelling of the installation, served through another: the
    code's own file name (frames, tracebacks, warnings) is the one this process imports
    it by, as the import system fixes it for a .pyc."""
    root = _copy(tmp_path)
    (root / "ocihook/zz.py").write_text("VALUE = 'x'\n\ndef f() -> None:\n    pass\n")
    _write(root, image_dir, ["ocihook.zz"])
    (tmp_path / "link").symlink_to(root)
    code = (
        f"import sys\nsys.path[:0] = [{str(tmp_path / 'link')!r}]\n"
        f"from ocihook.core import modimage\nmodimage.install({str(image_dir)!r})\n"
        "import ocihook.zz as m\n"
        "print(type(m.__loader__).__name__, m.__file__, m.f.__code__.co_filename)\n"
    )
    r = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stderr
    loader, file, co_filename = r.stdout.split()
    assert loader == "ImageLoader"
    assert file == co_filename == str(tmp_path / "link/ocihook/zz.py")


def test_a_module_beside_a_directory_of_its_name_is_left_out(
    image_dir: Path, tmp_path: Path
) -> None:
    """``zz.py`` beside a directory ``zz/`` (a package's leftovers): an ``__init__.py`` put
    there later would make the package the one a normal import takes, without changing
    the directory holding ``zz.py``; so ``zz`` is not in the image."""
    root = _copy(tmp_path)
    (root / "ocihook/zz.py").write_text("VALUE = 'module'\n")
    (root / "ocihook/zz").mkdir()
    _write(root, image_dir, ["ocihook.zz"])
    assert _value_of(root, image_dir, "ocihook.zz")[::2] == ["module", "SourceFileLoader"]
    (root / "ocihook/zz/__init__.py").write_text("VALUE = 'package'\n")
    assert _value_of(root, image_dir, "ocihook.zz")[::2] == ["package", "SourceFileLoader"]


def test_a_tree_without_bytecode_keeps_its_image(image_dir: Path, tmp_path: Path) -> None:
    """An installation without .pyc files (``pip --no-compile``, a source tree): the first
    normal import in a directory would make its ``__pycache__`` and so change the
    directory the image recorded; the image's writer makes them first, so the image
    serves every start, not only the first."""
    root = _copy(tmp_path)
    for cache in list(root.rglob("__pycache__")):
        shutil.rmtree(cache)
    (root / "ocihook/cdi/zz.py").write_text("VALUE = 'image'\n")
    _write(root, image_dir, ["ocihook.cdi.zz"])
    for _ in range(2):  # the first start writes the .pyc of the modules not in the image
        assert _value_of(root, image_dir, "ocihook.cdi.zz")[::2] == ["image", "ImageLoader"]
