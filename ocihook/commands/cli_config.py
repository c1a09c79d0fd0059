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


@click.group(invoke_without_command=True)
@click.option(
    "--config-file",
    "-c",
    "config_file",
    default=None,
    metavar="PATH",
    help="The file to change (default: $OCIHOOK_CONFIG, else /etc/ocihook/config.toml).",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY[=VALUE]",
    help="Set a key (repeatable; the last value of a key wins). A bare KEY is KEY=true for "
    "a boolean key; array elements are separated by ':'.",
)
@click.option("--in-place", "-i", is_flag=True, help="Write the result to the file itself.")
@click.option(
    "--output", "-o", default=None, metavar="PATH", help="Write the result here (default: stdout)."
)
@click.pass_context
def config(
    ctx: click.Context,
    config_file: str | None,
    settings: tuple[str, ...],
    in_place: bool,
    output: str | None,
) -> None:
    """The operator's configuration file (/etc/ocihook/config.toml). Without a command:
    print the file with the --set changes applied, or write it (--in-place, --output), as
    nvidia-ctk config does; comments and layout are kept and the result is checked as
    every command checks it (exit 10 on a bad key or value, nothing written)."""
    given = config_file is not None or settings or in_place or output is not None
    if ctx.invoked_subcommand is not None:
        if given:
            raise click.UsageError(
                "--config-file, --set, --in-place and --output go without a command"
            )
        return
    if not given:
        click.echo(ctx.get_help())
        return
    if in_place and output is not None:
        raise click.UsageError("--in-place and --output: choose one")
    from ..config.load import load_schema, resolve_config_path
    from ..config.setkeys import set_keys
    from ..core.errors import ConfigError
    from ..oci.bundle import write_bytes_atomic

    path, _origin = resolve_config_path(config_file)
    try:
        with open(path, "rb") as f:
            before = f.read((1 << 20) + 1)
    except FileNotFoundError:
        before = b""
    except OSError as e:
        raise ConfigError(f"cannot read the file: {e.strerror}", path=path) from None
    if len(before) > 1 << 20:
        raise ConfigError("the file is larger than 1 MiB", path=path)
    try:
        text = before.decode()
    except UnicodeDecodeError:
        raise ConfigError("the file is not UTF-8", path=path) from None
    after = set_keys(text, settings, load_schema(), path=path)
    target = path if in_place else output
    if target is None:
        click.echo(after, nl=False)
        return
    if target == path and after == text and before:
        click.echo(f"ocihook: {path}: unchanged", err=True)
        return
    try:
        # a missing directory is made (0755), as cdi generate --output makes its own
        os.makedirs(os.path.dirname(os.path.abspath(target)), mode=0o755, exist_ok=True)
        write_bytes_atomic(target, after.encode(), new_mode=0o644)
    except OSError as e:
        raise ConfigError(f"cannot write the file: {e.strerror}", path=target) from None
    click.echo(f"ocihook: {target}: written", err=True)


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
