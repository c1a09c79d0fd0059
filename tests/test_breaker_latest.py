"""Breaker tests for the newest changes (failing tests show defects; see each docstring).

- the wrapper's ``-h``/``--help`` pass-through (``ocihook/runtime.py``);
- ``runtime configure``'s read-back check and imports (``ocihook/engines.py``);
- the MIG capability files in the masked ``/proc/driver/nvidia`` (``ocihook/appliers/live.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import need_root_and
from test_runtime_configure import containerd_default, containerd_dump, run_configure
from test_runtime_wrapper import Stage, _config, stage  # noqa: F401

from ocihook.appliers.spec import edit_bundle
from ocihook.commands.engines import configure, configure_containerd
from ocihook.commands.runtime import parse_args
from ocihook.core.errors import EXIT_CODES, EngineConfigError
from ocihook.core.hostroot import HostRoot
from ocihook.settings import HOOK_PROGRAM
from ocihook.sim import host as simhost

CRI = "io.containerd.grpc.v1.cri"

# --- ocihook-runtime: --help=false is not help ---------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["create", "--help=false", "-b", "/b", "cid"],
        ["run", "-b", "/b", "cid", "-h=0"],
        ["--help=false", "create", "-b", "/b", "cid"],
        ["create", "-help=False", "--bundle", "/b", "cid"],
    ],
)
def test_help_false_is_not_help(args: list[str]) -> None:
    """runc's flags are Go ``flag`` booleans (urfave/cli): ``--help=false``, ``-h=0``,
    ``-help=False`` set help to false and runc creates the container (checked with the real
    runc in :func:`test_runc_creates_with_help_false`). The wrapper takes any ``help``/``h``
    option as help and skips the edit: a silent bypass of the configured mode (the
    container starts without its GPUs / legacy hook)."""
    inv = parse_args(args)
    assert inv.command in ("create", "run")
    assert inv.help is False


def test_runc_creates_with_help_false(
    stage: Stage,  # noqa: F811
    bundle_factory: Callable[..., str],
    sim: simhost.SimulatedHost,
    tmp_path: Path,
) -> None:
    """End to end: the real runc runs a container given ``run --help=false``; the wrapper,
    given the same command line for a GPU bundle, must still edit ``config.json``."""
    need_root_and("runc")
    probe = bundle_factory(["echo", "RAN"], [])
    proc = subprocess.run(
        ["runc", "--root", str(tmp_path / "runc"), "run", "--help=false", "-b", probe, "p1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "RAN" in proc.stdout, proc.stderr  # runc: not help
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    twin = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    with open(os.path.join(os.path.dirname(sys.executable), "ocihook-runtime")) as f:
        python = f.readline()[2:].strip()
    command = (python, "-I", "-c", HOOK_PROGRAM)
    want = edit_bundle(twin, HostRoot.single(sim.root), dry_run=True, command=command).after
    before = _config(bundle)
    proc = stage.run("create", "--help=false", "-b", bundle, "cid")
    assert proc.returncode == 0, proc.stderr
    assert stage.called() is not None  # the (stand-in) runtime was run: it creates
    assert _config(bundle) != before, "config.json not edited: the GPU request is skipped"
    assert _config(bundle) == want


# --- runtime configure ---------------------------------------------------------------------


def test_containerd_empty_imports_no_note(tmp_path: Path) -> None:
    """``containerd config default`` writes ``imports = []``; the edit then notes
    "this file imports : a file there that configures the CRI plugin would override this
    registration" — an empty list named as if files were imported."""
    path = tmp_path / "config.toml"
    path.write_text(containerd_default())
    assert "imports = []" in path.read_text()
    proc = run_configure("containerd", path)
    assert proc.returncode == 0, proc.stderr
    assert "this file imports" not in proc.stderr, proc.stderr


def test_containerd_import_glob_matching_the_file_itself(tmp_path: Path) -> None:
    """``imports = ["<dir>/*.toml"]`` in ``<dir>/config.toml`` matches the main file itself;
    containerd skips a file already loaded (``LoadConfig``: circular imports) and reads this
    file fine (``config dump``). ocihook refuses it as "the imported file config.toml
    configures the CRI plugin" and hints to configure that same file — a false refusal
    with a circular hint."""
    path = tmp_path / "config.toml"
    path.write_text(
        textwrap.dedent(
            f"""\
            version = 2
            imports = ["{tmp_path}/*.toml"]

            [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
              runtime_type = "io.containerd.runc.v2"
            """
        )
    )
    if shutil.which("containerd") is not None:
        dump = containerd_dump(path)
        assert dump["imports"] == [str(path)]
        assert "runc" in dump["plugins"][CRI]["containerd"]["runtimes"]
    after, _notes = configure_containerd(
        path.read_bytes(), path=str(path), runtime_path="/opt/ocihook/bin/ocihook-runtime"
    )
    assert b"runtimes.ocihook" in after


