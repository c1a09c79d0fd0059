"""``ocihook config``: the operator's configuration file (show, default, check, migrate)."""

from __future__ import annotations

import json
import os

import click

from .cli_options import root_option


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a JSON string is a TOML basic string


@click.group()
def config() -> None:
    """The operator's configuration file (/etc/ocihook/config.toml)."""


@config.command()
@root_option("--config")
def show(config_path: str | None) -> None:
    """Print the effective configuration as TOML (every key, defaults filled in)."""
    from ..config.load import load_config

    cfg = load_config(config_path)
    click.echo(f"# effective configuration; file: {cfg.source or '(none: built-in defaults)'}")
    for key, value in cfg.as_dict().items():
        click.echo(f"{key} = {_toml_value(value)}")


@config.command()
def default() -> None:
    """Print the default configuration file, every key commented and explained."""
    from importlib.resources import files

    click.echo(files("ocihook").joinpath("schemas/config.toml.example").read_text(), nl=False)


@config.command(name="check")
@root_option("--config")
def config_check(config_path: str | None) -> None:
    """Check the configuration file: against its JSON Schema shipped in the package
    (jsonschema; one line per violation, naming the key) and with the loader every command
    uses. Prints "PATH: OK"; exits 10 on the first error the loader finds, or when the
    schema finds any."""
    from ..config.load import (
        DEFAULT_PATH,
        parse_config_bytes,
        read_config_bytes,
        resolve_config_path,
    )
    from ..config.validate import config_from_dict
    from ..core.errors import ConfigError
    from ..schemas import violations

    file, _origin = resolve_config_path(config_path)
    shown = os.path.abspath(file)
    data = read_config_bytes(config_path)
    if data is None:
        click.echo(f"{DEFAULT_PATH}: OK (no such file: the built-in defaults apply)")
        return
    document = parse_config_bytes(data, path=shown)
    found = violations(document, "config")
    for v in found:
        click.echo(f"{shown}: schema: {v}", err=True)
    config_from_dict(document, source=shown)  # raises ConfigError, exit 10
    if found:
        raise ConfigError(
            f"{len(found)} schema violations (listed above)", path=shown,
            hint="`ocihook config default` prints every key with its syntax",
        )  # fmt: skip
    click.echo(f"{shown}: OK")


@config.command()
@click.argument("toolkit_file", metavar="[TOOLKIT_FILE]", required=False)
@click.option(
    "-o",
    "--output",
    default=None,
    metavar="PATH",
    help="Write the ocihook file here (mode 0644, atomically) instead of standard output.",
)
@click.option("--force", is_flag=True, help="Replace an existing --output file.")
def migrate(toolkit_file: str | None, output: str | None, force: bool) -> None:
    """Convert the NVIDIA Container Toolkit's config.toml (default
    /etc/nvidia-container-runtime/config.toml) to an ocihook configuration file.

    Keys with an ocihook equivalent are carried over; every key that is dropped or whose
    value changes is named once on standard error. The result is checked as ocihook reads
    it before anything is written."""
    from ..config.migrate import TOOLKIT_PATH, load_toolkit_config, render_config

    shown = os.path.abspath(toolkit_file or TOOLKIT_PATH)
    migration = load_toolkit_config(shown)
    text = render_config(migration.document, f"ocihook configuration converted from {shown}")
    for note in migration.notes:
        click.echo(f"ocihook: note: {note}", err=True)
    if output is None:
        click.echo(text, nl=False)
        return
    if os.path.lexists(output) and not force:
        raise click.ClickException(f"{output} exists; pass --force to replace it")
    from ..oci.bundle import write_bytes_atomic

    write_bytes_atomic(output, text.encode(), new_mode=0o644)
    click.echo(f"ocihook: wrote {output} ({len(migration.document)} keys)", err=True)
