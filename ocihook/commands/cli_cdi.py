"""``ocihook cdi``: CDI spec files (generate, list, validate, transform root)."""

from __future__ import annotations

import json
import os
import sys

import click

from ..core.readfile import MAX_JSON_BYTES, read_binary_stream, read_regular
from .cli_options import PASS_THROUGH, FastCommand


@click.group()
def cdi() -> None:
    """Container Device Interface (CDI) spec files: generate, list, validate, transform."""


@cdi.command()
@click.argument("files", nargs=-1, required=True)
def validate(files: tuple[str, ...]) -> None:
    """Validate CDI spec FILES (JSON or YAML, CDI 0.3.0 to 1.1.0).

    Each file is checked twice: by the spec loader (every rule of CDI SPEC.md, the minimum
    cdiVersion; its first error) and against the CDI JSON Schema shipped in the package
    (jsonschema; one line per violation, naming the JSON path). Prints one line per valid file: its
    kind, device count, declared and minimum cdiVersion. Every file is checked; exits 11
    when any is invalid."""
    from ..cdi.names import CdiError
    from ..cdi.spec import decode_spec, minimum_version, spec_from_dict
    from ..schemas import load_schema, schema_path, violations

    try:
        schema = load_schema("cdi")
    except (OSError, ValueError) as err:
        raise CdiError(
            f"cannot read the CDI schema: {err}", path=schema_path("cdi"),
            hint="the ocihook installation is incomplete; reinstall it",
        ) from None  # fmt: skip
    bad = 0
    for path in files:
        try:
            document = decode_spec(read_regular(path), path=path)
        except OSError as err:
            bad += 1
            click.echo(f"{path}: invalid: cannot read: {err.strerror}", err=True)
            continue
        except CdiError as err:
            bad += 1
            click.echo(f"{path}: invalid: {err}", err=True)
            continue
        problems = []
        try:
            spec = spec_from_dict(document, path=path)
        except CdiError as err:
            problems.append(f"{path}: invalid: {err}")
        problems += [f"{path}: invalid: schema: {v}" for v in violations(document, schema)]
        if problems:
            bad += 1
            for line in problems:
                click.echo(line, err=True)
            continue
        click.echo(
            f"{path}: ok: kind {spec.kind}, {len(spec.devices)} devices, "
            f"cdiVersion {spec.version} (minimum {minimum_version(spec)})"
        )
    if bad:
        raise CdiError(f"{bad} of {len(files)} CDI spec files invalid")


