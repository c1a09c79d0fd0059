"""``ocihook-runtime``, the runc-compatible wrapper: finding the command and the bundle in
runc's command line, finding the real runtime, what it does to ``config.json`` in each
mode, errors. End to end with real runc, crun and containerd (``ctr run --runc-binary``):
tests/e2e/test_e2e_wrapper.py.

The wrapper execs the real runtime, so most tests run it as a process with a stand-in
``runc`` first on ``PATH`` that records its arguments, working directory and environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import (
    WRAPPER,
    host_cdi_spec,
    installed_start_path_dirs,
    need_root_and,
    packaged_hook,
    rootfs_tree,
)
from support import config_bytes as _config
from support import make_executable as _executable

from ocihook.appliers.spec import edit_bundle
from ocihook.commands.runtime import (
    EXEC_MARKER,
    GLOBAL_FLAGS,
    Invocation,
    find_runtime,
    legacy_hook,
    parse_args,
)
from ocihook.config.options import hook_program, is_hook_program
from ocihook.core.errors import EXIT_CODES, RuntimeNotFound
from ocihook.core.hostroot import HostRoot
from ocihook.sim import host as simhost
from ocihook.sim import vendors as simvendors

# --- parsing runc's command line ---------------------------------------------------------

PARSE_CASES: list[tuple[list[str], Invocation]] = [
    (["create", "-b", "/b", "id"], Invocation("create", "/b")),
    (["create", "--bundle=/b", "id"], Invocation("create", "/b")),
    (["create", "-b=/b", "id"], Invocation("create", "/b")),
    (["create", "id", "--bundle", "/b"], Invocation("create", "/b")),
    (["create", "id"], Invocation("create")),
    (["run", "-d", "--pid-file", "/p", "-b", "rel", "id"], Invocation("run", "rel")),
    (["create", "--console-socket", "/s", "--pid-file", "/p", "id"], Invocation("create")),
    # containerd's runc shim
    (
        [
            "--root",
            "/run/containerd/runc/k8s.io",
            "--log",
            "/b/log.json",
            "--log-format",
            "json",
            "--systemd-cgroup",
            "create",
            "--bundle",
            "/b",
            "--pid-file",
            "/b/init.pid",
            "id",
        ],
        Invocation("create", "/b", "/b/log.json", "json"),
    ),
    (
        ["--root=/r", "--log=/l", "--log-format=json", "run", "id"],
        Invocation("run", None, "/l", "json"),
    ),
    (["-root", "/r", "--debug", "create", "-b", "/b", "id"], Invocation("create", "/b")),
    # a bundle directory called "create", and a root called "run"
    (["--root", "run", "create", "--bundle", "create", "x"], Invocation("create", "create")),
    # unknown global options: a value unless the next word is a command or an option
    (["--new-flag", "create", "-b", "/b", "id"], Invocation("create", "/b")),
    (["--new-opt", "val", "create", "-b", "/b", "id"], Invocation("create", "/b")),
    (["--new-flag", "--debug", "start", "id"], Invocation("start")),
    (["start", "id"], Invocation("start")),
    (["--root", "/r", "delete", "--force", "id"], Invocation("delete")),
    (["--version"], Invocation()),
    ([], Invocation()),
    (["create", "--", "-b"], Invocation("create")),
    (["create", "-f", "alt.json", "-b", "/b", "id"], Invocation("create", "/b", config="alt.json")),
]


_PARSED = ("command", "bundle", "log", "log_format", "config", "help")


@pytest.mark.parametrize(("args", "want"), PARSE_CASES)
def test_parse_args(args: list[str], want: Invocation) -> None:
    got = parse_args(args)
    assert [getattr(got, k) for k in _PARSED] == [getattr(want, k) for k in _PARSED]


@pytest.mark.parametrize(
    ("args", "pid_file", "container_id", "global_args"),
    [
        (
            ["--root", "/r", "create", "--pid-file", "/p", "-b", "/b", "id"],
            "/p",
            "id",
            ("--root", "/r"),
        ),
        (["create", "id", "--pid-file=rel/p"], "rel/p", "id", ()),
        (["--debug", "run", "-b", "/b", "--", "-odd-id"], None, "-odd-id", ("--debug",)),
        (["start", "id"], None, "id", ()),
        (["--version"], None, None, ()),
    ],
)
def test_parse_args_finds_pid_file_and_id(
    args: list[str], pid_file: str | None, container_id: str | None, global_args: tuple[str, ...]
) -> None:
    """What the wrapper needs to mask a created container and, on failure, delete it."""
    got = parse_args(args)
    assert (got.pid_file, got.container_id, got.global_args) == (
        pid_file,
        container_id,
        global_args,
    )


_paths = st.text(st.sampled_from("abc/._-"), min_size=1, max_size=8).map(lambda p: "/" + p)
_words = st.text(st.sampled_from("abcdefgh0123-"), min_size=1, max_size=8).filter(
    lambda w: not w.startswith("-")
)


@st.composite
def _command_lines(draw: st.DrawFn) -> tuple[list[str], str, str | None, str | None]:
    """A runc command line built from runc's options: (args, command, bundle, log)."""
    args: list[str] = []
    log = None
    for _ in range(draw(st.integers(0, 4))):
        dash = draw(st.sampled_from(["-", "--"]))
        name = draw(
            st.sampled_from(
                [
                    "root",
                    "log",
                    "log-format",
                    "criu",
                    "rootless",
                    *GLOBAL_FLAGS - {"help", "h", "version", "v"},
                ]
            )
        )
        if name in ("debug", "systemd-cgroup"):
            args.append(dash + name)
            continue
        value = draw(st.sampled_from(["json", "text"]) if name == "log-format" else _paths)
        if name == "log":
            log = value
        if draw(st.booleans()):
            args.append(f"{dash}{name}={value}")
        else:
            args += [dash + name, value]
    if any(a.lstrip("-").startswith("log-format") for a in args):
        # keep the expected log format simple: drop log-format options
        clean: list[str] = []
        skip = False
        for a in args:
            if skip:
                skip = False
                continue
            if a.lstrip("-") == "log-format":
                skip = True
                continue
            if a.lstrip("-").startswith("log-format="):
                continue
            clean.append(a)
        args = clean
    command = draw(st.sampled_from(["create", "run", "start", "delete", "state"]))
    args.append(command)
    groups: list[list[str]] = [[draw(_words)]]  # the container id
    bundle = None
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["bundle", "pid", "flag"]))
        if kind == "bundle" and bundle is None:
            bundle = draw(_paths)
            form = draw(st.sampled_from(["-b", "--bundle", "-b=", "--bundle="]))
            groups.append([form + bundle] if form.endswith("=") else [form, bundle])
        elif kind == "pid":
            groups.append(["--pid-file", draw(_paths)])
        else:
            groups.append([draw(st.sampled_from(["-d", "--detach", "--no-pivot", "--keep"]))])
    draw(st.randoms()).shuffle(groups)
    return [*args, *(a for g in groups for a in g)], command, bundle, log


