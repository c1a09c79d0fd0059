"""The options of the fast commands (:mod:`ocihook.commands.fast`) and their parser without
argparse: :class:`Option` declares one, :func:`parse_options` parses a well-formed command
line with str methods alone (argparse's import costs about 5 ms, a quarter of a hook's
start), and :class:`Namespace` holds the result.

This module is on the start path of every hook.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

__all__ = ["Namespace", "Option", "parse_options"]


class Option:
    """One option of a fast command: ``names`` (``"-b"``, ``"--bundle"``), ``action``
    (``"store"``, ``"store_true"`` or ``"append"``), ``default``, ``help``, ``metavar``,
    ``choices`` (the values allowed, or ``None`` for any), ``dest`` (the attribute;
    default: the last name's)."""

    __slots__ = ("action", "choices", "default", "dest", "help", "metavar", "names")

    def __init__(
        self,
        *names: str,
        action: str = "store",
        default: object = None,
        help: str = "",
        metavar: str | None = None,
        choices: tuple[str, ...] | None = None,
        dest: str | None = None,
    ) -> None:
        self.names = names
        self.choices = choices
        self.dest = dest or names[-1].lstrip("-").replace("-", "_")
        self.action = action
        self.default = (
            []
            if action == "append"
            else (False if default is None and action == "store_true" else default)
        )
        self.help = help
        self.metavar = metavar


class Namespace:
    """Parsed options (like :class:`argparse.Namespace`)."""

    def __init__(self, **values: object) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:  # for type checkers: options are dynamic
        raise AttributeError(name)


def _option_like(arg: str, names: Sequence[str]) -> bool:
    """Whether argparse reads ``arg`` as an option rather than as the value of the option
    before it (``ArgumentParser._parse_optional``, with abbreviations allowed), given the
    command's option ``names``: it starts with ``-``, is not ``-`` alone, and names an
    option (exactly, abbreviated, with ``=VALUE``, or a short one with its value joined),
    or is neither a negative number (``-5``, ``-.5``) nor a word holding a space."""
    if not arg.startswith("-") or arg == "-":
        return False
    head = arg.partition("=")[0]
    if arg.startswith("--"):
        if any(n.startswith(head) for n in names):
            return True
    elif head in names or any(n == arg[:2] or n.startswith(arg) for n in names):
        return True
    lead, dot, tail = arg[1:].partition(".")
    number = tail.isdecimal() and (not lead or lead.isdecimal()) if dot else lead.isdecimal()
    return not number and " " not in arg


def parse_options(
    words: tuple[str, ...], options: Sequence[Option], argv: Sequence[str]
) -> Namespace | None:
    """Parse ``argv``, a command line that starts with the command ``words`` (``("hook",
    "cdi")``) followed by ``options``, into a :class:`Namespace`: each option's ``dest``
    (its default when absent, a list for ``append``), ``command`` (the first word) and
    ``stage`` (the second, or ``None``).

    Returns ``None`` for anything unusual — help, another command, an unknown option, a
    missing value, a value outside ``choices`` — so that argparse parses it and prints its
    usual message.
    """
    if tuple(argv[: len(words)]) != words:
        return None
    by_name = {name: opt for opt in options for name in opt.names}
    names = [*by_name, "-h", "--help"]
    values: dict[str, Any] = {}
    for o in options:
        values[o.dest] = [] if o.action == "append" else o.default
    values["command"] = words[0]
    values["stage"] = words[1] if len(words) > 1 else None
    rest = list(argv[len(words) :])
    while rest:
        arg = rest.pop(0)
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        opt = by_name.get(name)
        if opt is None:
            return None
        if opt.action == "store_true":
            if eq:
                return None
            values[opt.dest] = True
            continue
        if eq:
            value = inline
        elif rest and not _option_like(rest[0], names):
            value = rest.pop(0)
        else:
            return None  # argparse says what is missing
        if value == "--":
            return None  # argparse drops it (--opt=--): its reading, whatever it is
        if opt.choices is not None and value not in opt.choices:
            return None  # argparse names the option and its choices
        if opt.action == "append":
            values[opt.dest].append(value)
        else:
            values[opt.dest] = value
    return Namespace(**values)
