"""OCI bundles and the hooks registered in them: :func:`make_bundle` (a bundle with an
empty rootfs and the ``config.json`` given), :func:`busybox_bundle` (one that runs), :func:`packaged_hook` / :func:`register_hook` (the documented
registration), :func:`stage_hook` / :func:`register_stage_hook`, :func:`fake_proc_hook`
(a hook standing in for the kernel driver's procfs), :func:`with_mknod_cap`,
:func:`config_bytes`, :func:`make_executable`."""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ocihook.sim.demo import default_config, find_busybox, make_busybox_bundle
from support.paths import REPO


def make_bundle(
    parent: str | Path,
    env: list[str] | None = None,
    *,
    name: str = "bundle",
    doc: dict[str, Any] | None = None,
    minimal: bool = False,
    indent: str | None = "\t",
    mode: int | None = None,
    **fields: Any,
) -> Path:
    """A bundle ``parent/name`` with an empty ``rootfs/`` (parents made; an existing one is
    reused) and a ``config.json``.

    Args:
        parent: the directory the bundle is made in.
        env: the process environment after the default ``PATH``
            (:func:`ocihook.sim.demo.default_config`, process ``sh``); ignored with ``doc``.
        name: the bundle directory's name.
        doc: the whole ``config.json`` document instead of the default one.
        minimal: start from only ``ociVersion``, ``root.path`` and ``process.env`` instead
            of the default document.
        indent: the JSON indentation (``None``: one line); a newline ends the file when set.
        fields: top-level keys replaced in the default document (``annotations``,
            ``mounts``, ...).
        mode: the bundle directory's mode, set after it is made.

    Returns:
        The bundle directory.
    """
    bundle = Path(parent, name)
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    if doc is None:
        if minimal:
            doc = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"env": env or []}}
        else:
            doc = default_config(["sh"], env or [])
        doc.update(fields)
    if mode is not None:
        bundle.chmod(mode)
    text = json.dumps(doc) if indent is None else json.dumps(doc, indent=indent) + "\n"
    (bundle / "config.json").write_text(text)
    return bundle


def busybox_bundle(
    path: str | Path, args: list[str], env: list[str], *, debian: bool = False
) -> str:
    """A bundle at ``path`` that runs ``args`` in a busybox rootfs
    (:func:`ocihook.sim.demo.make_busybox_bundle`; ``debian``: Debian's library
    directories); skips the test when no static busybox is installed. Returns the path."""
    if find_busybox() is None:
        pytest.skip("needs busybox (apt-get install busybox-static)")
    return make_busybox_bundle(str(path), args, env, debian=debian)


@functools.cache
def installed_start_path_dirs() -> list[str]:
    """:func:`ocihook.config.options.start_path_dirs` as the installed commands see it: in
    a fresh ``-I`` interpreter (this test process has the test directories on
    ``sys.path`` too), what ``runtime configure`` and the wrapper write into the hooks."""
    code = "from ocihook.config.options import start_path_dirs as s; print(repr(s()))"
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True, cwd="/"
    ).stdout
    dirs: list[str] = ast.literal_eval(out.strip())
    return dirs


def fill_packaged(text: str) -> str:
    """A packaged registration template (``packaging/``) as its README says to fill it:
    ``@PYTHON@`` this interpreter, ``@SYSPATH@`` its start-path directories
    (:func:`installed_start_path_dirs`)."""
    filled = text.replace("@SYSPATH@", repr(installed_start_path_dirs()))
    return filled.replace("@PYTHON@", sys.executable)


def packaged_hook(stage: str, root: str) -> dict[str, Any]:
    """ocihook's hook entry as packaging/config.json-hooks-snippet.json.in gives it, with
    ``@PYTHON@`` replaced by this interpreter, for ``stage``, reading the simulated host
    at ``root`` (the registration docs/guide/hook-mode.md shows, so the tests exercise the documented one)."""
    with open(os.path.join(REPO, "packaging/config.json-hooks-snippet.json.in")) as f:
        snippet = json.loads(fill_packaged(f.read()))
    hook: dict[str, Any] = snippet["hooks"]["prestart"][0]
    hook["args"] = [*hook["args"][:-1], stage, "--driver-root", root, "--dev-root", root]
    return hook


def register_hook(bundle: str, root: str, stage: str = "prestart") -> None:
    """Add :func:`packaged_hook` to the bundle's ``config.json`` under ``stage``."""
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        doc = json.load(f)
    doc.setdefault("hooks", {}).setdefault(stage, []).append(packaged_hook(stage, root))
    with open(path, "w") as f:
        json.dump(doc, f, indent="\t")


def make_executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> str:
    """Write ``text`` to ``path`` (parents made), mode 0755; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def config_bytes(bundle: str) -> bytes:
    """The bytes of the bundle's ``config.json``."""
    with open(os.path.join(bundle, "config.json"), "rb") as f:
        return f.read()


def with_mknod_cap(bundle: str) -> None:
    """Give the bundle's process CAP_MKNOD (bounding, effective, permitted)."""
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        doc = json.load(f)
    for key in ("bounding", "effective", "permitted"):
        doc["process"]["capabilities"][key].append("CAP_MKNOD")
    with open(path, "w") as f:
        json.dump(doc, f, indent="\t")


def stage_hook(stage: str, root: str, env: list[str] | None = None) -> dict[str, Any]:
    """:func:`packaged_hook` for ``stage``, with the hook's ``env`` set when given."""
    hook = packaged_hook(stage, root)
    if env is not None:
        hook["env"] = env
    return hook


def register_stage_hook(
    bundle: str, stage: str, hook: dict[str, Any], readonly: bool = False
) -> None:
    """Make ``hook`` the bundle's only hook (at ``stage``); ``root.readonly`` set."""
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["hooks"] = {stage: [hook]}
    doc["root"]["readonly"] = readonly
    cfg.write_text(json.dumps(doc))


FAKE_DRIVER_PROC = """
import json, subprocess, sys
state = json.load(sys.stdin)
d = state["bundle"] + "/rootfs/proc/driver"
subprocess.run(["nsenter", "-t", str(state["pid"]), "-m", "sh", "-c",
    f"mount -t tmpfs tmpfs {d} && mkdir -p {d}/nvidia/gpus/stale && "
    f"echo 'ModifyDeviceFiles: 1' > {d}/nvidia/params"], check=True)
"""


def fake_proc_hook(bundle: str, tmp_path: Any) -> dict[str, Any]:
    """A prestart hook of the test's, run before ocihook's, that stands in for the kernel
    driver: it puts a /proc/driver/nvidia (with a GPU directory the container must not
    see) into the container's procfs, as the real driver would show."""
    script = tmp_path / "fake_driver_proc.py"
    script.write_text(FAKE_DRIVER_PROC)
    return {"path": sys.executable, "args": [sys.executable, "-I", str(script)]}


def rootfs_tree(root: str | Path) -> dict[str, str]:
    """Every entry below ``root`` by relative path: ``-> TARGET`` for a symbolic link,
    ``dir MODE UID:GID`` for a directory, else ``MODE UID:GID SIZE SHA256`` (the
    permission bits in octal, the owner, the size and the digest of the content)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            owner = f"{st.st_mode & 0o7777:o} {st.st_uid}:{st.st_gid}"
            if os.path.islink(p):
                out[rel] = "-> " + os.readlink(p)
            elif os.path.isdir(p):
                out[rel] = f"dir {owner}"
            else:
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                out[rel] = f"{owner} {st.st_size} {digest}"
    return out