def test_containerd_relative_import_of_a_linked_config(tmp_path: Path) -> None:
    """``configure`` follows a linked config file to its target and resolves the relative
    ``imports`` against the target's directory; containerd resolves them against the
    directory of the path it was given (the link's: ``resolveImports`` joins
    ``filepath.Dir(parent)``). An imported drop-in that configures the CRI plugin (which
    replaces the main file's table in containerd 1.x) is then missed: the registration is
    written and silently undone."""
    need_root_and("containerd")
    etc, real = tmp_path / "etc", tmp_path / "managed"
    (etc / "conf.d").mkdir(parents=True)
    real.mkdir()
    (real / "config.toml").write_text('version = 2\nimports = ["conf.d/cri.toml"]\n')
    (etc / "config.toml").symlink_to(real / "config.toml")
    (etc / "conf.d/cri.toml").write_text(
        f'version = 2\n[plugins."{CRI}".containerd]\ndefault_runtime_name = "runc"\n'
    )
    assert str(etc / "conf.d/cri.toml") in containerd_dump(etc / "config.toml")["imports"]
    with pytest.raises(EngineConfigError) as e:
        configure("containerd", path=str(etc / "config.toml"), runtime_path="/x/ocihook-runtime")
    assert e.value.field == "imports"


def test_containerd_import_with_nul_is_a_file_error(tmp_path: Path) -> None:
    """A TOML string may hold ``\\u0000``: an import naming one made ``os.open`` raise
    ValueError, which the CLI shows as a usage error ("Error: embedded null byte", exit
    2) instead of the file's error (exit 13, naming the file and ``imports``)."""
    path = tmp_path / "config.toml"
    path.write_text('version = 2\nimports = ["a\\u0000b.toml"]\n')
    with pytest.raises(EngineConfigError) as e:
        configure_containerd(path.read_bytes(), path=str(path), runtime_path="/x/ocihook-runtime")
    assert e.value.field == "imports"
    proc = run_configure("containerd", path)
    assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr


def test_containerd_runc_table_with_a_datetime_no_traceback(tmp_path: Path) -> None:
    """runc's settings are copied to the new runtime; a TOML date-time among them reaches
    ``_check_toml``'s ``json.dumps`` without ``default=`` and escapes as TypeError (a
    traceback from ``ocihook runtime configure``)."""
    path = tmp_path / "config.toml"
    path.write_text(
        textwrap.dedent(
            """\
            version = 2
            [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
              runtime_type = "io.containerd.runc.v2"
              since = 1979-05-27T07:32:00Z
            """
        )
    )
    proc = run_configure("containerd", path)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, EXIT_CODES[EngineConfigError]), proc.stderr


# --- the masked /proc/driver/nvidia ----------------------------------------------------------

MASK_SCRIPT = """
import json, os, sys
from ocihook.appliers.live.procmask import mask_proc_driver, read_proc_files
host, rootfs, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = read_proc_files(host, set(range(n)))
fd = os.open(rootfs, os.O_RDONLY | os.O_DIRECTORY)
try:
    done = mask_proc_driver(fd, files, {}, [])
    seen = sum(len(f) for _d, _s, f in os.walk(os.path.join(rootfs, "proc/driver/nvidia")))
    print(json.dumps({"ok": done, "files": len(files), "seen": seen}))
except Exception as e:
    print(json.dumps({"ok": False, "files": len(files), "error": str(e)}))
"""


def test_mask_holds_every_capability_file_read(tmp_path: Path) -> None:
    """``capability_files`` reads up to 4096 entries, but the mask is a ``size=1m`` tmpfs:
    each file takes a page, so about 250 capability files fill it and the whole mask fails
    with ENOSPC (the container does not start). 300 matching files here (a host with many
    MIG instances, or a config.json listing many nvidia-caps nodes): read, then lost.
    (A real 8-GPU host has at most ~114; severity low, but the two limits disagree.)"""
    need_root_and("unshare")
    host = tmp_path / "host"
    n = 300
    for i in range(n):
        d = host / f"capabilities/gpu{i // 14}/mig/gi{i % 14}"
        d.mkdir(parents=True)
        (d / "access").write_text(f"DeviceFileMinor: {i}\nDeviceFileMode: 292\n")
    (host / "params").write_text("ModifyDeviceFiles: 1\n")
    rootfs = tmp_path / "rootfs"
    (rootfs / "proc/driver/nvidia").mkdir(parents=True)
    script = tmp_path / "mask.py"
    script.write_text(MASK_SCRIPT)
    unshare = ["unshare", "-m", "--propagation", "private"]
    proc = subprocess.run(
        [*unshare, sys.executable, "-I", str(script), str(host), str(rootfs), str(n)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["files"] == n + 1
    assert got["ok"] is True, got
    assert got["seen"] == n + 1