@settings(max_examples=400, deadline=None)
@given(_command_lines())
def test_parse_args_finds_command_and_bundle(
    case: tuple[list[str], str, str | None, str | None],
) -> None:
    args, command, bundle, log = case
    inv = parse_args(args)
    assert inv.command == command, args
    assert inv.log == log, args
    if command in ("create", "run"):
        assert inv.bundle == bundle, args


def test_bundle_dir_defaults_to_cwd() -> None:
    assert Invocation("create").bundle_dir("/x") == "/x"
    assert Invocation("create", "b").bundle_dir("/x") == "/x/b"
    assert Invocation("create", "/b").bundle_dir("/x") == "/b"


# --- finding the real runtime ----------------------------------------------------------


def test_find_runtime_order_and_self_exclusion(tmp_path: Path) -> None:
    me = _executable(tmp_path / "me" / "ocihook-runtime")
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    os.symlink(me, first / "runc")  # the wrapper installed as runc: skipped
    real = _executable(second / "runc")
    crun = _executable(first / "crun")
    env = {"PATH": f"{first}:relative:{second}"}
    assert find_runtime(["runc", "crun"], environ=env, exclude=[me]) == real
    assert find_runtime(["crun", "runc"], environ=env, exclude=[me]) == crun
    assert find_runtime([crun], environ={"PATH": ""}, exclude=[me]) == crun
    # a hard link to the wrapper is the wrapper too
    os.unlink(real)
    os.link(me, second / "runc")
    assert find_runtime(["runc", "crun"], environ=env, exclude=[me]) == crun
    # not executable, a directory: skipped
    (second / "runc").unlink()
    (second / "runc").write_text("")
    (first / "crun").unlink()
    (first / "crun").mkdir()
    with pytest.raises(RuntimeNotFound) as e:
        find_runtime(["runc", "crun"], environ=env, exclude=[me], source="/etc/x.toml")
    assert e.value.field == "runtimes" and e.value.value == ["runc", "crun"]
    assert e.value.path == "/etc/x.toml"
    assert EXIT_CODES[RuntimeNotFound] == 12


# --- the wrapper as a process -------------------------------------------------------------


class Stage:
    """A stand-in ``runc`` first on PATH that records what it was run with, a config
    file for the wrapper, and helpers to run the wrapper."""

    def __init__(self, tmp: Path, root: str) -> None:
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.record = tmp / "runc-called.json"
        script = (
            f"#!{sys.executable} -I\n"
            "import json, os, sys\n"
            f"with open({str(self.record)!r}, 'w') as f:\n"
            "    json.dump({'argv': sys.argv, 'cwd': os.getcwd(),"
            f" 'marker': os.environ.get({EXEC_MARKER!r})}}, f)\n"
        )
        self.runc = _executable(self.bin / "runc", script)
        self.config = tmp / "ocihook.toml"
        self.root = root
        self.write_config()

    def runc_path(self) -> Path:
        return Path(self.runc)

    def write_config(self, extra: str = "") -> None:
        text = f'driver-root = "{self.root}"\ndev-root = "{self.root}"\n' + extra
        self.config.write_text(text)

    def run(
        self, *args: str, cwd: str | None = None, **env: str
    ) -> subprocess.CompletedProcess[str]:
        if self.record.exists():
            self.record.unlink()
        environ = {
            "PATH": f"{self.bin}:/usr/sbin:/usr/bin:/sbin:/bin",
            "OCIHOOK_CONFIG": str(self.config),
            **env,
        }
        return subprocess.run(
            [WRAPPER, *args], capture_output=True, text=True, env=environ, cwd=cwd, timeout=60
        )

    def called(self) -> dict[str, Any] | None:
        if not self.record.exists():
            return None
        data: dict[str, Any] = json.loads(self.record.read_text())
        return data


@pytest.fixture
def stage(tmp_path: Path, sim: simhost.SimulatedHost) -> Stage:
    if not os.path.exists(WRAPPER):
        pytest.fail(f"{WRAPPER} missing: pip install -e . installs the console script")
    return Stage(tmp_path, sim.root)


def test_no_gpu_create_passes_through_untouched(
    stage: Stage, bundle_factory: Callable[..., str]
) -> None:
    bundle = bundle_factory(["true"], [])
    before = _config(bundle)
    mtime = os.stat(os.path.join(bundle, "config.json")).st_mtime_ns
    args = [
        "--root",
        "/r",
        "--log",
        "/l.json",
        "--log-format",
        "json",
        "create",
        "--bundle",
        bundle,
        "cid",
    ]
    proc = stage.run(*args)
    assert proc.returncode == 0, proc.stderr
    called = stage.called()
    assert called is not None
    assert called["argv"] == [stage.runc, *args]
    assert called["marker"]
    assert _config(bundle) == before
    assert os.stat(os.path.join(bundle, "config.json")).st_mtime_ns == mtime


def test_other_commands_pass_through(stage: Stage, tmp_path: Path) -> None:
    for args in (["state", "cid"], ["--root", "/r", "delete", "--force", "cid"], ["--version"], []):
        proc = stage.run(*args, cwd=str(tmp_path))
        assert proc.returncode == 0, proc.stderr
        called = stage.called()
        assert called is not None and called["argv"] == [stage.runc, *args]
        assert called["cwd"] == str(tmp_path)


