"""The generated references of the documentation site: the command line from its parsers
and the exit codes from the error table.

``docs/reference/cli.md`` holds the ``--help`` text of every command, taken from the
parsers themselves (click's for the CLI, ``ocihook.commands.fast``'s for ``edit``, ``hook``
and ``cdi generate``), and ``docs/reference/exit-codes.md`` one row per exit code, made from
:data:`ocihook.core.errors.EXIT_CODES` and each error class's reference name and docstring.
``scripts/gen-reference`` writes both; ``tests/contract/test_docs.py`` fails when a
committed file differs from what this module makes.

Run as ``python -m ocihook.commands.docref [--check] DOCS_DIR``: writes (or, with
``--check``, compares; exit 1 on a difference) ``DOCS_DIR/reference/cli.md`` and
``DOCS_DIR/reference/exit-codes.md``.
"""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence

import click

from ..core.errors import EXIT_CODES, OcihookError
from .cli import cli

__all__ = [
    "API_DOCUMENT",
    "CLI_DOCUMENT",
    "EXIT_CODES_DOCUMENT",
    "OTHER_EXIT_CODES",
    "command_paths",
    "help_text",
    "main",
    "public_names",
    "render_api_reference",
    "render_cli_reference",
    "render_exit_codes",
]

#: Where the generated pages go, relative to the docs directory.
API_DOCUMENT = "reference/api.md"
CLI_DOCUMENT = "reference/cli.md"
EXIT_CODES_DOCUMENT = "reference/exit-codes.md"

#: The exit codes no error class stands for: (code, meaning).
OTHER_EXIT_CODES: tuple[tuple[int, str], ...] = (
    (0, "success, or nothing was requested"),
    (1, "an internal error (a bug: please report it, with the command line)"),
    (
        2,
        "bad command-line usage (also: `ocihook hook` with a missing or unknown stage, or a"
        " helper stage given nothing to do; `ocihook cdi generate` with a `--mode` ocihook"
        " does not generate (the toolkit's csv, management, gds, mofed, imex, nvswitch,"
        " gdrcopy), a malformed `--device-id`, or a hook name the toolkit does not know)",
    ),
    (
        9,
        "a hook or command was started with variables that make the C library or the"
        " interpreter load code or read files they name (`LD_PRELOAD`, `LD_AUDIT`,"
        " `LD_LIBRARY_PATH`, `GCONV_PATH`, `PYTHONPATH`, `PYTHONHOME`, `PYTHONPYCACHEPREFIX`,"
        " ...) in its environment, or a hook's environment is the container's `process.env`"
        " (`error[container-environment]`): registered without an explicit `env`, such"
        " variables can come from the image; it does nothing host-side (docs/security.md)",
    ),
)

#: The commands whose arguments ``ocihook.commands.fast`` parses (click passes them on).
_FAST = (("edit",), ("hook",), ("cdi", "generate"))

#: Width the help texts are wrapped at (click and argparse read ``COLUMNS``).
_COLUMNS = "100"


def command_paths() -> list[tuple[str, ...]]:
    """Every command of the CLI as the words after ``ocihook``, groups included, in the
    order ``ocihook --help`` lists them (depth first): ``[(), ("cdi",), ("cdi",
    "generate"), ...]``."""
    out: list[tuple[str, ...]] = []

    def walk(command: click.Command, path: tuple[str, ...]) -> None:
        out.append(path)
        if isinstance(command, click.Group):
            ctx = click.Context(command, info_name="ocihook")
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, (*path, name))

    walk(cli, ())
    return out


