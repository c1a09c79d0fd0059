"""The fast commands' option parser (:func:`ocihook.commands.fastopts.parse_options`) reads
a command line as argparse reads it, or hands it to argparse: whatever it accepts, the
argparse parser built from the same table (:mod:`ocihook.commands.fast`) accepts with the
same values."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocihook.commands import cdihook, fast
from ocihook.commands.fastopts import parse_options

#: Words a command line is made of: each command's option names, and values that argparse
#: reads as an option (``-h``, ``-x``), as a value (``-``, negative numbers, a word with
#: a space) or as either (``--``).
VALUES = ["-h", "-x", "-", "-5", "-0.5", "-.5", "-5.", "- x", "-x y", "--", "a", "a=b", "", "/p"]
VALUES += ["--help", "--li", "--c=x", "-bx", "-b x", "--x y"]  # abbreviations, joined values


def _argparse(argv: list[str]) -> dict[str, Any] | None:
    parser, _ = fast._parsers()
    try:
        ns = parser.parse_args(argv)
    except SystemExit:
        return None
    return vars(ns)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    words, _help, options = draw(st.sampled_from(fast.COMMANDS))
    names = [n for o in options for n in o.names]
    token = st.sampled_from(names + VALUES)
    if names:
        token |= st.builds(lambda n, v: f"{n}={v}", st.sampled_from(names), st.sampled_from(VALUES))
    return [*words, *draw(st.lists(token, max_size=5))]


@settings(max_examples=400, deadline=None)
@given(command_lines())
def test_what_the_fast_parser_accepts_argparse_reads_alike(argv: list[str]) -> None:
    words = next(w for w, _h, _o in fast.COMMANDS if tuple(argv[: len(w)]) == w)
    options = next(o for w, _h, o in fast.COMMANDS if w == words)
    ns = parse_options(words, options, argv)
    if ns is None:
        return  # argparse parses it and prints its message
    want = _argparse(argv)
    assert want is not None, argv
    got = vars(ns)
    assert {k: got[k] for k in want} == want, argv


@pytest.mark.parametrize(
    "argv",
    [
        ["hook", "cdi", "--mask-proc", "-h"],  # argparse: expected one argument
        ["hook", "cdi", "--links", "-x"],
        ["hook", "create-container", "--lib", "-h"],
    ],
)
def test_an_option_where_a_value_goes_is_argparses(argv: list[str]) -> None:
    """A value that argparse reads as an option is not taken as the value: argparse
    reports the missing value (usage, exit 2)."""
    assert cdihook.parse_cdi_hook(argv) is None or argv[1] != "cdi"
    assert fast.parse_fast(argv) is None
    assert _argparse(argv) is None


@pytest.mark.parametrize("value", ["-", "-5", "-0.5", "-.5", "- x"])
def test_values_argparse_takes_are_taken(value: str) -> None:
    argv = ["hook", "cdi", "--mask-proc", value]
    ns = cdihook.parse_cdi_hook(argv)
    assert ns is not None and ns.mask_proc == value
    assert (_argparse(argv) or {}).get("mask_proc") == value


def test_the_parser_is_argparse() -> None:
    parser, commands = fast._parsers()
    assert isinstance(parser, argparse.ArgumentParser)
    assert ("hook", "cdi") in commands
