"""The command line's global options and version output, as the NVIDIA Container
Toolkit's commands have them: ``--debug``/``-d``, ``--quiet``, ``--version``/``-v``
(``ocihook``), ``ocihook-runtime --version`` and ``nvidia-container-runtime-hook
-version``/``-help`` with its Go-style flags."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from support import REPO, run_cli_process

from ocihook import _main
from ocihook.commands import globalopts
from ocihook.core.version import VERSION, version_line
from ocihook.sim.demo import default_config


def _bundle(tmp_path: Path, env: list[str]) -> Path:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps(default_config(["sh"], env)))
    return bundle


def test_the_version_is_the_packages() -> None:
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["project"]["version"] == VERSION
    import ocihook

    assert ocihook.__version__ == VERSION
    assert version_line("x") == f"x version {VERSION}"


@pytest.mark.parametrize("flag", ["--version", "-v"])
def test_ocihook_version_reads_like_the_toolkits(flag: str) -> None:
    r = run_cli_process(flag)
    assert (r.returncode, r.stdout) == (0, f"ocihook version {VERSION}\n")


def test_split_global_options_takes_only_the_words_before_the_command() -> None:
    assert globalopts.split_global_options(["--quiet", "-d", "edit", "--quiet"]) == (
        True,
        True,
        ["edit", "--quiet"],
    )
    assert globalopts.split_global_options(["edit", "-d"]) == (False, False, ["edit", "-d"])
    assert globalopts.split_global_options([]) == (False, False, [])


def test_debug_writes_the_log_to_stderr_for_a_fast_command(sim: Any, tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=1"])
    args = ["edit", "--dry-run", "-b", str(bundle), "--driver-root", sim.root]
    args += ["--dev-root", sim.root]
    plain = run_cli_process(*args)
    debug = run_cli_process("--debug", *args)
    assert plain.returncode == debug.returncode == 0
    assert "ocihook: log:" not in plain.stderr
    lines = [ln for ln in debug.stderr.splitlines() if ln.startswith("ocihook: log: ")]
    gpu1 = next(g for g in sim.gpus if g.index == 1)
    assert any(" debug " in ln and "gpus chosen" in ln and gpu1.uuid in ln for ln in lines)
    assert debug.stdout == plain.stdout  # the command's own output is unchanged


def test_quiet_keeps_errors_and_stdout_and_drops_the_rest(sim: Any, tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=1"])
    roots = ["--driver-root", sim.root, "--dev-root", sim.root]
    done = run_cli_process("--quiet", "--debug", "edit", "-b", str(bundle), *roots)
    assert (done.returncode, done.stderr) == (0, "")  # no summary line, no log lines
    assert "/dev/nvidia" in (bundle / "config.json").read_text()
    spec = run_cli_process("--quiet", "cdi", "generate", "--format", "json", *roots)
    assert spec.returncode == 0 and json.loads(spec.stdout)["kind"] == "nvidia.com/gpu"
    bad = run_cli_process("--quiet", "edit", "-b", str(tmp_path / "none"), *roots)
    assert bad.returncode == 3
    assert bad.stderr.startswith("ocihook: error[bad-config-json]: config.json not found")
    usage = run_cli_process("--quiet", "config", "show", "--no-such-option")
    assert usage.returncode == 2 and "Error:" in usage.stderr


def test_errors_only_judges_whole_lines() -> None:
    below = io.StringIO()
    stream = globalopts.ErrorsOnly(below)  # type: ignore[arg-type]
    stream.write("ocihook: note: something\nocihook: err")
    stream.write("or[bad-request]: no such GPU\nTraceback (most recent call last):\n  x\n")
    stream.write("partial error[x]")
    stream.flush()
    assert below.getvalue() == (
        "ocihook: error[bad-request]: no such GPU\n"
        "Traceback (most recent call last):\n  x\npartial error[x]"
    )


def test_the_wrapper_prints_its_version_then_the_runtimes(tmp_path: Path) -> None:
    runtime = tmp_path / "fake-runc"
    runtime.write_text("#!/bin/sh\necho 'runc version 9.9'\n")
    runtime.chmod(0o755)
    config = tmp_path / "config.toml"
    config.write_text(f'runtimes = ["{runtime}"]\n')
    env = {**os.environ, "OCIHOOK_CONFIG": str(config)}
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from ocihook.runtime import main; sys.exit(main())",
            "--version",
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"ocihook-runtime version {VERSION}\n\nrunc version 9.9\n"


@pytest.mark.parametrize("flag", ["-version", "--version"])
def test_the_docker_hook_answers_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _main.nvidia_hook_main([flag]) == 0
    out = capsys.readouterr().out
    assert out == f"nvidia-container-runtime-hook version {VERSION} (ocihook)\n"


@pytest.mark.parametrize("flag", ["-help", "--help", "-h"])
def test_the_docker_hook_answers_help(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _main.nvidia_hook_main([flag]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage of nvidia-container-runtime-hook:\n  -config string")
    assert "  prestart\n" in out and "-debug" in out and "-version" in out


def test_the_docker_hook_reads_go_style_flags() -> None:
    flags = _main._nvidia_hook_flags
    assert flags(["-config", "/c.toml", "prestart"]) == (
        ["prestart", "--config", "/c.toml"],
        False,
        False,
        False,
    )
    assert flags(["--config=/c.toml", "-debug", "prestart", "-x"]) == (
        ["prestart", "--config", "/c.toml", "-x"],
        True,
        False,
        False,
    )
    assert flags(["prestart", "-debug"]) == (["prestart", "-debug"], False, False, False)
    assert flags(["-bogus", "prestart"]) == (["-bogus", "prestart"], False, False, False)
