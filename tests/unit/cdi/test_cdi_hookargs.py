"""The compact arguments of ``ocihook hook cdi`` (:mod:`ocihook.cdi.hookargs`): packing
and expanding are inverse, groups keep first-appearance order, malformed values are
refused with the flag named, and the hook they drive leaves the rootfs exactly as the long
``hook create-container`` form does."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import make_bundle, run_cli

from ocihook.cdi.generate import generate_spec, transform_root
from ocihook.cdi.hookargs import expand_libs, expand_links, hook_data, pack_libs, pack_links
from ocihook.commands.fast import run_fast
from ocihook.core.errors import ApplyError, CdiError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover

#: File names: any character but "/" and NUL, never with "::" or a ":" at either end.
NAMES = st.text(
    st.characters(blacklist_characters="/\x00", blacklist_categories=("Cs",)), min_size=1
).filter(lambda n: "::" not in n and n[0] != ":" and n[-1] != ":" and n not in (".", ".."))
DIRS = st.lists(NAMES, min_size=0, max_size=3).map(lambda parts: "/" + "/".join(parts))
FLAGS = st.sampled_from(["0x0303", "0x0003", "0x0001", ""])
TARGETS = st.one_of(NAMES, st.tuples(DIRS, NAMES).map(lambda t: f"{t[0].rstrip('/')}/{t[1]}"))


def _path(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}"


@given(st.lists(st.tuples(DIRS, NAMES, TARGETS), max_size=12))
def test_links_round_trip_grouped_by_directory(entries: list[tuple[str, str, str]]) -> None:
    links = [f"{t}::{_path(d, n)}" for d, n, t in entries]
    packed = pack_links(links)
    assert len(packed) == len({d for d, _n, _t in entries})
    expanded = expand_links(packed)
    # the same entries; inside each directory in the order given, directories by first use
    assert sorted(expanded) == sorted(links)
    by_dir = [d for d, _n, _t in entries]
    order = list(dict.fromkeys(by_dir))
    assert expanded == [
        links[i] for i in sorted(range(len(links)), key=lambda i: order.index(by_dir[i]))
    ]


@given(st.lists(st.tuples(DIRS, NAMES, FLAGS), max_size=12))
def test_libs_round_trip_grouped_by_directory_and_flags(
    entries: list[tuple[str, str, str]],
) -> None:
    libs = [_path(d, n) + (f"::{f}" if f else "") for d, n, f in entries]
    packed = pack_libs(libs)
    assert len(packed) == len({(d, f) for d, _n, f in entries})
    expanded = expand_libs(packed)
    assert sorted(expanded) == sorted(libs)
    # the directories come in the order they were first named
    dirs = [p.rsplit("/", 1)[0] for p in (v.partition("::")[0] for v in expanded)]
    assert list(dict.fromkeys(dirs)) == list(dict.fromkeys(d.rstrip("/") for d, _n, _f in entries))


def test_the_root_directory_is_written_as_slash() -> None:
    assert pack_links(["a::/b"]) == ["/::b/a"] and expand_links(["/::b/a"]) == ["a::/b"]
    assert pack_libs(["/libx.so::0x0303"]) == ["/::0x0303::libx.so"]
    assert expand_libs(["/::0x0303::libx.so"]) == ["/libx.so::0x0303"]


@pytest.mark.parametrize(
    ("links", "libs"),
    [
        (["a::/usr/lib/x:"], []),
        (["a::/usr/b:/x"], []),
        ([":a::/usr/lib/x"], []),
        (["a::relative/x"], []),
        ([], ["relative.so::0x0303"]),
        ([], ["/usr/lib/x.so:::0x0303"]),
    ],
)
def test_what_the_arguments_cannot_carry_is_refused(links: list[str], libs: list[str]) -> None:
    with pytest.raises(CdiError) as info:
        pack_links(links)
        pack_libs(libs)
    assert info.value.value == (links or libs)[0]


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--links", "relative::a/b"),
        ("--links", "/usr/lib"),
        ("--links", "/usr/lib::noslash"),
        ("--links", "/usr/lib::/target"),
        ("--links", "/usr/lib::name/"),
        ("--libs", "/usr/lib::0x0303"),
        ("--libs", "/usr/lib::0x0303::a/b"),
        ("--libs", "lib::0x0303::a"),
    ],
)
def test_malformed_values_name_the_flag(flag: str, value: str) -> None:
    with pytest.raises(ApplyError) as info:
        (expand_links if flag == "--links" else expand_libs)([value])
    assert (info.value.field, info.value.value) == (flag, value)


def _state(bundle: Path) -> bytes:
    doc = {"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 2147483647}
    return json.dumps({**doc, "bundle": str(bundle), "annotations": {}}).encode()


def _tree(root: Path) -> dict[str, Any]:
    """Every entry under ``root``: a link's target, a file's bytes, ``"dir"``."""
    out: dict[str, Any] = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(d, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = p.read_bytes()
    return out


def test_the_compact_hook_edits_the_rootfs_as_the_long_form_does(sim: Any, tmp_path: Path) -> None:
    """The generated spec's hook, run as written (``hook cdi``), and the same links and
    libraries given one by one to ``hook create-container`` in the interleaved order the
    long form had (by file name, across directories): the same links, ``ld.so.cache``
    and ``ld.so.conf.d`` drop-in."""
    spec = generate_spec(discover(HostRoot.single(sim.root)))
    (hook,) = spec.container_edits.hooks
    args = list(hook.args[hook.args.index("hook") :])
    data = hook_data(args)
    assert data is not None
    _version, links, libs = data
    long = ["hook", "create-container"]
    for link in sorted(links, key=lambda v: v.rsplit("/", 1)[1]):
        long += ["--link", link]
    for lib in sorted(libs, key=lambda v: v.rsplit("/", 1)[1]):
        long += ["--lib", lib]
    tail = args[args.index("--ld-so-conf") :]
    mask = tail.index("--mask-proc")
    tail[mask : mask + 2] = []  # the mask mounts over /proc: not in an unprivileged tree
    trees = []
    for name, argv in (
        ("compact", args[: args.index("--ld-so-conf")] + tail),
        ("long", long + tail),
    ):
        bundle = make_bundle(tmp_path, name=name)
        (bundle / "rootfs/etc").mkdir()
        (bundle / "rootfs/etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
        # as installed hooks run: ocihook's main, which takes hook cdi to its own module
        # (ocihook.commands.cdihook) and hook create-container to the fast commands
        r = run_cli(*argv, stdin=_state(bundle), env={"PATH": "/usr/bin:/bin"})
        assert (r.returncode, r.stderr) == (0, "")
        trees.append(_tree(bundle / "rootfs"))
    assert trees[0] == trees[1]
    assert any(v == ("link", "libcuda.so.1") for v in trees[0].values())
    assert b"libcuda.so.1" in trees[0]["etc/ld.so.cache"]


@pytest.mark.parametrize(
    ("stdin", "extra", "code", "message"),
    [
        ("{", [], 4, "ocihook: error[bad-state]: "),  # not JSON
        (None, ["--ocihook-version", "1"], 2, "ocihook: error[usage]: hook cdi has nothing"),
        (None, ["--no-such-flag"], 2, "usage: ocihook hook cdi "),  # argparse's message
        (None, ["--links", "/x::a"], 7, "ocihook: error[apply-failed]: --links must be"),
    ],
)
def test_hook_cdi_errors_as_the_fast_commands_report_them(
    tmp_path: Path, stdin: str | None, extra: list[str], code: int, message: str
) -> None:
    """Through ocihook's main (its own module) and through the fast commands' runner, one
    bad input gives one exit code and one first line."""
    bundle = make_bundle(tmp_path)
    given = _state(bundle) if stdin is None else stdin.encode()
    argv = ["hook", "cdi", *extra]
    r = run_cli(*argv, stdin=given, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == code, r.stderr
    assert r.stderr.startswith(message), r.stderr
    if code != 2 or "usage:" not in message:  # argparse exits: only run_cli catches it
        assert run_fast(argv, stdin=given) == code


def test_transform_root_moves_the_compact_container_paths(sim: Any) -> None:
    spec = generate_spec(discover(HostRoot.single(sim.root)))
    moved = transform_root(spec, "/usr/lib", "/opt/nv", relative_to="container")
    before = hook_data(spec.container_edits.hooks[0].args)
    after = hook_data(moved.container_edits.hooks[0].args)
    assert before is not None and after is not None
    assert after[2] == [v.replace("/usr/lib/", "/opt/nv/", 1) for v in before[2]]
    assert [v.split("::")[1] for v in after[1]] == [
        v.split("::")[1].replace("/usr/lib/", "/opt/nv/", 1) for v in before[1]
    ]
    back = transform_root(moved, "/opt/nv", "/usr/lib", relative_to="container")
    assert back.container_edits.hooks == spec.container_edits.hooks


def test_hook_data_reads_both_forms_and_ignores_other_hooks() -> None:
    long = ["/x/ocihook", "hook", "create-container", "--link", "a::/l/b", "--lib", "/l/a::0x0303"]
    assert hook_data(long) == (None, ["a::/l/b"], ["/l/a::0x0303"])
    compact = ["/x/ocihook", "hook", "cdi", "--ocihook-version", "9.9", "--links", "/l::b/a"]
    assert hook_data([*compact, "--libs", "/l::0x0303::a"]) == (
        "9.9",
        ["a::/l/b"],
        ["/l/a::0x0303"],
    )
    assert hook_data(["/usr/bin/nvidia-cdi-hook", "create-symlinks", "--link", "a::/b"]) is None
