"""``ocihook runtime configure`` twice is ``configure`` once, byte for byte, for every
engine file layout: the second run reports the file unchanged. containerd's CRI table
without a ``containerd`` sub-table (indented as ``containerd config default`` writes, or
empty) was re-indented on every run (tomlkit does not give back the bytes it read for a
table whose parents are implied under an indented header)."""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import run_cli

from ocihook.core.errors import EngineConfigError
from ocihook.engines import (
    CONTAINERD_PLUGINS,
    configure_containerd,
    configure_crio,
    configure_docker,
)

WRAPPER = "/opt/ocihook/bin/ocihook-runtime"
V2 = CONTAINERD_PLUGINS[2]
V3 = CONTAINERD_PLUGINS[3]

#: containerd files whose CRI table has no ``containerd`` sub-table (and simpler ones).
LAYOUTS = {
    "v2-empty-cri": f'version = 2\n[plugins."{V2}"]\n',
    "v3-empty-cri": f'version = 3\n[plugins."{V3}"]\n',
    "v2-indented-cri": f'version = 2\n[plugins]\n  [plugins."{V2}"]\n    sandbox_image = "x"\n',
    "v2-indented-empty-cri": f'version = 2\n[plugins]\n  [plugins."{V2}"]\n',
    "v2-default-like": (
        f'version = 2\n\n[plugins]\n\n  [plugins."{V2}"]\n    sandbox_image = "x"\n\n'
        f'    [plugins."{V2}".cni]\n      bin_dir = "/opt/cni/bin"\n'
    ),
    "v3-default-like": (
        f'version = 3\n\n[plugins]\n\n  [plugins."{V3}"]\n    enable_selinux = false\n\n'
        f'    [plugins."{V3}".cni]\n      bin_dir = "/opt/cni/bin"\n'
    ),
    "v2-only": "version = 2\n",
    "empty": "",
}
#: Layouts ocihook refuses (exit 13, the file untouched): tables on its path written with
#: dotted keys or inline.
REFUSED = {
    "v2-dotted-containerd-key": f'version = 2\n[plugins."{V2}"]\ncontainerd.snapshotter = "o"\n',
    "v2-inline-plugins": "version = 2\nplugins = {}\n",
}


def runtimes(text: str, version: int) -> dict[str, object]:
    cri = tomllib.loads(text)["plugins"][CONTAINERD_PLUGINS[version]]
    out: dict[str, object] = cri["containerd"]["runtimes"]
    return out