@cdi.command(name="list")
@click.option(
    "--spec-dir",
    "spec_dirs",
    multiple=True,
    metavar="DIR",
    help="CDI spec directory, lowest priority first; repeatable "
    "(default: /etc/cdi then /var/run/cdi).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def cdi_list(spec_dirs: tuple[str, ...], as_json: bool) -> None:
    """List the qualified names (vendor/class=name) of the CDI devices in the spec
    directories. Broken spec files and conflicting devices (two spec files of one
    directory defining one name: one line naming both files) are reported on stderr and
    skipped; the others are listed. A name a later directory's file overrides is noted. A
    spec whose hook command is missing, or that another ocihook version wrote, is said on
    stderr too (still listed). Missing spec directories, and no spec file at all, are said
    on stderr (exit 0)."""
    from ..cdi.registry import DEFAULT_SPEC_DIRS, Registry
    from ..doctor.specs import SPEC_HOOK_FIX, spec_hook_problems

    dirs = spec_dirs or DEFAULT_SPEC_DIRS
    registry = Registry.load(dirs)
    missing = [d for d in dirs if not os.path.isdir(d)]
    if missing and len(missing) == len(dirs):
        click.echo(
            f"ocihook: no CDI spec directory: {', '.join(missing)} "
            f"{'does' if len(missing) == 1 else 'do'} not exist; hint: ocihook cdi generate "
            "--output /var/run/cdi/nvidia.yaml writes a spec (and its directory)",
            err=True,
        )
    else:
        for d in missing:
            click.echo(f"ocihook: note: CDI spec directory {d} does not exist", err=True)
        if not registry.specs and not registry.errors:
            click.echo(f"ocihook: no CDI spec files in {', '.join(dirs)}", err=True)
    for path, err in sorted(registry.errors.items()):
        click.echo(f"ocihook: warning: skipped {path}: {err}", err=True)
    for collision in registry.collisions():  # one line per set of files, naming them all
        if collision.overrides:
            click.echo(f"ocihook: note: {collision.message()}", err=True)
        else:
            click.echo(
                f"ocihook: warning: skipped: {collision.message()}; hint: {collision.hint()}",
                err=True,
            )
    hook_problems: dict[str, dict[str, list[str]]] = {}
    for _priority, path, spec in registry.specs:
        failures, warnings = spec_hook_problems(spec)
        if failures or warnings:
            hook_problems[path] = {"failures": failures, "warnings": warnings}
        for text in failures:
            click.echo(
                f"ocihook: warning: {path}: {text}: containers given its devices do not "
                f"start; hint: {SPEC_HOOK_FIX}",
                err=True,
            )
        for text in warnings:
            click.echo(f"ocihook: warning: {path}: {text}; hint: {SPEC_HOOK_FIX}", err=True)
    if as_json:
        out = {
            "devices": registry.list_devices(),
            "vendors": registry.vendors(),
            "classes": registry.classes(),
            "errors": {path: str(err) for path, err in sorted(registry.errors.items())},
            "conflicts": {name: list(paths) for name, paths in sorted(registry.conflicts.items())},
            "overridden": {
                name: list(paths) for name, paths in sorted(registry.overridden.items())
            },
            "missing_dirs": missing,
            "hook_problems": hook_problems,
        }
        click.echo(json.dumps(out, indent=2))
        return
    for name in registry.list_devices():
        click.echo(name)


@cdi.command(
    cls=FastCommand,
    fast_words=("cdi", "generate"),
    context_settings=PASS_THROUGH,
    add_help_option=False,
)
@click.pass_context
def generate(ctx: click.Context) -> None:
    """Generate a CDI spec for the host's NVIDIA GPUs (see cdi generate --help)."""
    from .fast import run_fast

    ctx.exit(run_fast(["cdi", "generate", *ctx.args]))


@cdi.group()
def transform() -> None:
    """Transform a CDI spec."""


@transform.command()
@click.option("--from", "old", required=True, metavar="PATH", help="Root the spec's paths use now.")
@click.option("--to", "new", required=True, metavar="PATH", help="Root they should use.")
@click.option(
    "--relative-to",
    type=click.Choice(["host", "container"]),
    default="host",
    show_default=True,
    help="Change host paths or container paths.",
)
@click.option(
    "--input", "input_path", default="-", metavar="PATH", help="Spec to read (default: stdin)."
)
@click.option(
    "--output", default=None, metavar="PATH", help="Write here, atomically (default: stdout)."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "yaml"]),
    default=None,
    help="Output format (default: from --output's extension, else yaml).",
)
def root(
    old: str, new: str, relative_to: str, input_path: str, output: str | None, fmt: str | None
) -> None:
    """Replace the root of a spec's paths (a driver under /run/nvidia/driver -> /, ...)."""
    from ..cdi.generate import spec_bytes, spec_format, transform_root, write_spec
    from ..cdi.names import CdiError
    from ..cdi.spec import load_spec

    if input_path == "-":
        data, name = read_binary_stream(sys.stdin.buffer), "<stdin>"
        if len(data) > MAX_JSON_BYTES:
            raise CdiError(f"the CDI spec on stdin is larger than {MAX_JSON_BYTES} bytes")
    else:
        try:
            data, name = read_regular(input_path), input_path
        except OSError as e:
            raise CdiError(f"cannot read the CDI spec: {e.strerror}", path=input_path) from None
    spec = transform_root(load_spec(data, path=name), old, new, relative_to=relative_to)
    write_spec(spec_bytes(spec, spec_format(fmt, output)), output)
