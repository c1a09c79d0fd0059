"""End to end with real runc: every image's own loader finds the driver's ``libcuda.so.1``,
in spec mode, hook mode and through the createContainer hook of a generated CDI spec.

The images are built here from the machine's real libc files: a Debian image (multiarch,
merged ``/usr``, ``/etc/debian_version``, an ``ld.so.cache`` made by ``ldconfig -r``), a
distroless-like one (the same files without ``/etc/debian_version``, ``ldconfig`` or a
cache), a RHEL-like one (``/usr/lib64``, ``/lib64`` a link into it), an Alpine-like musl
one (Debian's musl loader at ``/lib/ld-musl-x86_64.so.1``; with and without its own
``/etc/ld-musl-x86_64.path``), a Debian image whose cache names its own ``libcuda.so.1``,
and one with CUDA forward-compatibility libraries newer than the host's driver.

The driver is the simulated host with its ``libcuda`` replaced by
``tests/doubles/fake_libcuda.c`` compiled with ``gcc``. In the container a probe compiled
against the image's libc (``gcc`` or ``musl-gcc``) ``dlopen()``s ``libcuda.so.1`` and
prints ``dlerror()`` or the path the loader took it from (``dladdr``): that path is the
oracle.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support import REPO, edit_with_cdi, fill_packaged, need_root_and, register_hook

from ocihook.appliers.spec import edit_bundle
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover
from ocihook.sim import host as simhost
from ocihook.sim.demo import run_container

PROBE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
int main(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h) { printf("ERR %s\n", dlerror()); return 1; }
  int (*version)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
  Dl_info info;
  int v = 0;
  if (!version || version(&v) || !dladdr((void *)version, &info)) { printf("ERR symbol\n"); return 1; }
  printf("OK %s %d\n", info.dli_fname, v);
  return 0;
}
"""

