"""``ocihook config --set KEY=VALUE [--in-place | --output F]``, as ``nvidia-ctk config``."""

from __future__ import annotations

import os
from pathlib import Path

from support import run_cli


def test_set_prints_by_default_and_writes_in_place(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('# notes\nmode = "auto"\n')
    shown = run_cli("config", "-c", str(path), "--set", "no-cgroups", "--set", "mode=legacy")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == '# notes\nmode = "legacy"\nno-cgroups = true\n'
    assert path.read_text() == '# notes\nmode = "auto"\n'  # printed, not written
    os.chmod(path, 0o600)
    done = run_cli("config", "--config-file", str(path), "--set", "mode=legacy", "-i")
    assert done.returncode == 0 and f"{path}: written" in done.stderr
    assert path.read_text() == '# notes\nmode = "legacy"\n'
    assert os.stat(path).st_mode & 0o777 == 0o600  # the file's mode is kept
    again = run_cli("config", "-c", str(path), "--set", "mode=legacy", "--in-place")
    assert again.returncode == 0 and "unchanged" in again.stderr


def test_output_writes_another_file_and_a_missing_file_starts_empty(tmp_path: Path) -> None:
    out = tmp_path / "new.toml"
    r = run_cli(
        "config", "-c", str(tmp_path / "none.toml"), "--set", "log-level=debug", "-o", str(out)
    )
    assert r.returncode == 0, r.stderr
    assert out.read_text() == 'log-level = "debug"\n'
    assert not (tmp_path / "none.toml").exists()


def test_a_bad_setting_exits_10_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('mode = "auto"\n')
    r = run_cli("config", "-c", str(path), "--set", "mode=csv", "-i")
    assert r.returncode == 10
    assert r.stderr.startswith(
        f"ocihook: error[bad-config]: unknown value (file {path}, field mode"
    )
    assert path.read_text() == 'mode = "auto"\n'


def test_group_options_with_a_command_are_a_usage_error(tmp_path: Path) -> None:
    r = run_cli("config", "--set", "no-cgroups", "show")
    assert r.returncode == 2 and "go without a command" in r.stderr
    both = run_cli("config", "--set", "no-cgroups", "-i", "-o", str(tmp_path / "x"))
    assert both.returncode == 2 and "choose one" in both.stderr
    plain = run_cli("config")
    assert plain.returncode == 0 and "--set KEY[=VALUE]" in plain.stdout


def test_the_toolkits_spelling_of_a_key_points_to_ocihooks(tmp_path: Path) -> None:
    cfg = tmp_path / "config.toml"
    r = run_cli("config", "--set", "nvidia-container-cli.no-cgroups=true", "-c", str(cfg))
    assert r.returncode == 10
    assert r.stderr.endswith(
        "hint: nvidia-container-cli.no-cgroups is the NVIDIA Container Toolkit's key; "
        "ocihook's is no-cgroups (ocihook config migrate converts a whole toolkit file)\n"
    )
    assert not cfg.exists()


def test_output_in_a_missing_directory_makes_it(tmp_path: Path) -> None:
    out = tmp_path / "etc" / "ocihook" / "config.toml"
    r = run_cli("config", "--set", "no-cgroups", "-c", str(tmp_path / "none.toml"), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "no-cgroups = true" in out.read_text()
    assert oct(out.parent.stat().st_mode & 0o777) == "0o755"