def help_text(path: Sequence[str]) -> str:
    """The ``--help`` output of ``ocihook PATH...`` as a user sees it, wrapped at 100
    columns: run in a fresh isolated interpreter, so the fast parsers answer for their
    commands exactly as on the command line.

    Raises:
        RuntimeError: the command exits non-zero or prints nothing.
    """
    env = {"COLUMNS": _COLUMNS, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    program = "from ocihook._main import run; run()"
    r = subprocess.run(
        [sys.executable, "-I", "-c", program, *path, "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError(f"ocihook {' '.join(path)} --help: exit {r.returncode}: {r.stderr}")
    # argparse names the program after argv[0] ("-c" here); the user types "ocihook"
    return r.stdout.replace("usage: -c ", "usage: ocihook ").rstrip() + "\n"


def render_cli_reference() -> str:
    """The Markdown of ``docs/reference/cli.md``: one section per command with its
    ``--help`` text."""
    parts = [
        "# Command-line reference",
        "",
        "Generated from the parsers by `ocihook.commands.docref`; do not edit by hand.",
        "`edit`, `hook` and `cdi generate` are parsed by ocihook's fast parser (no click on",
        "the container start path), every other command by click. The wrapper runtime,",
        "`ocihook-runtime`, takes runc's command line (see the wrapper guide).",
    ]
    for path in command_paths():
        title = " ".join(("ocihook", *path))
        parts += ["", f"## `{title}`", "", "```text", help_text(path).rstrip(), "```"]
    return "\n".join(parts) + "\n"


def _classes() -> Iterator[tuple[int, type[OcihookError]]]:
    for cls, code in sorted(EXIT_CODES.items(), key=lambda item: item[1]):
        yield code, cls


def _markdown(text: str) -> str:
    """A docstring as one Markdown paragraph: reST literals and roles become code spans."""
    text = " ".join(text.split())
    text = re.sub(r":(?:class|func|data|mod|attr):`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def render_exit_codes() -> str:
    """The Markdown of ``docs/reference/exit-codes.md``: every exit code with the error
    class that stands for it (its ``reference``, the word shown in ``error[...]``) and that
    class's docstring."""
    rows: list[tuple[int, str, str]] = [(code, "-", text) for code, text in OTHER_EXIT_CODES]
    for code, cls in _classes():
        doc = _markdown(inspect.getdoc(cls) or "")
        rows.append((code, f"`{cls.reference}` ({cls.__name__})", doc))
    rows.sort(key=lambda row: row[0])
    lines = [
        "# Exit codes",
        "",
        "Generated from `ocihook.core.errors.EXIT_CODES` and the error classes' docstrings by",
        "`ocihook.commands.docref`; do not edit by hand. An error is one line on stderr,",
        "`ocihook: error[<reference>]: <message> (file F, field X, value V); hint: ...`.",
        "",
        "| Code | Reference (class) | Meaning |",
        "|---|---|---|",
    ]
    for code, name, text in rows:
        cell = text.replace("|", "\\|")
        lines.append(f"| {code} | {name} | {cell} |")
    return "\n".join(lines) + "\n"


def public_names(package_dir: str, package: str) -> dict[str, str]:
    """The public names of a package and the module defining each: ``{name: module}``,
    read from the package's ``__init__.py`` source (its ``__all__`` and its ``_EXPORTS``
    table of lazily loaded names, ``{name: "sub.module"}``) without importing it. A name in
    ``__all__`` that ``_EXPORTS`` lacks is defined in the package itself.

    Raises:
        ValueError: the file has no literal ``__all__`` list.
    """
    with open(os.path.join(package_dir, "__init__.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names: list[str] | None = None
    exports: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id == "__all__":
                names = list(ast.literal_eval(node.value))
            elif isinstance(target, ast.Name) and target.id == "_EXPORTS":
                exports = dict(ast.literal_eval(node.value))
    if names is None:
        raise ValueError(f"{package_dir}/__init__.py: no literal __all__")
    return {n: f"{package}.{exports[n]}" if n in exports else package for n in names}


def render_api_reference() -> str:
    """The Markdown of ``docs/reference/api.md``: one mkdocstrings entry (``::: module.name``)
    per public name of ``ocihook`` and ``ocihook.cdi`` (their ``__all__``), pointing at the
    module that defines it, grouped by that module; the site renders each docstring."""
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parts = [
        "# Python API",
        "",
        "Generated by `ocihook.commands.docref` from `ocihook.__all__` and",
        "`ocihook.cdi.__all__`; each entry is the docstring of the definition. Import the",
        "names from `ocihook` and `ocihook.cdi` (they are loaded on first use); the defining",
        "module is shown for readers of the source.",
    ]
    for package, where in (("ocihook", top), ("ocihook.cdi", os.path.join(top, "cdi"))):
        by_module: dict[str, list[str]] = {}
        for name, module in sorted(public_names(where, package).items(), key=_lower):
            by_module.setdefault(module, []).append(name)
        parts += ["", f"## `{package}`"]
        for module in sorted(by_module):
            parts += ["", f"### `{module}`", ""]
            for name in by_module[module]:
                parts += [f"::: {module}.{name}", ""]
    return "\n".join(parts).rstrip() + "\n"


def _lower(item: tuple[str, str]) -> str:
    return item[0].lower()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ocihook.commands.docref [--check] DOCS_DIR``: write or check the
    generated pages. Returns 0, or 1 when ``--check`` found a page that differs."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    if len(args) != 1:
        print("usage: python -m ocihook.commands.docref [--check] DOCS_DIR", file=sys.stderr)
        return 2
    docs = args[0]
    status = 0
    for name, text in (
        (API_DOCUMENT, render_api_reference()),
        (CLI_DOCUMENT, render_cli_reference()),
        (EXIT_CODES_DOCUMENT, render_exit_codes()),
    ):
        path = os.path.join(docs, name)
        if check:
            try:
                with open(path, encoding="utf-8") as f:
                    same = f.read() == text
            except FileNotFoundError:
                same = False
            if not same:
                print(f"{path} differs from the code: regenerate it", file=sys.stderr)
                status = 1
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