GLIBC_DIR = "/lib/x86_64-linux-gnu"
MUSL_LOADER = "/lib/ld-musl-x86_64.so.1"
MULTIARCH = "/usr/lib/x86_64-linux-gnu"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The fake libcuda and the two probes, compiled on the host (skips without the
    compilers or on another machine than x86-64)."""
    if os.uname().machine != "x86_64":
        pytest.skip("the images here are x86-64's")
    if not shutil.which("gcc") or not shutil.which("musl-gcc"):
        pytest.skip("needs gcc and musl-gcc (scripts/setup: musl-tools)")
    d = tmp_path_factory.mktemp("loaders-build")
    (d / "probe.c").write_text(PROBE)
    out = {"libcuda": str(d / "libcuda.so"), "glibc": str(d / "probe-glibc")}
    out["musl"] = str(d / "probe-musl")
    fake = os.path.join(REPO, "tests/doubles/fake_libcuda.c")
    so = ["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", fake, "-o", out["libcuda"]]
    subprocess.run(["gcc", *so], check=True)
    subprocess.run(["gcc", "-O1", str(d / "probe.c"), "-o", out["glibc"]], check=True)
    subprocess.run(["musl-gcc", "-O1", str(d / "probe.c"), "-o", out["musl"]], check=True)
    return out


@pytest.fixture(scope="module")
def driver_root(
    sim: simhost.SimulatedHost, built: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> str:
    """A copy of the simulated host whose 64-bit libcuda is the compiled fake."""
    root = str(tmp_path_factory.mktemp("loaders-host") / "root")
    subprocess.run(["cp", "-a", sim.root, root], check=True)
    host = discover(HostRoot.single(root))
    lib = next(x for x in host.libraries if x.soname == "libcuda.so.1" and x.elf_class == 64)
    shutil.copyfile(built["libcuda"], lib.host_path)
    return root


def _copy(src: str, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(os.path.realpath(src), dst)
    dst.chmod(0o755)


def _ldconfig(rootfs: Path, *dirs: str) -> None:
    """The image's own cache, as its ``ldconfig`` would make it (the host's ``ldconfig``
    run on the tree: ``-r``)."""
    (rootfs / "etc/ld.so.conf").write_text("".join(f"{d}\n" for d in dirs))
    subprocess.run(["ldconfig", "-r", str(rootfs)], check=True)


def _debian_files(rootfs: Path) -> None:
    """Debian 12's merged /usr: /lib and /lib64 links into /usr, libc in the multiarch
    directory, /lib64's loader an absolute link to it."""
    for name in ("libc.so.6", "ld-linux-x86-64.so.2"):
        _copy(f"{GLIBC_DIR}/{name}", rootfs / MULTIARCH.lstrip("/") / name)
    (rootfs / "usr/lib64").mkdir(parents=True)
    (rootfs / "usr/lib64/ld-linux-x86-64.so.2").symlink_to(
        "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    )
    (rootfs / "lib").symlink_to("usr/lib")
    (rootfs / "lib64").symlink_to("usr/lib64")


def make_image(kind: str, rootfs: Path, built: dict[str, str]) -> tuple[str, str | None]:
    """Turn the busybox ``rootfs`` into an image of ``kind``. Returns the probe's path in
    the image and the directory the image's own ``libcuda.so.1`` is in (or ``None``)."""
    own = None
    if kind in ("debian", "debian-own-libcuda", "debian-compat", "distroless"):
        _debian_files(rootfs)
        if kind == "distroless":
            (rootfs / "etc/debian_version").unlink()
        elif kind == "debian-own-libcuda":
            own = "/opt/vendor"
            _copy(built["libcuda"], rootfs / "opt/vendor/libcuda.so.1")
            _ldconfig(rootfs, MULTIARCH, own)
        elif kind == "debian-compat":
            compat = rootfs / "usr/local/cuda/compat"
            _copy(built["libcuda"], compat / "libcuda.so.560.35.03")
            (compat / "libcuda.so.1").symlink_to("libcuda.so.560.35.03")
            _ldconfig(rootfs, MULTIARCH)
        else:
            _ldconfig(rootfs, MULTIARCH)
        probe = "glibc"
    elif kind == "rhel":
        (rootfs / "etc/debian_version").unlink(missing_ok=True)
        for name in ("libc.so.6", "ld-linux-x86-64.so.2"):
            _copy(f"{GLIBC_DIR}/{name}", rootfs / "usr/lib64" / name)
        (rootfs / "lib64").symlink_to("usr/lib64")
        _ldconfig(rootfs, "/usr/lib64")
        probe = "glibc"
    else:  # musl, musl-path-file
        (rootfs / "etc/debian_version").unlink(missing_ok=True)
        _copy(MUSL_LOADER, rootfs / MUSL_LOADER.lstrip("/"))
        if kind == "musl-path-file":
            (rootfs / "etc/ld-musl-x86_64.path").write_text("/lib\n/usr/lib\n")
        probe = "musl"
    _copy(built[probe], rootfs / "probe")
    return "/probe", own


def _register_poststop(bundle: str) -> None:
    """The packaged snippet's poststop hook (``ocihook hook poststop``: removes what hook
    mode made, restores the loader files it changed)."""
    with open(os.path.join(REPO, "packaging/config.json-hooks-snippet.json.in")) as f:
        snippet = json.loads(fill_packaged(f.read()))
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["hooks"]["poststop"] = snippet["hooks"]["poststop"]
    cfg.write_text(json.dumps(doc))


def _expected(kind: str, mode: str, cdi_dir: str) -> str:
    if kind == "debian-compat":
        return "/usr/local/cuda/compat/libcuda.so.1"
    if mode == "cdi":
        return f"{cdi_dir}/libcuda.so.1"
    libdir = MULTIARCH if kind.startswith(("debian", "distroless")) else "/usr/lib64"
    return f"{libdir}/libcuda.so.1"


KINDS = [
    "debian",
    "distroless",
    "rhel",
    "musl",
    "musl-path-file",
    "debian-own-libcuda",
    "debian-compat",
]
CASES = [(k, m) for k in KINDS for m in ("spec", "hook")] + [
    (k, "cdi") for k in ("distroless", "rhel", "musl", "musl-path-file", "debian-own-libcuda")
]


@pytest.mark.parametrize(("kind", "mode"), CASES, ids=[f"{k}-{m}" for k, m in CASES])
def test_the_images_loader_finds_libcuda(
    kind: str,
    mode: str,
    built: dict[str, str],
    driver_root: str,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    need_root_and("runc", "ldconfig")
    env = [] if mode == "cdi" else ["NVIDIA_VISIBLE_DEVICES=0"]
    script = "cat /etc/ld-musl-x86_64.path 2>/dev/null | sed 's/^/PATHFILE /'; /probe"
    bundle = bundle_factory(["sh", "-c", script], env, debian=True)
    rootfs = Path(bundle, "rootfs")
    make_image(kind, rootfs, built)
    host = discover(HostRoot.single(driver_root))
    cuda = next(x for x in host.libraries if x.soname == "libcuda.so.1" and x.elf_class == 64)
    cdi_dir = os.path.dirname(cuda.path)
    if mode == "spec":
        assert edit_bundle(bundle, HostRoot.single(driver_root)).written
    elif mode == "hook":
        register_hook(bundle, driver_root)
        _register_poststop(bundle)
    else:
        spec_dir = tmp_path / "cdi"
        spec_dir.mkdir()
        roots = ["--driver-root", driver_root, "--dev-root", driver_root]
        out = ["--output", str(spec_dir / "nvidia.yaml")]
        subprocess.run(
            [sys.executable, "-m", "ocihook", "cdi", "generate", *roots, *out], check=True
        )
        cfg = Path(bundle, "config.json")
        doc = json.loads(cfg.read_text())
        doc["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0")
        cfg.write_text(json.dumps(doc))
        edit_with_cdi(bundle, spec_dir, tmp_path)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == f"OK {_expected(kind, mode, cdi_dir)} 12040", proc.stdout
    path_file = rootfs / "etc/ld-musl-x86_64.path"
    searched = [ln.removeprefix("PATHFILE ") for ln in lines if ln.startswith("PATHFILE ")]
    # the directories of the 64-bit libraries: one for the layout's; for CDI the driver
    # root's own (libcuda's, and the multiarch one of the libraries directly in it)
    added = [MULTIARCH, cdi_dir] if mode == "cdi" else ["/usr/lib64"]
    if kind == "musl":
        assert searched[:3] == ["/lib", "/usr/local/lib", "/usr/lib"]
        assert sorted(searched[3:]) == added
        # hook mode's poststop removed the file it made; the other modes leave it
        assert path_file.exists() == (mode != "hook")
    elif kind == "musl-path-file":
        assert searched[:2] == ["/lib", "/usr/lib"] and sorted(searched[2:]) == added
        want = "/lib\n/usr/lib\n" if mode == "hook" else "".join(f"{d}\n" for d in searched)
        assert path_file.read_text() == want
    else:
        assert searched == [] and not path_file.exists()


def test_without_ocihook_the_musl_image_does_not_find_it(
    built: dict[str, str], driver_root: str, bundle_factory: Callable[..., str], tmp_path: Path
) -> None:
    """The control: the same musl image given the same bind mounts and links through
    ``config.json`` alone (no path file) does not find ``libcuda.so.1``: the path file is
    what makes the difference above."""
    need_root_and("runc")
    bundle = bundle_factory(["/probe"], ["NVIDIA_VISIBLE_DEVICES=0"], debian=True)
    rootfs = Path(bundle, "rootfs")
    make_image("musl", rootfs, built)
    assert edit_bundle(bundle, HostRoot.single(driver_root)).written
    (rootfs / "etc/ld-musl-x86_64.path").unlink()
    proc = run_container(bundle, state_root=str(tmp_path / "runc"), timeout=60)
    assert proc.returncode == 1
    assert proc.stdout.startswith("ERR ") and "libcuda.so.1" in proc.stdout, proc.stdout


HOOK_FREE_KINDS = ["debian", "distroless", "rhel", "musl", "musl-path-file"]


@pytest.mark.parametrize("kind", HOOK_FREE_KINDS)
def test_hook_free_spec_needs_no_hook(
    kind: str,
    built: dict[str, str],
    driver_root: str,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    """``cdi generate --hook-free``: config.json gets no hook at all, and each image's
    loader still finds ``libcuda.so.1``, mounted as the real file at ``/usr/lib`` and
    ``/usr/lib64`` (glibc's and musl's default search directories): no link, no
    ``ld.so.cache`` entry, no path file."""
    need_root_and("runc", "ldconfig")
    bundle = bundle_factory(["/probe"], [], debian=True)
    rootfs = Path(bundle, "rootfs")
    make_image(kind, rootfs, built)
    path_file = rootfs / "etc/ld-musl-x86_64.path"
    before = path_file.read_text() if path_file.exists() else None
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    roots = ["--driver-root", driver_root, "--dev-root", driver_root]
    out = ["--output", str(spec_dir / "nvidia.yaml"), "--hook-free"]
    subprocess.run([sys.executable, "-m", "ocihook", "cdi", "generate", *roots, *out], check=True)
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["process"]["env"].append("NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0")
    cfg.write_text(json.dumps(doc))
    edit_with_cdi(bundle, spec_dir, tmp_path)
    doc = json.loads(cfg.read_text())
    assert not any(doc.get("hooks", {}).values()), doc.get("hooks")
    proc = run_container(bundle, state_root=str(tmp_path / "runc"), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # this machine's glibc (Debian's, in every glibc image here) searches /lib before
    # /usr/lib, the same directory in a merged-/usr image; a RHEL glibc searches /usr/lib64
    want = {"OK /usr/lib/libcuda.so.1 12040"}
    if (rootfs / "lib").is_symlink():
        want.add("OK /lib/libcuda.so.1 12040")
    if kind == "rhel":
        want.add("OK /usr/lib64/libcuda.so.1 12040")
    assert proc.stdout.splitlines()[-1] in want, proc.stdout
    assert (path_file.read_text() if path_file.exists() else None) == before