@pytest.mark.parametrize("form", ["-b", "--bundle=", "cwd", "relative"])
def test_gpu_create_edits_like_ocihook_edit(
    stage: Stage, bundle_factory: Callable[..., str], sim: simhost.SimulatedHost, form: str
) -> None:
    """auto mode: config.json becomes what ``ocihook edit`` writes (compact); runc gets the same
    arguments."""
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0,3"])
    twin = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0,3"])
    # the console script's interpreter registers the hooks: sh starts the python3 beside it
    python = os.path.join(os.path.dirname(WRAPPER), "python3")
    command = (python, "-I", "-S", "-c", hook_program(installed_start_path_dirs()))
    want = edit_bundle(
        twin, HostRoot.single(sim.root), dry_run=True, command=command, indent=None
    ).after  # compact: only runc reads it
    cwd = None
    if form == "-b":
        args = ["--root", "/r", "create", "-b", bundle, "cid"]
    elif form == "--bundle=":
        args = ["create", "cid", f"--bundle={bundle}"]
    elif form == "cwd":
        args, cwd = ["run", "cid"], bundle
    else:
        args, cwd = ["create", "--bundle", os.path.basename(bundle), "cid"], os.path.dirname(bundle)
    proc = stage.run(*args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert _config(bundle) == want
    doc = json.loads(want)
    assert [d["minor"] for d in doc["linux"]["devices"] if d["major"] == 195] == [
        255,
        sim.gpus[0].minor,
        sim.gpus[3].minor,
    ]
    called = stage.called()
    assert called is not None and called["argv"] == [stage.runc, *args]
    # a second start of the same bundle changes nothing
    proc = stage.run(*args, cwd=cwd)
    assert proc.returncode == 0 and _config(bundle) == want


def test_legacy_mode_adds_the_packaged_hook_once(
    stage: Stage, bundle_factory: Callable[..., str], sim: simhost.SimulatedHost
) -> None:
    stage.write_config('mode = "legacy"\n')
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    proc = stage.run("create", "-b", bundle, "cid")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(_config(bundle))
    (hook,) = doc["hooks"]["prestart"]
    # the packaging snippet's command line, naming the wrapper's configuration file
    packaged = packaged_hook("prestart", sim.root)
    packaged["args"] = [*packaged["args"][:-4], "--config", str(stage.config)]
    python = os.path.join(os.path.dirname(WRAPPER), "python3")  # what the script starts
    packaged["path"] = packaged["args"][0] = python
    assert hook == packaged
    # in this process the program names this process's sys.path (the tests' too)
    mine = legacy_hook(str(stage.config))["args"]
    assert mine[1:4] + mine[5:] == hook["args"][1:4] + hook["args"][5:]
    assert is_hook_program(mine[4]) and is_hook_program(hook["args"][4])
    assert "linux" not in doc or "devices" not in doc["linux"]
    # the rules are in the spec too, where a re-applying cgroup manager reads them
    rules = doc["linux"]["resources"]["devices"]
    for minor in (0, 255):
        assert {"allow": True, "type": "c", "access": "rw", "major": 195, "minor": minor} in rules
    once = _config(bundle)
    proc = stage.run("create", "-b", bundle, "cid")
    assert proc.returncode == 0 and _config(bundle) == once

    # registered already (hooks.d / by hand, under another stage): not added again
    other = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    path = os.path.join(other, "config.json")
    with open(path) as f:
        d = json.load(f)
    d["hooks"] = {"createRuntime": [packaged_hook("createRuntime", sim.root)]}
    with open(path, "w") as f:
        json.dump(d, f)
    before = _config(other)
    assert stage.run("create", "-b", other, "cid").returncode == 0
    assert _config(other) == before

    # nothing asked for: unchanged
    none = bundle_factory(
        ["true"], ["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_DRIVER_CAPABILITIES=all"]
    )
    before = _config(none)
    assert stage.run("create", "-b", none, "cid").returncode == 0
    assert _config(none) == before


@pytest.mark.parametrize("how", ["env-cdi-mode", "env-qualified", "annotation"])
def test_cdi_requests_injected_from_the_registry(
    stage: Stage, bundle_factory: Callable[..., str], tmp_path: Path, how: str
) -> None:
    """CDI requests go through spec mode's CDI injection: ``mode = "cdi"`` with an index,
    a qualified name in auto mode, and a ``cdi.k8s.io/`` annotation alone (no NVIDIA_
    variable at all: the byte check must still see it, with no configuration file)."""
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (spec_dir / "nvidia.json").write_text(json.dumps(host_cdi_spec(tmp_path / "host")))
    config = f'cdi-spec-dirs = ["{spec_dir}"]\n' + (
        'mode = "cdi"\n' if how == "env-cdi-mode" else ""
    )
    stage.write_config(config)
    env = {
        "env-cdi-mode": ["NVIDIA_VISIBLE_DEVICES=1"],
        "env-qualified": ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"],
        "annotation": [],
    }[how]
    bundle = bundle_factory(["true"], env)
    if how == "annotation":
        path = os.path.join(bundle, "config.json")
        with open(path) as f:
            doc = json.load(f)
        doc["annotations"] = {"cdi.k8s.io/gpu": "nvidia.com/gpu=1"}
        with open(path, "w") as f:
            json.dump(doc, f)
    proc = stage.run("create", "-b", bundle, "cid")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(_config(bundle))
    assert "NVIDIA_CDI=1" in doc["process"]["env"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in doc["process"]["env"]
    assert [d["path"] for d in doc["linux"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia1"]
    # a device in no spec: exit 11, untouched
    missing = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=7"])
    before = _config(missing)
    proc = stage.run("create", "-b", missing, "cid")
    assert proc.returncode == 11 and _config(missing) == before, proc.stderr


def test_annotation_request_seen_with_default_settings(
    stage: Stage, bundle_factory: Callable[..., str], tmp_path: Path
) -> None:
    """An empty configuration file (every key its default, so the file is not even
    parsed): a bundle whose only request is a cdi.k8s.io/ annotation is not passed
    through unread (spec mode injects it; here no spec has the device, so the start stops
    with exit 11)."""
    bundle = bundle_factory(["true"], [])
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        doc = json.load(f)
    doc["annotations"] = {"cdi.k8s.io/gpu": "example.invalid/gpu=nonexistent"}
    with open(path, "w") as f:
        json.dump(doc, f)
    stage.config.write_text("")
    proc = stage.run("create", "-b", bundle, "cid")
    assert proc.returncode == 11, proc.stderr
    assert stage.called() is None


def test_bad_request_stops_before_runc_and_is_logged(
    stage: Stage, bundle_factory: Callable[..., str], tmp_path: Path
) -> None:
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=99"])
    before = _config(bundle)
    log = tmp_path / "log.json"
    args = ["--log", str(log), "--log-format", "json", "create", "--bundle", bundle, "cid"]
    proc = stage.run(*args)
    assert proc.returncode == 5, proc.stderr
    assert proc.stderr.startswith("ocihook-runtime: error[bad-request]: ")
    assert "99" in proc.stderr and proc.stderr.count("\n") == 1
    assert stage.called() is None
    assert _config(bundle) == before
    (entry,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert entry["level"] == "error" and entry["msg"] == proc.stderr.strip()
    # text format
    log2 = tmp_path / "log.txt"
    proc = stage.run("--log", str(log2), "create", "--bundle", bundle, "cid")
    assert proc.returncode == 5
    assert log2.read_text().startswith('time="') and "level=error" in log2.read_text()


def test_broken_config_json_and_config_file(
    stage: Stage, bundle_factory: Callable[..., str]
) -> None:
    bundle = bundle_factory(["true"], [])
    path = os.path.join(bundle, "config.json")
    with open(path, "w") as f:
        f.write('{"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}, ')
    proc = stage.run("create", "-b", bundle, "cid")
    assert proc.returncode == 3 and path in proc.stderr, proc.stderr
    assert stage.called() is None
    stage.write_config('runtimes = "runc"\n')
    proc = stage.run("state", "cid")
    assert proc.returncode == 10 and "runtimes" in proc.stderr
    assert stage.called() is None


def test_no_runtime_found(stage: Stage, bundle_factory: Callable[..., str]) -> None:
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    before = _config(bundle)
    stage.write_config('runtimes = ["no-such-runtime", "/nonexistent/runc"]\n')
    proc = stage.run("create", "-b", bundle, "cid")
    assert proc.returncode == 12, proc.stderr
    assert "error[no-runtime]" in proc.stderr and str(stage.config) in proc.stderr
    assert _config(bundle) == before  # checked before anything is edited
    # configured by path: that file runs
    stage.write_config(f'runtimes = ["{stage.runc}"]\n')
    proc = stage.run("state", "cid", PATH="/nonexistent")
    assert proc.returncode == 0 and stage.called() is not None


def test_never_execs_itself(stage: Stage, tmp_path: Path) -> None:
    """The wrapper installed as ``runc`` first on PATH is skipped; a copy of it that runs
    again is stopped by the marker."""
    first = tmp_path / "first"
    first.mkdir()
    os.symlink(WRAPPER, first / "runc")
    proc = stage.run("state", "cid", PATH=f"{first}:{stage.bin}")
    assert proc.returncode == 0, proc.stderr
    assert stage.called() is not None
    # a copy (another inode) named runc before the stand-in: it runs, sees the marker, stops
    (first / "runc").unlink()
    shutil.copy(WRAPPER, first / "runc")
    # the script starts the python3 beside it: here one that runs this environment's
    python3 = os.path.join(os.path.dirname(WRAPPER), "python3")
    _executable(first / "python3", f'#!/bin/sh\nexec {python3} "$@"\n')
    proc = stage.run("state", "cid", PATH=f"{first}:{stage.bin}")
    assert proc.returncode == 12, proc.stderr
    assert "started by itself" in proc.stderr
    assert stage.called() is None


def test_ocihook_runtime_exec_is_the_same(stage: Stage, bundle_factory: Callable[..., str]) -> None:
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    env = {
        "PATH": f"{stage.bin}:/usr/bin:/bin",
        "OCIHOOK_CONFIG": str(stage.config),
    }
    ocihook = os.path.join(os.path.dirname(sys.executable), "ocihook")
    proc = subprocess.run(
        [ocihook, "runtime", "exec", "create", "-b", bundle, "cid"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    called = stage.called()
    assert called is not None and called["argv"] == [stage.runc, "create", "-b", bundle, "cid"]
    assert b"/dev/nvidiactl" in _config(bundle)


def test_help(stage: Stage) -> None:
    proc = stage.run("--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: ocihook-runtime")
    assert stage.called() is None
    proc = stage.run("help")  # runc's own help
    assert stage.called() is not None


# --- --help=false is not help (Go flag booleans) --------------------------------------------------


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
    stage: Stage,
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
    python = os.path.join(os.path.dirname(sys.executable), "python3")  # ocihook-runtime's
    command = (python, "-I", "-S", "-c", hook_program(installed_start_path_dirs()))
    want = edit_bundle(
        twin, HostRoot.single(sim.root), dry_run=True, command=command, indent=None
    ).after  # compact: only runc reads it
    before = _config(bundle)
    proc = stage.run("create", "--help=false", "-b", bundle, "cid")
    assert proc.returncode == 0, proc.stderr
    assert stage.called() is not None  # the (stand-in) runtime was run: it creates
    assert _config(bundle) != before, "config.json not edited: the GPU request is skipped"
    assert _config(bundle) == want


# --- the wrapper's failures and hostile input -----------------------------------------------------


@pytest.fixture(scope="module")
def amd_sim(tmp_path_factory: pytest.TempPathFactory) -> simvendors.SimDrmHost:
    return simvendors.build_amd(str(tmp_path_factory.mktemp("amd")))


@pytest.mark.parametrize("args", [["create", "--help"], ["run", "-h"], ["--help", "create"]])
def test_create_help_reaches_the_real_runtime(
    stage: Stage, tmp_path: Path, args: list[str]
) -> None:
    """``ocihook-runtime create --help`` (run in a directory without config.json) must
    show runc's help for create, as ``runc create --help`` does. Found: the wrapper reads
    ./config.json, fails with exit 3 (``config.json not found``) and never runs runc."""
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = stage.run(*args, cwd=str(empty))
    assert proc.returncode == 0, proc.stderr
    called = stage.called()
    assert called is not None and called["argv"] == [stage.runc, *args]


def test_crun_log_driver_prefix_is_not_a_file_in_the_bundle(stage: Stage, tmp_path: Path) -> None:
    """crun's global ``--log`` takes ``file:PATH``, ``journald:ID`` or ``syslog:ID``
    (crun(1)). On an error the wrapper appends its line to the ``--log`` value taken as a
    path: ``--log journald:x`` creates a file named ``journald:x`` in the current
    directory (the bundle), and ``--log file:/abs/log`` writes nothing to ``/abs/log``.
    Expected: ``file:`` stripped, journald/syslog not taken as files."""
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "crun.log"
    proc = stage.run("--log", "journald:x", "create", "-b", "/nonexistent", "cid", cwd=str(work))
    assert proc.returncode == 3, proc.stderr
    assert os.listdir(work) == []
    proc = stage.run(
        "--log", f"file:{log}", "--log-format", "json", "create", "-b", "/nonexistent", "cid"
    )
    assert proc.returncode == 3, proc.stderr
    assert log.exists(), "the error did not reach crun's --log file:PATH"
    entry = json.loads(log.read_text().splitlines()[-1])
    assert entry["level"] == "error" and "config.json not found" in entry["msg"]


@pytest.mark.parametrize(
    ("command", "pid_file", "hooks"),
    [
        ("create", False, False),
        ("create", True, False),
        ("create", True, True),
        ("run", False, False),
    ],
)
def test_failed_exec_leaves_the_bundle_as_it_was(
    stage: Stage,
    bundle_factory: Any,
    tmp_path: Path,
    command: str,
    pid_file: bool,
    hooks: bool,
) -> None:
    """docs/guide/wrapper.md: "On an error config.json is left as it was, the real runtime is not run".
    A ``runc`` whose interpreter is missing (``#!/nonexistent/sh``) passes
    :func:`find_runtime` (an executable file) but ``execve`` (or, for ``create
    --pid-file``, ``posix_spawn``) fails with ENOENT after the bundle was edited: exit 12,
    one line, the original bytes of config.json put back and the rootfs as it was: the
    soname links, ``ld.so.cache`` and mount targets the edit made before the runtime
    (``run``, ``create`` without ``--pid-file``, a config.json with hooks) or beside it
    are taken back."""
    Path(stage.runc).write_text("#!/nonexistent/sh\nexit 0\n")
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    config = Path(bundle, "config.json")
    if hooks:
        doc = json.loads(config.read_text())
        doc["hooks"] = {"poststop": [{"path": "/bin/true"}]}
        config.write_text(json.dumps(doc))
    before, tree = config.read_bytes(), rootfs_tree(os.path.join(bundle, "rootfs"))
    extra = ["--pid-file", str(tmp_path / "pid")] if pid_file else []
    proc = stage.run(command, *extra, "-b", bundle, "cid")
    assert proc.returncode == EXIT_CODES[RuntimeNotFound], proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, lines
    assert f"cannot run {stage.runc}: the interpreter its #! line names is missing" in lines[0]
    assert config.read_bytes() == before
    assert rootfs_tree(os.path.join(bundle, "rootfs")) == tree


@pytest.mark.parametrize("command", ["run", "create"])
def test_failed_exec_gives_the_images_ld_so_cache_back_as_it_was(
    stage: Stage, bundle_factory: Any, command: str
) -> None:
    """An image's own ``/etc/ld.so.cache`` that the edit replaced comes back with its
    bytes, permission bits, owner and group when the runtime cannot be started (the edit
    writes a new file, 0644 and root's, as ``ldconfig`` does)."""
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"], debian=True)
    cache = Path(bundle, "rootfs/etc/ld.so.cache")
    cache.parent.mkdir(exist_ok=True)
    cache.write_bytes(Path("/etc/ld.so.cache").read_bytes())
    os.chown(cache, 1234, 1235)
    os.chmod(cache, 0o600)
    tree = rootfs_tree(os.path.join(bundle, "rootfs"))
    Path(stage.runc).write_text("#!/nonexistent/sh\nexit 0\n")
    proc = stage.run(command, "-b", bundle, "cid")
    assert proc.returncode == EXIT_CODES[RuntimeNotFound], proc.stderr
    st = cache.stat()
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o600, 1234, 1235)
    assert rootfs_tree(os.path.join(bundle, "rootfs")) == tree


def test_the_exec_path_edits_the_rootfs_before_the_runtime(
    stage: Stage, bundle_factory: Any
) -> None:
    """``create`` without ``--pid-file`` execs the runtime: the soname links and the
    container's ``ld.so.cache`` are in the rootfs when the runtime starts (the edit that
    makes them for a failed ``execve`` to take back leaves them for a good one)."""
    _executable(stage.bin / "runc", _LOOKING_RUNC.format(py=sys.executable, rec=str(stage.record)))
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    proc = stage.run("create", "-b", bundle, "cid")
    assert proc.returncode == 3, proc.stderr  # the stand-in's create exits 3
    assert json.loads(stage.record.read_text().splitlines()[-1]) == [True, True]


def test_legacy_mode_adds_the_hook_for_an_amd_request(
    stage: Stage, tmp_path: Path, amd_sim: simvendors.SimDrmHost
) -> None:
    """``mode = "legacy"``: a container asking only for ``AMD_VISIBLE_DEVICES=0`` gets no
    hook (``_add_legacy_hook`` looks only at the NVIDIA request, which is void), so it
    starts without its GPU and without an error; ``auto`` mode edits the same bundle and
    the hook itself serves AMD requests. Expected: the prestart hook added."""
    stage.root = amd_sim.root
    stage.write_config('mode = "legacy"\n')
    bundle = tmp_path / "b"
    (bundle / "rootfs").mkdir(parents=True)
    doc = {
        "ociVersion": "1.0.2",
        "process": {"args": ["true"], "cwd": "/", "env": ["AMD_VISIBLE_DEVICES=0"]},
        "root": {"path": "rootfs"},
        "linux": {},
    }
    (bundle / "config.json").write_text(json.dumps(doc))
    proc = stage.run("create", "-b", str(bundle), "cid")
    assert proc.returncode == 0, proc.stderr
    after = json.loads((bundle / "config.json").read_text())
    prestart = after.get("hooks", {}).get("prestart", [])
    assert [h["args"][-4:] for h in prestart] == [
        ["hook", "prestart", "--config", str(stage.config)]
    ]


def _create_under(
    stage: Stage,
    bundle_factory: Callable[..., str],
    runc_script: str,
    before: dict[str, Any] | None = None,
) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """``ocihook-runtime create --pid-file`` of a GPU bundle under the stand-in runc
    ``runc_script``: the arguments and the finished wrapper; ``before`` gets the bundle's
    ``config.json`` bytes and rootfs tree (:func:`support.rootfs_tree`) from before the run."""
    _executable(stage.bin / "runc", runc_script)
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    if before is not None:
        before["config.json"] = _config(bundle)
        before["rootfs"] = rootfs_tree(os.path.join(bundle, "rootfs"))
    pid_file = os.path.join(bundle, "init.pid")
    args = ["--root", "/r", "create", "--pid-file", pid_file, "-b", bundle, "cid"]
    return args, stage.run(*args)


@pytest.mark.parametrize(
    ("pid", "said"),
    [("str(os.getppid())", "mount namespace"), ("'no pid'", "cannot read the container's pid")],
)
def test_create_mask_failure_deletes_the_container(
    stage: Stage, bundle_factory: Callable[..., str], pid: str, said: str
) -> None:
    """``create --pid-file``: the wrapper runs the runtime's create as its child, then masks
    /proc/driver/nvidia in the created container. A pid that is no container (here the
    stand-in runtime writes the wrapper's own pid, in the host's mount namespace) or no
    pid at all is refused: the container is deleted with the same global options, exit 7,
    one line."""
    script = (
        f"#!{sys.executable} -I\n"
        "import json, os, sys\n"
        "a = sys.argv\n"
        "if 'create' in a:\n"
        f"    open(a[a.index('--pid-file') + 1], 'w').write({pid})\n"
        f"with open({str(stage.record)!r}, 'a') as f:\n"
        "    f.write(json.dumps(a[1:]) + '\\n')\n"
    )
    before: dict[str, Any] = {}
    args, proc = _create_under(stage, bundle_factory, script, before)
    assert proc.returncode == 7, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ocihook-runtime: error[apply-failed]:"), lines
    assert said in lines[0]
    calls = [json.loads(ln) for ln in stage.record.read_text().splitlines()]
    # the version asked first (spec mode's runc check; this stand-in gives none)
    assert calls == [["--version"], args, ["--root", "/r", "delete", "--force", "cid"]]
    # config.json and the rootfs as they were, the bind-mount targets taken out too
    assert _config(args[-2]) == before["config.json"]
    assert rootfs_tree(os.path.join(args[-2], "rootfs")) == before["rootfs"]


def test_a_delete_that_fails_leaves_the_container_and_says_so(
    stage: Stage, bundle_factory: Callable[..., str]
) -> None:
    """The mask fails and the runtime's ``delete`` does too (exit 1): the container is
    still there, using its edit, so the edit is not taken back (config.json stays edited)
    and the one line says the container is left created; exit 7."""
    script = (
        f"#!{sys.executable} -I\n"
        "import json, os, sys\n"
        "a = sys.argv\n"
        "if 'create' in a:\n"
        "    open(a[a.index('--pid-file') + 1], 'w').write('no pid')\n"
        f"with open({str(stage.record)!r}, 'a') as f:\n"
        "    f.write(json.dumps(a[1:]) + '\\n')\n"
        "sys.exit(1 if 'delete' in a else 0)\n"
    )
    before: dict[str, Any] = {}
    args, proc = _create_under(stage, bundle_factory, script, before)
    assert proc.returncode == 7, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "cannot read the container's pid" in lines[0], lines
    assert f"the container could not be deleted ({stage.runc} delete exited 1)" in lines[0]
    assert _config(args[-2]) != before["config.json"]  # the container's, as edited
    assert "ocihook.edits" in json.loads(_config(args[-2]))["annotations"]


def test_cannot_run_names_what_is_missing(tmp_path: Path) -> None:
    """ENOENT for a file that exists: its ``#!`` interpreter, or for a binary its program
    loader, is missing; for a file that does not exist, the file."""
    from ocihook.commands.runtime import _cannot_run

    script, binary = tmp_path / "script", tmp_path / "binary"
    script.write_text("#!/nonexistent/sh\n")
    binary.write_bytes(b"\x7fELF" + bytes(60))
    enoent = FileNotFoundError(2, "No such file or directory")
    assert "#! line" in str(_cannot_run(str(script), enoent))
    assert "program loader" in str(_cannot_run(str(binary), enoent))
    assert "No such file or directory" in str(_cannot_run(str(tmp_path / "none"), enoent))


@pytest.mark.parametrize(("kind", "target"), [("device", "/dev/zero"), ("FIFO", None)])
def test_special_config_json_refused_without_reading(
    stage: Stage, bundle_factory: Callable[..., str], kind: str, target: str | None
) -> None:
    """A config.json that is /dev/zero or a FIFO: the no-GPU fast path and the edit refuse
    it in one line (exit 3) without reading it, and runc is not started."""
    bundle = bundle_factory(["true"], [])
    path = os.path.join(bundle, "config.json")
    os.unlink(path)
    if target is None:
        os.mkfifo(path)
    else:
        os.symlink(target, path)
    proc = stage.run("create", "--bundle", bundle, "cid")
    assert proc.returncode == 3, proc.stderr
    assert f"cannot read config.json: not a regular file (a {kind})" in proc.stderr
    assert path in proc.stderr
    assert stage.called() is None


def test_oversized_config_json_refused(stage: Stage, bundle_factory: Callable[..., str]) -> None:
    """A config.json over 16 MiB (here a sparse one) is refused before it is read."""
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    path = os.path.join(bundle, "config.json")
    with open(path, "r+b") as f:
        f.truncate(16 * 1024 * 1024 + 1)
    proc = stage.run("create", "--bundle", bundle, "cid")
    assert proc.returncode == 3, proc.stderr
    assert "larger than 16777216 bytes (16 MiB)" in proc.stderr
    assert stage.called() is None


@pytest.mark.parametrize(
    ("version", "mode", "warned"),
    [
        ("runc version 1.1.5+ds1", "auto", True),
        ("runc version 1.1.13", "auto", True),
        ("runc version 1.1.14", "auto", False),
        ("runc version 1.2.0", "auto", False),
        ("crun version 1.8.1", "auto", False),
        ("runc version 1.1.5", "legacy", False),  # the hook modes hand runc no bind mounts
    ],
)
def test_old_runc_warned_in_spec_mode(
    stage: Stage, bundle_factory: Callable[..., str], version: str, mode: str, warned: bool
) -> None:
    """A GPU container edited in spec mode for a runc older than 1.1.14 gets one warning
    line naming CVE-2024-45310 (runc's bind-mount-target race); the container still starts."""
    script = (
        stage.runc_path()
        .read_text()
        .replace(
            "import json, os, sys\n",
            "import json, os, sys\n"
            f"if sys.argv[1:] == ['--version']:\n    print({version!r}); sys.exit(0)\n",
        )
    )
    stage.runc_path().write_text(script)
    stage.write_config(f'mode = "{mode}"\n')
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    proc = stage.run("create", "--bundle", bundle, "cid")
    assert proc.returncode == 0, proc.stderr
    called = stage.called()
    assert called is not None and called["argv"][1:] == ["create", "--bundle", bundle, "cid"]
    lines = [line for line in proc.stderr.splitlines() if "CVE-2024-45310" in line]
    if warned:
        shown = version.split()[2]
        assert lines == [
            f"ocihook-runtime: warning: {stage.runc} is runc {shown}, older than 1.1.14: an "
            "image that swaps a directory for a link while runc mounts can make it create "
            "empty files on the host (CVE-2024-45310); spec mode hands runc its bind mounts, "
            "the hook modes do not: upgrade runc (a distribution's package may carry the "
            "fix), or use hook mode"
        ]
    else:
        assert lines == []


def test_stale_cdi_spec_refused_before_runc(
    stage: Stage, bundle_factory: Callable[..., str], tmp_path: Path
) -> None:
    """The wrapper's cdi mode with a spec whose library is gone from the host: exit 11,
    one line naming the file, config.json as it was, runc never started."""
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    spec = host_cdi_spec(tmp_path / "host")
    (spec_dir / "nvidia.json").write_text(json.dumps(spec))
    gone = spec["containerEdits"]["mounts"][0]["hostPath"]
    os.unlink(gone)
    stage.write_config(f'cdi-spec-dirs = ["{spec_dir}"]\nmode = "cdi"\n')
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=1"])
    before = _config(bundle)
    proc = stage.run("create", "-b", bundle, "cid")
    assert proc.returncode == 11, proc.stderr
    assert proc.stderr.startswith(
        f"ocihook-runtime: error[bad-cdi-spec]: stale CDI spec: {gone} is not on the host"
    )
    assert len(proc.stderr.splitlines()) == 1
    assert _config(bundle) == before
    assert stage.called() is None


def test_oversized_config_json_without_a_request_passes_through(
    stage: Stage, bundle_factory: Callable[..., str]
) -> None:
    """A config.json over 16 MiB that asks for no GPU (a huge annotation) is runc's to
    read: the wrapper scans it in pieces for the request markers and runs runc."""
    bundle = bundle_factory(["true"], [])
    path = os.path.join(bundle, "config.json")
    doc = json.loads(Path(path).read_text())
    doc["annotations"] = {"org.example/blob": "x" * (17 << 20)}
    Path(path).write_text(json.dumps(doc))
    before = _config(bundle)
    proc = stage.run("create", "--bundle", bundle, "cid")
    assert proc.returncode == 0, proc.stderr
    called = stage.called()
    assert called is not None and called["argv"][1:] == ["create", "--bundle", bundle, "cid"]
    assert _config(bundle) == before


def test_create_makes_the_links_while_the_runtime_creates(
    stage: Stage, bundle_factory: Callable[..., str], sim: simhost.SimulatedHost
) -> None:
    """``create --pid-file`` of a bundle with no hooks: the wrapper makes the soname links
    and ld.so.cache while the runtime creates the container. When it returns, config.json
    and the rootfs are what an edit that made them before the runtime ran gives."""
    argv, env = _creating_stage(stage, bundle_factory, 0.2)
    bundle = argv[argv.index("-b") + 1]
    twin = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    python = os.path.join(os.path.dirname(WRAPPER), "python3")
    command = (python, "-I", "-S", "-c", hook_program(installed_start_path_dirs()))
    made = edit_bundle(
        twin, HostRoot.single(sim.root), command=command, indent=None, mask_by_caller=True
    )
    assert made.in_rootfs and made.caller_mask is not None
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert _config(bundle) == _config(twin)
        got = rootfs_tree(os.path.join(bundle, "rootfs"))
        assert got == rootfs_tree(os.path.join(twin, "rootfs"))
        assert "etc/ld.so.cache" in got and any(k.endswith("/libcuda.so.1") for k in got)
    finally:
        _kill_containers(stage)


def test_create_whose_links_fail_deletes_the_container(
    stage: Stage, bundle_factory: Callable[..., str]
) -> None:
    """The links made while the runtime creates fail (a directory where the cache goes):
    once the runtime is done the container is deleted, config.json and the rootfs are as
    they were, exit 7, one line."""
    argv, env = _creating_stage(stage, bundle_factory, 0.2)
    bundle = argv[argv.index("-b") + 1]
    rootfs = os.path.join(bundle, "rootfs")
    os.makedirs(os.path.join(rootfs, "etc/ld.so.cache"))
    before, tree = _config(bundle), rootfs_tree(rootfs)
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 7, proc.stderr
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and "error[apply-failed]" in lines[0], lines
        assert "ld.so.cache" in lines[0]
        calls = [json.loads(ln) for ln in stage.record.read_text().splitlines()]
        assert ["--root", "/r", "delete", "--force", "cid"] in calls
        assert _config(bundle) == before
        assert rootfs_tree(rootfs) == tree
    finally:
        _kill_containers(stage)


#: A stand-in runc whose create records whether the rootfs has the soname links and
#: ld.so.cache as it starts, then fails (exit 3).
_LOOKING_RUNC = """#!{py} -I
import json, os, sys
a = sys.argv
if 'create' in a:
    rootfs = os.path.join(a[a.index('-b') + 1], 'rootfs')
    seen = [os.path.islink(os.path.join(rootfs, 'usr/lib64/libcuda.so.1')),
            os.path.exists(os.path.join(rootfs, 'etc/ld.so.cache'))]
    open({rec!r}, 'a').write(json.dumps(seen) + '\\n')
    sys.exit(3)
"""


@pytest.mark.parametrize("key", ["hooks", "Hooks"])
def test_create_with_hooks_makes_the_links_first_and_takes_them_back(
    stage: Stage, bundle_factory: Callable[..., str], key: str
) -> None:
    """A config.json with a hook (under ``hooks``, or ``Hooks``, which runc reads too) gets
    its soname links and ld.so.cache before the runtime starts (a hook could look at the
    rootfs); when the runtime's create fails they are taken back with the rest of the
    edit: config.json and the rootfs are as they were."""
    _executable(stage.bin / "runc", _LOOKING_RUNC.format(py=sys.executable, rec=str(stage.record)))
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    path = Path(bundle, "config.json")
    doc = json.loads(path.read_text())
    doc[key] = {"createRuntime": [{"path": "/bin/true"}]}
    path.write_text(json.dumps(doc))
    before, tree = path.read_bytes(), rootfs_tree(os.path.join(bundle, "rootfs"))
    pid_file = os.path.join(bundle, "init.pid")
    proc = stage.run("create", "--pid-file", pid_file, "-b", bundle, "cid")
    assert proc.returncode == 3, proc.stderr
    assert json.loads(stage.record.read_text().splitlines()[-1]) == [True, True]
    assert path.read_bytes() == before
    assert rootfs_tree(os.path.join(bundle, "rootfs")) == tree


#: A stand-in runc whose create exits 0 at once, leaving a FIFO at --pid-file and a
#: process that, once the runtime has exited, sends SIGTERM to the wrapper and then
#: writes the pid of a "container" (``sleep`` in a mount namespace of its own) to the
#: FIFO: a signal that comes while the wrapper waits for the pid, after the runtime.
_LATE_SIGNAL_RUNC = """#!{py} -I
import json, os, signal, subprocess, sys, time
a = sys.argv
if 'create' in a:
    pid_file = a[a.index('--pid-file') + 1]
    os.mkfifo(pid_file)
    wrapper, me = os.getppid(), os.getpid()
    if os.fork() == 0:
        os.setsid()
        c = subprocess.Popen(['unshare', '-m', 'sleep', '30'], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        open({rec!r}, 'a').write(json.dumps({{'container': c.pid}}) + '\\n')
        while os.path.exists(f'/proc/{{me}}'):
            time.sleep(0.01)
        time.sleep(0.2)
        os.kill(wrapper, signal.SIGTERM)
        time.sleep(0.2)
        with open(pid_file, 'w') as f:
            f.write(str(c.pid))
        os._exit(0)
else:
    open({rec!r}, 'a').write(json.dumps(a[1:]) + '\\n')
"""


def test_a_signal_once_the_runtime_is_done_deletes_the_container(
    stage: Stage, bundle_factory: Callable[..., str]
) -> None:
    """SIGTERM to the wrapper after the runtime's create has exited 0 but before the wrapper
    is done (here: waiting for the pid): no runtime to pass it to, so the create fails —
    the container is deleted, the edit taken back (config.json and the rootfs as they
    were), one line naming the signal, exit 128 + 15."""
    need_root_and("unshare")
    _executable(
        stage.bin / "runc", _LATE_SIGNAL_RUNC.format(py=sys.executable, rec=str(stage.record))
    )
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    before, tree = _config(bundle), rootfs_tree(os.path.join(bundle, "rootfs"))
    pid_file = os.path.join(bundle, "init.pid")
    try:
        proc = stage.run("--root", "/r", "create", "--pid-file", pid_file, "-b", bundle, "cid")
        assert proc.returncode == 128 + signal.SIGTERM, proc.stderr
        lines = proc.stderr.splitlines()
        assert lines == [
            f"ocihook-runtime: create interrupted by signal {int(signal.SIGTERM)}: "
            "the container was deleted"
        ], lines
        calls = [json.loads(ln) for ln in stage.record.read_text().splitlines()]
        assert ["--root", "/r", "delete", "--force", "cid"] in calls
        assert _config(bundle) == before
        os.unlink(pid_file)
        assert rootfs_tree(os.path.join(bundle, "rootfs")) == tree
    finally:
        _kill_containers(stage)


def test_create_that_fails_ends_the_masking_child(
    stage: Stage, bundle_factory: Callable[..., str]
) -> None:
    """``create --pid-file`` whose runtime fails: its exit code is the wrapper's, nothing is
    deleted, config.json and the rootfs are as they were (the links made meanwhile and the
    bind-mount targets are taken back), and the child forked to mask /proc/driver/nvidia while the runtime ran (the
    stand-in runtime records its parent's other child) is gone when the wrapper returns."""
    script = (
        f"#!{sys.executable} -I\n"
        "import json, os, sys, time\n"
        "a = sys.argv\n"
        "time.sleep(0.2 if 'create' in a else 0)  # the wrapper forks the masking child\n"
        "p = os.getppid()\n"
        "kids = open(f'/proc/{p}/task/{p}/children').read().split()\n"
        f"with open({str(stage.record)!r}, 'a') as f:\n"
        "    f.write(json.dumps(a[1:]) + '\\n')\n"
        "    f.write(json.dumps([int(k) for k in kids if int(k) != os.getpid()]) + '\\n')\n"
        "sys.exit(3 if 'create' in a else 0)\n"
    )
    before: dict[str, Any] = {}
    args, proc = _create_under(stage, bundle_factory, script, before)
    assert proc.returncode == 3, proc.stderr
    assert _config(args[-2]) == before["config.json"]  # the edit is taken back
    assert rootfs_tree(os.path.join(args[-2], "rootfs")) == before["rootfs"]
    lines = [json.loads(ln) for ln in stage.record.read_text().splitlines()]
    assert lines[0::2] == [["--version"], args]
    others = lines[3]
    assert len(others) == 1, others  # the masking child, waiting for the pid
    assert not os.path.exists(f"/proc/{others[0]}"), others


#: A stand-in runc whose create starts a "container" (``sleep`` in a mount namespace of its
#: own), writes its pid to ``--pid-file`` after DELAY seconds and exits 0, ignoring SIGINT
#: and SIGHUP meanwhile (a runtime that finishes its create anyway); it records the
#: container's pid.
_CREATING_RUNC = """#!{py} -I
import json, os, signal, subprocess, sys, time
a = sys.argv
for s in (signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
if 'create' in a:
    c = subprocess.Popen(['unshare', '-m', 'sleep', '30'], start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep({delay})
    open({rec!r}, 'a').write(json.dumps({{'container': c.pid}}) + '\\n')
    open(a[a.index('--pid-file') + 1], 'w').write(str(c.pid))
else:
    open({rec!r}, 'a').write(json.dumps(a[1:]) + '\\n')
"""


def _creating_stage(
    stage: Stage, bundle_factory: Callable[..., str], delay: float
) -> tuple[list[str], dict[str, str]]:
    need_root_and("unshare")  # the stand-in container: a mount namespace of its own
    _executable(
        stage.bin / "runc",
        _CREATING_RUNC.format(py=sys.executable, delay=delay, rec=str(stage.record)),
    )
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    pid_file = os.path.join(bundle, "init.pid")
    argv = [WRAPPER, "--root", "/r", "create", "--pid-file", pid_file, "-b", bundle, "cid"]
    env = {
        "PATH": f"{stage.bin}:/usr/sbin:/usr/bin:/sbin:/bin",
        "OCIHOOK_CONFIG": str(stage.config),
    }
    return argv, env


def _kill_containers(stage: Stage) -> None:
    for line in stage.record.read_text().splitlines() if stage.record.exists() else ():
        entry = json.loads(line)
        if isinstance(entry, dict):
            with contextlib.suppress(OSError):
                os.kill(entry["container"], signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_group_during_create_spares_the_mask(
    stage: Stage, bundle_factory: Callable[..., str], sig: int
) -> None:
    """Ctrl-C or a hangup to the wrapper's process group while the runtime creates: the
    wrapper passes it to the runtime, which here finishes its create; the masking child,
    waiting for the pid meanwhile, ignores it and masks: exit 0, nothing deleted."""
    argv, env = _creating_stage(stage, bundle_factory, 1.0)
    try:
        proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        time.sleep(0.6)
        os.killpg(proc.pid, sig)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert not any("delete" in ln for ln in stage.record.read_text().splitlines())
    finally:
        _kill_containers(stage)


def test_create_with_sigchld_ignored(stage: Stage, bundle_factory: Callable[..., str]) -> None:
    """A wrapper started with SIGCHLD ignored (an engine's inherited disposition) still
    waits for the runtime and the masking child: exit 0, no traceback. The script runs
    straight under the interpreter (``python3 ocihook-runtime``): sh, which the installed
    command starts with, would reset the disposition."""
    argv, env = _creating_stage(stage, bundle_factory, 0.2)
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-S", *argv], env=env, capture_output=True, text=True, timeout=60,
            preexec_fn=lambda: signal.signal(signal.SIGCHLD, signal.SIG_IGN),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
    finally:
        _kill_containers(stage)


def test_a_killed_wrapper_leaves_no_masking_child(
    stage: Stage, bundle_factory: Callable[..., str]
) -> None:
    """SIGKILL to the wrapper while the runtime creates: the masking child sees its pipe
    close and exits; only the runtime may still run."""
    argv, env = _creating_stage(stage, bundle_factory, 1.0)
    try:
        proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        time.sleep(0.6)
        with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
            kids = f.read().split()
        assert len(kids) == 2, kids  # the runtime and the masking child
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 5  # a loaded machine may take a while to run it
        while True:
            alive = []
            for k in kids:
                try:
                    with open(f"/proc/{k}/stat") as f:
                        state = f.read().rsplit(")", 1)[1].split()[0]
                    with open(f"/proc/{k}/cmdline") as f:
                        cmdline = f.read()
                except OSError:
                    continue
                if state != "Z":
                    alive.append(cmdline)
            if all("runc" in c for c in alive) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert all("runc" in c for c in alive), alive
    finally:
        time.sleep(0.6)
        _kill_containers(stage)


@pytest.mark.parametrize("gpu", [False, True])
def test_started_with_stdout_closed(
    stage: Stage, bundle_factory: Callable[..., str], gpu: bool
) -> None:
    """An engine may start the runtime with descriptor 1 closed (``sys.stdout`` is then
    ``None``): the wrapper still edits and execs the runtime, no traceback."""
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"] if gpu else [])
    environ = {
        "PATH": f"{stage.bin}:/usr/sbin:/usr/bin:/sbin:/bin",
        "OCIHOOK_CONFIG": str(stage.config),
    }
    proc = subprocess.run(
        [WRAPPER, "create", "--bundle", bundle, "cid"], stderr=subprocess.PIPE, text=True,
        env=environ, timeout=60, preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    called = stage.called()
    assert called is not None and called["argv"][1:] == ["create", "--bundle", bundle, "cid"]
    doc = json.loads(_config(bundle))
    assert ("ocihook.edits" in doc.get("annotations", {})) is gpu  # edited only for a GPU


def test_started_with_stderr_closed_says_nothing_on_stdout(
    stage: Stage, bundle_factory: Callable[..., str]
) -> None:
    """With descriptor 2 closed, ``print(file=sys.stderr)`` would write to stdout (the
    container's, or what the engine parses): the error line is left out, the exit code
    is the error's."""
    bundle = bundle_factory(["true"], [])
    proc = subprocess.run(
        [WRAPPER, "create", "--bundle", bundle, "cid"], stdout=subprocess.PIPE, text=True,
        env={"PATH": "/nonexistent"}, timeout=60, preexec_fn=lambda: os.close(2),
    )  # fmt: skip
    assert proc.returncode == 12  # no runtime found
    assert proc.stdout == ""


def test_exited_tells_a_running_child_from_one_that_has_exited() -> None:
    """``_exited`` (the wrapper's signal handler asks it before passing a signal on): a
    running child is not exited; one that has exited and is not reaped yet is; so is a
    pid that is no child."""
    from ocihook.commands.runtime import _exited

    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert not _exited(proc.pid)
        proc.kill()
        deadline = time.monotonic() + 10
        while not _exited(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _exited(proc.pid)
        assert proc.wait(timeout=10) == -signal.SIGKILL  # still there to be reaped
    finally:
        with contextlib.suppress(OSError):
            proc.kill()
        proc.wait()
    assert _exited(proc.pid)