@pytest.mark.parametrize("cdi", [False, True])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_containerd_configure_twice_is_once(layout: str, cdi: bool) -> None:
    before = LAYOUTS[layout].encode()
    kwargs = {"path": "c", "runtime_path": WRAPPER, "cdi": cdi, "set_as_default": cdi}
    once, notes = configure_containerd(before, **kwargs)  # type: ignore[arg-type]
    assert once != before and notes
    version = 3 if layout.startswith("v3") else 2
    ours = runtimes(once.decode(), version)["ocihook"]
    assert ours == {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": WRAPPER}}
    twice, again = configure_containerd(once, **kwargs)  # type: ignore[arg-type]
    assert twice == once, twice.decode()
    assert again == ()


@pytest.mark.parametrize("layout", ["v2-default-like", "v3-default-like", "v2-indented-cri"])
def test_containerd_tables_added_under_an_indented_table_are_flat(layout: str) -> None:
    """Without a runc table to look like, the tables ocihook adds are written flat: not
    a header indented by tomlkit over keys at the margin."""
    once, _ = configure_containerd(LAYOUTS[layout].encode(), path="c", runtime_path=WRAPPER)
    plugin = V3 if layout.startswith("v3") else V2
    for name in ("runc", "ocihook"):
        header = f'\n[plugins."{plugin}".containerd.runtimes.{name}]\nruntime_type = '
        assert header in once.decode(), once.decode()


@pytest.mark.parametrize("layout", sorted(REFUSED))
def test_containerd_refused_layouts_stay_refused(layout: str) -> None:
    with pytest.raises(EngineConfigError):
        configure_containerd(REFUSED[layout].encode(), path="c", runtime_path=WRAPPER)


def test_containerd_cli_second_run_is_unchanged(tmp_path: Path) -> None:
    """The reported case: each run said ``updated`` and indented the table deeper."""
    path = tmp_path / "config.toml"
    path.write_text(LAYOUTS["v2-default-like"])
    args = ("runtime", "configure", "--runtime", "containerd", "--config", str(path))
    proc = run_cli(*args, "--runtime-path", WRAPPER)
    assert proc.returncode == 0 and "updated" in proc.stderr, proc.stderr
    once = path.read_bytes()
    for _ in range(2):
        proc = run_cli(*args, "--runtime-path", WRAPPER)
        assert proc.returncode == 0 and "already configured" in proc.stderr, proc.stderr
        assert path.read_bytes() == once


# --- property: generated containerd files ------------------------------------------------

#: Where containerd of each config version reads the CRI runtimes (containerd
#: ``docs/cri/config.md``: 1.x ``plugins."io.containerd.grpc.v1.cri".containerd.runtimes``,
#: 2.x ``plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes``); version 1 (no
#: ``version`` key) files are converted to version 2 when they hold no plugins.
RUNTIMES_AT = {
    2: ("plugins", V2, "containerd", "runtimes"),
    3: ("plugins", V3, "containerd", "runtimes"),
}


@st.composite
def containerd_files(draw: st.DrawFn) -> tuple[int, str]:
    """A containerd ``config.toml`` written with ``[table]`` headers (the layouts ocihook
    edits): version 1, 2 or 3; with or without the CRI table, its ``containerd``
    sub-table, runtimes (runc, another, an ``ocihook`` entry); comments; flat or indented
    as ``containerd config default`` writes; the plugin name double- or single-quoted."""
    version = draw(st.sampled_from([1, 2, 3]))
    unit = draw(st.sampled_from(["", "  ", "    "]))
    comment = draw(st.booleans())
    quote = draw(st.sampled_from(['"', "'"]))
    plugin = CONTAINERD_PLUGINS.get(version, "cri")
    cri = f"plugins.{quote}{plugin}{quote}"
    lines: list[str] = []
    if version != 1:
        lines.append(f"version = {version}")
    if comment:
        lines.append("# managed by hand")
    if draw(st.booleans()):
        lines.append("oom_score = -999")
    if draw(st.booleans()):
        lines += ["", "[grpc]", f'{unit}address = "/run/containerd/containerd.sock"']

    def table(depth: int, header: str, body: dict[str, str]) -> None:
        lines.append("")
        if comment and draw(st.booleans()):
            lines.append(unit * depth + f"# {header}")
        lines.append(unit * depth + f"[{header}]")
        lines.extend(unit * (depth + 1) + f"{k} = {v}" for k, v in body.items())

    with_plugins = version != 1 or draw(st.integers(0, 9)) == 0  # v1 with plugins: refused
    if with_plugins and draw(st.booleans()):
        if draw(st.booleans()):
            table(0, "plugins", {})
        cri_keys = draw(
            st.dictionaries(
                st.sampled_from(["sandbox_image", "enable_selinux", "enable_cdi"]),
                st.sampled_from(['"x"', "false", "true"]),
                max_size=2,
            )
        )
        if draw(st.booleans()) or cri_keys:
            table(1, cri, cri_keys)
        if draw(st.booleans()):
            table(2, f"{cri}.cni", {"bin_dir": '"/opt/cni/bin"'})
        if draw(st.booleans()):
            body = draw(
                st.dictionaries(
                    st.sampled_from(["snapshotter", "default_runtime_name"]),
                    st.sampled_from(['"overlayfs"', '"runc"']),
                    max_size=2,
                )
            )
            table(2, f"{cri}.containerd", body)
        names = draw(st.lists(st.sampled_from(["runc", "kata", "ocihook"]), unique=True))
        for name in names:
            table(
                4, f"{cri}.containerd.runtimes.{name}", {"runtime_type": '"io.containerd.runc.v2"'}
            )
            options = {"runc": {"SystemdCgroup": "true"}, "ocihook": {"BinaryName": '"/old"'}}
            if name in options and draw(st.booleans()):
                table(5, f"{cri}.containerd.runtimes.{name}.options", options[name])
    return version, "\n".join(lines) + ("\n" if lines else "")


def undo(doc: dict[str, Any], old: dict[str, Any], version: int) -> dict[str, Any]:
    """``doc`` (a configured file, parsed) with what ``configure`` writes set back as it is
    in ``old`` (the file before): the ``ocihook`` entry, a ``runc`` entry it added,
    ``default_runtime_name``, ``enable_cdi``, ``cdi_spec_dirs``, the version it added, and
    the tables it made that are left empty."""
    doc = copy.deepcopy(doc)
    plugin = CONTAINERD_PLUGINS[version]
    for keys in (
        (*RUNTIMES_AT[version], "ocihook"),
        (*RUNTIMES_AT[version], "runc"),
        ("plugins", plugin, "containerd", "default_runtime_name"),
        ("plugins", plugin, "enable_cdi"),
        ("plugins", plugin, "cdi_spec_dirs"),
        ("version",),
    ):
        was = value_at(old, keys)
        chain = [doc]
        for key in keys[:-1]:
            chain.append(chain[-1].setdefault(key, {}))
        if was is None:
            chain[-1].pop(keys[-1], None)
        else:
            chain[-1][keys[-1]] = was
        for parent, key in zip(reversed(chain[:-1]), reversed(keys[:-1]), strict=True):
            if parent[key] == {} and value_at(old, (*keys[: keys.index(key)], key)) is None:
                del parent[key]
    return doc


def value_at(doc: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None  # type: ignore[assignment]
    return doc


@settings(max_examples=400, deadline=None)
@given(file=containerd_files(), set_default=st.booleans(), cdi=st.booleans())
def test_containerd_configure_property(file: tuple[int, str], set_default: bool, cdi: bool) -> None:
    """Any generated containerd file: configured once, the runtime is where containerd of
    that version reads it; configured again, the bytes are the same and nothing is
    reported; undoing what configure writes gives back the file's meaning."""
    version, text = file
    kwargs = {"path": "c", "runtime_path": WRAPPER, "set_as_default": set_default, "cdi": cdi}
    old = tomllib.loads(text)
    if version == 1 and "plugins" in old:
        with pytest.raises(EngineConfigError) as e:
            configure_containerd(text.encode(), **kwargs)  # type: ignore[arg-type]
        assert e.value.field == "version"
        return
    once, notes = configure_containerd(text.encode(), **kwargs)  # type: ignore[arg-type]
    new = tomllib.loads(once.decode())
    read_as = 2 if version == 1 else version
    assert new["version"] == read_as
    entry = value_at(new, (*RUNTIMES_AT[read_as], "ocihook"))
    assert entry["options"]["BinaryName"] == WRAPPER
    assert entry["runtime_type"] == "io.containerd.runc.v2"
    # a runc entry is added with a new ocihook entry (the file's runtimes replace the
    # built-in ones); an ocihook entry already there is only updated
    had_ours = value_at(old, (*RUNTIMES_AT[read_as], "ocihook")) is not None
    assert had_ours or "runc" in value_at(new, RUNTIMES_AT[read_as])
    cri = new["plugins"][CONTAINERD_PLUGINS[read_as]]
    assert not set_default or cri["containerd"]["default_runtime_name"] == "ocihook"
    assert not cdi or cri["enable_cdi"] is True
    assert (once != text.encode()) == bool(notes)
    twice, again = configure_containerd(once, **kwargs)  # type: ignore[arg-type]
    assert twice == once
    assert again == ()
    assert undo(new, old, read_as) == old


# --- the same property for CRI-O drop-ins and docker's daemon.json -----------------------


@st.composite
def crio_files(draw: st.DrawFn) -> str:
    """A CRI-O drop-in written with ``[table]`` headers: empty, ``[crio]`` alone, or
    ``[crio.runtime]`` with keys and runtimes (crun, ``ocihook`` with another path),
    comments, flat or indented."""
    unit = draw(st.sampled_from(["", "  "]))
    comment = draw(st.booleans())
    lines = ["# a drop-in"] if comment else []
    if draw(st.booleans()):
        lines += ["[crio]", f'{unit}log_dir = "/var/log/crio"']
    elif draw(st.booleans()):
        lines.append("[crio]")
    if draw(st.booleans()):
        lines.append(f"{unit}[crio.runtime]")
        keys = draw(
            st.dictionaries(
                st.sampled_from(["default_runtime", "cdi_spec_dirs", "conmon"]),
                st.sampled_from(['"crun"', '["/etc/cdi"]', '"/usr/bin/conmon"']),
                max_size=2,
            )
        )
        lines += [f"{unit * 2}{k} = {v}" for k, v in keys.items()]
    for name in draw(st.lists(st.sampled_from(["crun", "ocihook"]), unique=True)):
        if comment:
            lines.append(f"{unit * 2}# {name}")
        lines.append(f"{unit * 2}[crio.runtime.runtimes.{name}]")
        lines.append(f'{unit * 3}runtime_path = "/usr/bin/{name}-old"')
    return "\n".join(lines) + ("\n" if lines else "")


@pytest.mark.parametrize(
    "text",
    [
        "[crio]\n",
        '[crio]\n  log_dir = "x"\n  [crio.runtime.runtimes.crun]\n    runtime_path = "/c"\n',
    ],
)
def test_crio_configure_twice_is_once(text: str) -> None:
    """``[crio]`` alone was refused; an indented runtime table under ``[crio]`` was
    re-indented on every run."""
    once, _notes = configure_crio(text.encode(), path="d", runtime_path=WRAPPER)
    assert tomllib.loads(once.decode())["crio"]["runtime"]["runtimes"]["ocihook"]
    assert configure_crio(once, path="d", runtime_path=WRAPPER) == (once, ())


@settings(max_examples=300, deadline=None)
@given(text=crio_files(), set_default=st.booleans(), cdi=st.booleans())
def test_crio_configure_property(text: str, set_default: bool, cdi: bool) -> None:
    """CRI-O drop-ins: configured twice is configured once (bytes, nothing reported);
    undoing the edit gives back the drop-in's meaning."""
    kwargs = {"path": "d", "runtime_path": WRAPPER, "set_as_default": set_default, "cdi": cdi}
    once, notes = configure_crio(text.encode(), **kwargs)  # type: ignore[arg-type]
    assert notes
    new = tomllib.loads(once.decode())
    runtime = new["crio"]["runtime"]
    assert runtime["runtimes"]["ocihook"]["runtime_path"] == WRAPPER
    assert not set_default or runtime["default_runtime"] == "ocihook"
    assert not cdi or "cdi_spec_dirs" in runtime
    twice, again = configure_crio(once, **kwargs)  # type: ignore[arg-type]
    assert twice == once
    assert again == ()
    old = tomllib.loads(text)
    undone = copy.deepcopy(new)
    for key, path in (
        ("ocihook", ("runtimes",)),
        ("default_runtime", ()),
        ("cdi_spec_dirs", ()),
    ):
        where = undone["crio"]["runtime"]
        for k in path:
            where = where[k]
        was = value_at(old, ("crio", "runtime", *path, key))
        if was is None:
            where.pop(key, None)
        else:
            where[key] = was
    for keys in (("crio", "runtime", "runtimes"), ("crio", "runtime"), ("crio",)):
        if value_at(undone, keys) == {} and value_at(old, keys) is None:
            parent = value_at(undone, keys[:-1]) if keys[:-1] else undone
            del parent[keys[-1]]
    assert undone == old


@settings(max_examples=200, deadline=None)
@given(
    doc=st.fixed_dictionaries(
        {},
        optional={
            "runtimes": st.dictionaries(
                st.sampled_from(["runc", "ocihook"]),
                st.fixed_dictionaries({"path": st.sampled_from(["/old", WRAPPER])}),
            ),
            "default-runtime": st.sampled_from(["runc", "ocihook"]),
            "features": st.fixed_dictionaries({}, optional={"cdi": st.booleans()}),
            "log-driver": st.just("json-file"),
        },
    ),
    indent=st.sampled_from([None, 2, 4]),
    set_default=st.booleans(),
    cdi=st.booleans(),
)
def test_docker_configure_property(
    doc: dict[str, Any], indent: int | None, set_default: bool, cdi: bool
) -> None:
    """daemon.json in any layout: configured twice is configured once (bytes, nothing
    reported the second time)."""
    kwargs = {"path": "d", "runtime_path": WRAPPER, "set_as_default": set_default, "cdi": cdi}
    once, _notes = configure_docker(json.dumps(doc, indent=indent).encode(), **kwargs)  # type: ignore[arg-type]
    assert json.loads(once)["runtimes"]["ocihook"]["path"] == WRAPPER
    twice, again = configure_docker(once, **kwargs)  # type: ignore[arg-type]
    assert twice == once
    assert again == ()
