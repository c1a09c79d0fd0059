"""``ocihook config check``: the configuration file against its packaged JSON Schema
(jsonschema) and the loader every command uses; OK or each violation, exit 10."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import run_cli

from ocihook.config.load import DEFAULT_PATH


def check(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "OCIHOOK_CONFIG"}
    return run_cli("config", "check", *args, cwd=cwd, env={**environ, **(env or {})})


def test_a_good_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('log-level = "debug"\nmode = "cdi"\nruntimes = ["crun", "runc"]\n')
    out = check("--config", str(path), cwd=tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (0, f"{path}: OK\n", "")


def test_the_default_file_is_ok(tmp_path: Path) -> None:
    """What ``ocihook config default`` prints (every key commented out) checks OK, and so
    does the same file with every example value uncommented."""
    default = run_cli("config", "default").stdout
    path = tmp_path / "config.toml"
    path.write_text(default)
    out = check("--config", str(path), cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, f"{path}: OK\n"), out.stderr
    values = [line[2:] for line in default.splitlines() if re.match(r"# [a-z-]+ = ", line)]
    assert len(values) == 21
    path.write_text("\n".join(values) + "\n")
    out = check("--config", str(path), cwd=tmp_path)
    assert (out.returncode, out.stdout) == (0, f"{path}: OK\n"), out.stderr


def test_every_violation_then_exit_10(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('log-level = "loud"\nmode = 3\nbogus = 1\n')
    out = check("--config", str(path), cwd=tmp_path)
    assert out.returncode == 10 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"{path}: schema: $: Additional properties are not allowed ('bogus' was unexpected)",
        f"{path}: schema: $.log-level: 'loud' is not one of ['debug', 'info', 'warning', 'error']",
        f"{path}: schema: $.mode: 3 is not one of ['auto', 'legacy', 'cdi']",
        f"ocihook: error[bad-config]: unknown value (file {path}, field log-level, value 'loud'); "
        "hint: valid values: debug, info, warning, error",
    ]


def test_not_toml(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("log-level = \n")
    out = check("--config", str(path), cwd=tmp_path)
    assert out.returncode == 10
    assert out.stderr == (
        f"ocihook: error[bad-config]: invalid TOML: Invalid value (at line 1, column 13) "
        f"(file {path}); hint: `ocihook config default` prints every key with its syntax\n"
    )


def test_the_environment_variable_and_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "env.toml"
    path.write_text("no-cgroups = true\n")
    out = check(cwd=tmp_path, env={"OCIHOOK_CONFIG": str(path)})
    assert (out.returncode, out.stdout) == (0, f"{path}: OK\n"), out.stderr
    out = check("--config", str(tmp_path / "missing.toml"), cwd=tmp_path)
    assert out.returncode == 10
    assert "configuration file named by --config not found" in out.stderr


def test_no_file_at_the_default_path(tmp_path: Path) -> None:
    if os.path.exists(DEFAULT_PATH):
        pytest.skip(f"{DEFAULT_PATH} exists on this machine")
    out = check(cwd=tmp_path)
    assert (out.returncode, out.stdout) == (
        0,
        f"{DEFAULT_PATH}: OK (no such file: the built-in defaults apply)\n",
    )


def test_only_the_schema_objects(tmp_path: Path) -> None:
    """Where the loader accepts what the schema refuses (a schema made stricter here),
    the check still fails with exit 10."""
    import ocihook.schemas as schemas

    path = tmp_path / "config.toml"
    path.write_text('log-level = "info"\n')
    schema = schemas.load_schema("config")
    schema["properties"]["log-level"]["enum"] = ["debug"]
    code = (
        "import sys, ocihook.schemas as s; from ocihook.commands.cli import cli_main\n"
        f"s.load_schema = lambda name: {schema!r}\n"
        f"sys.exit(cli_main(['config', 'check', '--config', {str(path)!r}]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 10 and out.stdout == ""
    assert out.stderr.splitlines() == [
        f"{path}: schema: $.log-level: 'info' is not one of ['debug']",
        f"ocihook: error[bad-config]: 1 schema violations (listed above) (file {path}); "
        "hint: `ocihook config default` prints every key with its syntax",
    ]
