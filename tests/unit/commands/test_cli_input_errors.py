"""Malformed input values give one error line and a documented exit code, never a
traceback: numbers too long for :func:`int` (4300 digits), NUL bytes and lone surrogates
where paths are expected, names that are not UTF-8 printed on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import make_bundle, run_cli, run_cli_process

from ocihook.discovery import procfs
from ocihook.request.nvidia import classify_device

LONG = "9" * 5000
UUID = "GPU-11111111-2222-3333-4444-555555555555"


def _run(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Any:
    r = run_cli(*args, stdin=stdin, env={**os.environ, **(env or {})})
    assert "Traceback" not in r.stderr, r.stderr
    return r


def _spec(tmp: Path, name: str, version: str = "0.5.0", **edits: Any) -> Path:
    spec = {
        "cdiVersion": version,
        "kind": "example.com/gpu",
        "devices": [{"name": name, "containerEdits": edits or {"env": [f"GPU_{name}=1"]}}],
    }
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(spec))
    return path


@pytest.mark.parametrize("version", ["0.5." + LONG, LONG + ".0.0", "v1." + LONG + ".0"])
def test_cdi_version_thousands_of_digits(version: str, tmp_path: Path) -> None:
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    bad = _spec(spec_dir, "bad", version)
    r = _run("cdi", "validate", str(bad))
    assert r.returncode == 11
    assert "unsupported version" in r.stdout + r.stderr
    _spec(spec_dir, "good")
    r = _run("cdi", "list", "--spec-dir", str(spec_dir))
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["example.com/gpu=good"]
    assert f"skipped {bad}: unsupported version" in r.stderr
    # every CDI start still works while the file sits in the spec directory
    bundle = make_bundle(
        tmp_path, ["NVIDIA_VISIBLE_DEVICES=example.com/gpu=good"], minimal=True, indent=None
    )
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'cdi-spec-dirs = ["{spec_dir}"]\n')
    r = _run("edit", "--config", str(cfg), "-b", str(bundle))
    assert r.returncode == 0, r.stderr
    assert "GPU_good=1" in json.loads((bundle / "config.json").read_text())["process"]["env"]


@pytest.mark.parametrize(
    ("path", "shown"), [("/dev/nu\0ll", "/dev/nu\\x00ll"), ("/dev/\ud800", "/dev/\\ud800")]
)
def test_cdi_device_path_that_names_nothing(path: str, shown: str, tmp_path: Path) -> None:
    """A CDI device node whose path holds a NUL byte or a lone surrogate: the host lookup
    fails as Go's os.Lstat does (EINVAL), exit 11 naming it (a ValueError traceback
    before)."""
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    _spec(spec_dir, "bad", deviceNodes=[{"path": path}])
    bundle = make_bundle(
        tmp_path, ["NVIDIA_VISIBLE_DEVICES=example.com/gpu=bad"], minimal=True, indent=None
    )
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'cdi-spec-dirs = ["{spec_dir}"]\n')
    before = (bundle / "config.json").read_bytes()
    r = _run("edit", "--config", str(cfg), "-b", str(bundle))
    assert r.returncode == 11
    assert f'failed to stat CDI host device "{shown}": invalid argument' in r.stderr
    assert (bundle / "config.json").read_bytes() == before


def test_config_integer_too_long(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text(f"disable-require = {LONG}\n")
    r = _run("config", "show", "--config", str(cfg))
    assert r.returncode == 10
    assert r.stderr.strip() == (
        f"ocihook: error[bad-config]: invalid TOML: an integer of more than "
        f"{sys.get_int_max_str_digits()} digits (file {cfg}); hint: no key takes a number "
        "that long"
    )
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"], minimal=True, indent=None)
    assert _run("edit", "--config", str(cfg), "-b", str(bundle)).returncode == 10


@pytest.mark.parametrize(
    ("bundle", "problem"),
    [("/tmp/a\\u0000b", "holds a NUL byte"), ("/tmp/\\ud800", "is not valid Unicode")],
)
@pytest.mark.parametrize(
    "stage", ["prestart", "createRuntime", "create-container", "update-ldcache"]
)
def test_state_bundle_that_names_nothing(bundle: str, problem: str, stage: str) -> None:
    state = '{"ociVersion": "1.0.2", "id": "c", "pid": 1, "bundle": "' + bundle + '"}'
    r = _run("hook", stage, stdin=state)
    assert r.returncode == 4, r.stderr
    assert f"error[bad-state]: bundle {problem}" in r.stderr


@pytest.mark.parametrize(("root", "problem"), [("r\0", "NUL"), ("r\ud800", "lone surrogate")])
def test_root_path_that_names_nothing(root: str, problem: str, tmp_path: Path) -> None:
    bundle = make_bundle(
        tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"], minimal=True, indent=None, root={"path": root}
    )
    r = _run("edit", "-b", str(bundle))
    assert r.returncode == 3
    assert "field root.path" in r.stderr and problem in r.stderr


def test_diff_of_config_with_lone_surrogate(tmp_path: Path, sim: Any) -> None:
    bundle = make_bundle(
        tmp_path, ["NVIDIA_VISIBLE_DEVICES=0", "X=\ud800"], minimal=True, indent=None
    )
    r = _run(
        "edit",
        "--diff",
        "--dry-run",
        "-b",
        str(bundle),
        "--driver-root",
        sim.root,
        "--dev-root",
        sim.root,
    )
    assert r.returncode == 0, r.stderr
    assert '"X=\\ud800"' in r.stdout


def test_non_utf8_bundle_name_on_strict_stdout(tmp_path: Path, sim: Any) -> None:
    """Outside the C locale Python's stdout is strict: a bundle directory whose name is
    not UTF-8 is printed as its bytes."""
    raw = os.fsencode(str(tmp_path)) + b"/b\xff"
    os.makedirs(raw + b"/rootfs")
    doc = {"root": {"path": "rootfs"}, "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}
    with open(raw + b"/config.json", "w") as f:
        json.dump(doc, f)
    # a process: the interpreter's own stdout, strict by PYTHONIOENCODING
    r = run_cli_process(
        *("edit", "--dry-run", "-b", os.fsdecode(raw), "--driver-root", sim.root),
        *("--dev-root", sim.root),
        env={**os.environ, "PYTHONIOENCODING": "utf-8:strict"},
        text=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(b"ocihook: dry run, " + raw + b"/config.json unchanged")


def test_mig_instance_ids_too_long(tmp_path: Path, sim: Any) -> None:
    item = f"MIG-{sim.gpus[0].uuid}/{LONG}/0"
    assert classify_device(item) is None
    assert classify_device(f"MIG-{UUID}/1/2") == "mig-uuid"
    bundle = make_bundle(tmp_path, [f"NVIDIA_VISIBLE_DEVICES={item}"], minimal=True, indent=None)
    r = _run("edit", "-b", str(bundle), "--driver-root", sim.root, "--dev-root", sim.root)
    assert r.returncode == 5
    assert "unsupported GPU identifier" in r.stderr


def test_host_numbers_too_long() -> None:
    """Driver-root files are read, not trusted: a number of thousands of digits is no
    number (these parsers raised ValueError)."""
    assert procfs.decimal(LONG) is None
    assert procfs.decimal("195") == 195
    assert procfs.canonical_decimal(LONG) is None
    assert procfs.parse_misc(f"{LONG} nvidia-caps\n 63 gdrdrv\n") == {"gdrdrv": 63}
    proc = f"Character devices:\n{LONG} nvidia\n195 nvidia\n"
    assert procfs.parse_char_majors(proc) == {"nvidia": (195,)}


def test_runtime_log_of_non_utf8_bundle(tmp_path: Path) -> None:
    """ocihook-runtime's error entry in the engine's --log file names a bundle path that
    is not UTF-8 (it raised UnicodeEncodeError while reporting the error)."""
    log = tmp_path / "runtime.log"
    bundle = os.fsencode(str(tmp_path)) + b"/missing\xff"
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from ocihook.runtime import main; sys.exit(main())",
            "--log",
            str(log),
            "create",
            "--bundle",
            bundle,
            "cid",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    entry = log.read_text().splitlines()[-1]
    assert entry.endswith(
        f'level=error msg="ocihook-runtime: error[bad-config-json]: config.json not found '
        f"(file {tmp_path}/missing\\udcff/config.json); hint: pass the bundle directory with "
        '--bundle"'
    )


@pytest.mark.parametrize(
    ("engine", "text"),
    [
        ("containerd", "version = 2\nsome_limit = 0x" + "f" * 5000 + "\n"),
        ("crio", "[crio.runtime]\nsome_limit = 0x" + "f" * 5000 + "\n"),
    ],
)
def test_engine_config_with_a_huge_hex_integer(engine: str, text: str, tmp_path: Path) -> None:
    """An engine file holding an integer of more than 4300 decimal digits (hex in TOML)
    is edited like any other: the meaning check compares integers, never their text
    (json.dumps raised ValueError, reported as a usage error, exit 2)."""
    path = tmp_path / "engine.toml"
    path.write_text(text)
    r = _run("runtime", "configure", "--runtime", engine, "--config", str(path))
    assert r.returncode == 0, r.stderr
    after = path.read_text()
    assert after.startswith(text) and "ocihook-runtime" in after


@given(
    parts=st.lists(
        st.text(alphabet="0123456789", min_size=1, max_size=6000), min_size=3, max_size=3
    ),
    prefix=st.sampled_from(["", "v"]),
)
@settings(max_examples=50, deadline=None)
def test_cdi_version_parse_never_raises(parts: list[str], prefix: str) -> None:
    """Any MAJOR.MINOR.PATCH of decimal digits parses (long numbers count as huge) and
    compares as the numbers do."""
    from ocihook.cdi.spec import cdi_version_tuple

    got = cdi_version_tuple(prefix + ".".join(parts))
    assert got is not None
    want = tuple(int(p) if len(p) <= 9 else 10**9 for p in parts)
    assert got == want


@pytest.mark.parametrize(("kind", "target"), [("device", "/dev/zero"), ("FIFO", None)])
@pytest.mark.parametrize("stage", ["prestart", "createRuntime", "create-container"])
def test_hook_config_json_special_file(
    tmp_path: Path, kind: str, target: str | None, stage: str
) -> None:
    """A bundle whose config.json is /dev/zero or a FIFO: the hook (its no-GPU fast exit
    included) refuses it in one line, exit 3, without reading or blocking."""
    path = tmp_path / "config.json"
    if target is None:
        os.mkfifo(path)
    else:
        path.symlink_to(target)
    state = json.dumps({"ociVersion": "1.0.2", "id": "c", "pid": 1, "bundle": str(tmp_path)})
    r = run_cli_process("hook", stage, stdin=state, timeout=30)
    assert r.returncode == 3, r.stderr
    assert f"cannot read config.json: not a regular file (a {kind})" in r.stderr
    assert "Traceback" not in r.stderr


def test_hook_state_larger_than_limit() -> None:
    """More than 16 MiB of state on stdin: refused in one line, exit 4."""
    state = '{"id": "c", "bundle": "/x", "pad": "' + "x" * (16 << 20) + '"}'
    r = run_cli_process("hook", "prestart", stdin=state, timeout=60)
    assert r.returncode == 4, r.stderr[-500:]
    assert "state JSON larger than 16777216 bytes" in r.stderr


@pytest.mark.parametrize(
    ("variable", "name"),
    [
        ("NVIDIA_VISIBLE_DEVICES", "nvidia.com/gpu=0"),
        ("AMD_VISIBLE_DEVICES", "amd.com/gpu=0"),
        ("INTEL_VISIBLE_DEVICES", "intel.com/gpu=0"),
    ],
)
def test_hook_mode_cdi_names_same_answer_for_every_vendor(
    tmp_path: Path, sim: Any, variable: str, name: str
) -> None:
    """Hook mode has no CDI path: a qualified CDI name is refused with one line (exit 5)
    whichever vendor's variable holds it (AMD's and Intel's were once dropped silently)."""
    make_bundle(
        tmp_path,
        [f"{variable}=0,{name}" if variable != "NVIDIA_VISIBLE_DEVICES" else f"{variable}={name}"],
    )
    bundle = tmp_path / "bundle"
    state = json.dumps(
        {"ociVersion": "1.0.2", "id": "c", "pid": os.getpid(), "bundle": str(bundle)}
    )
    r = _run("hook", "prestart", "--driver-root", sim.root, "--dev-root", sim.root, stdin=state)
    assert r.returncode == 5, r.stderr
    assert r.stderr == (
        "ocihook: error[bad-request]: CDI device names are injected from the CDI registry by "
        f"spec mode, not here (file {bundle}/config.json, field process.env[{variable}], "
        f"value '{name}'); hint: use spec mode (ocihook edit) or a CDI-aware runtime, or "
        "request the GPU by index\n"
    )


@pytest.mark.parametrize(("request_env", "code"), [(None, 0), ("NVIDIA_VISIBLE_DEVICES=0", 3)])
def test_hook_oversized_config_json(tmp_path: Path, request_env: str | None, code: int) -> None:
    """Over 16 MiB: a container that asks for nothing takes the fast exit (the file is
    scanned in pieces, as runc reads it whole); one that asks for a GPU is refused."""
    bundle = make_bundle(tmp_path, [request_env] if request_env else [])
    doc = json.loads((bundle / "config.json").read_text())
    doc["annotations"] = {"org.example/blob": "x" * (17 << 20)}
    (bundle / "config.json").write_text(json.dumps(doc))
    state = json.dumps({"ociVersion": "1.0.2", "id": "c", "pid": 1, "bundle": str(bundle)})
    r = run_cli_process("hook", "prestart", stdin=state, timeout=60)
    assert r.returncode == code, r.stderr
    if code:
        assert "larger than 16777216 bytes (16 MiB)" in r.stderr
