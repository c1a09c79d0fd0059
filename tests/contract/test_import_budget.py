"""The import budget of the start path: each entry point of
:data:`ocihook.core.startpath.ENTRY_POINTS` is run in a fresh interpreter, and the modules
it has loaded are checked against its row of the table.

The interpreter is ``python -I -S`` with the repository first on ``sys.path``: without
``site`` nothing is loaded but what the entry point imports (an editable install's import
finder loads ``re``, ``enum`` and ``fnmatch`` at start, which would hide them). The modules
loaded by the bare interpreter are not the entry point's.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest
from support import REPO, host_cdi_spec

from ocihook.core.startpath import ENTRY_POINTS, HEAVY, START_PATH_MODULES, EntryPoint
from ocihook.sim import host as simhost
from ocihook.sim import vendors
from ocihook.sim.demo import make_busybox_bundle

#: A CUDA image's request: every GPU, every capability, and the CUDA version it needs.
GPU_ENV = [
    "NVIDIA_VISIBLE_DEVICES=all",
    "NVIDIA_DRIVER_CAPABILITIES=all",
    "NVIDIA_REQUIRE_CUDA=cuda>=11.0 brand=tesla,driver>=470,driver<471",
]

#: Appended to each entry point's code: the loaded modules written to ``OUT``.
_REPORT = "\nwith open(OUT, 'w') as f:\n    f.write('\\n'.join(sys.modules))\n"
#: The wrapper's code: ``os.execve`` (of the real runtime) replaced by the report.
_EXEC_REPORT = (
    "import os\n"
    "def _execve(path, argv, env):\n" + _REPORT.replace("\n", "\n    ") + "\n    os._exit(0)\n"
    "os.execve = _execve\n"
)


def loaded_modules(code: str, out: Path, stdin: str = "") -> set[str]:
    """The modules ``python -I -S`` has loaded after running ``code`` (which reports them
    itself, or leaves it to the report appended here), the interpreter's own excepted.

    Raises:
        AssertionError: nothing was reported (the output is in the message).
    """
    prelude = (
        "import sys\n"
        f"sys.path[:0] = [{str(REPO)!r}]\n"
        f"sys.path.append({sysconfig.get_paths()['purelib']!r})\n"
        f"OUT = {str(out)!r}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", prelude + code + _REPORT],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.exists(), (proc.returncode, proc.stdout, proc.stderr)
    return set(out.read_text().split("\n")) - {"__main__"} - _bare(out.parent)


def _bare(tmp: Path) -> frozenset[str]:
    if not _BARE:
        (tmp / "bare").mkdir(exist_ok=True)
        out = tmp / "bare" / "modules"
        subprocess.run(
            [sys.executable, "-I", "-S", "-c", f"OUT = {str(out)!r}\nimport sys" + _REPORT],
            check=True,
        )
        _BARE.update(out.read_text().split("\n"))
    return frozenset(_BARE)


_BARE: set[str] = set()


def _state(bundle: str) -> str:
    """The state JSON a runtime gives a hook for the container of ``bundle`` (a pid that
    is no process)."""
    doc = {"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 2147483647}
    return json.dumps({**doc, "bundle": bundle, "annotations": {}})


class Scenario:
    """How to run one entry point: ``setup(tmp, sim) -> (code, stdin)``; ``rc``, the exit
    code it ends with (``None``: not checked); ``done(tmp)``, whether it did its work."""

    def __init__(
        self,
        setup: Callable[[Path, simhost.SimulatedHost], tuple[str, str]],
        rc: int | None = 0,
        done: Callable[[Path], bool] | None = None,
    ) -> None:
        self.setup = setup
        self.rc = rc
        self.done = done


def _bundle(tmp: Path, env: list[str]) -> str:
    return make_busybox_bundle(str(tmp / "bundle"), ["true"], env)


def _main(argv: list[str], entry: str = "main") -> str:
    return f"from ocihook._main import {entry}\nRC = {entry}({argv!r})\n"


def _hook_void(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
    return _main(["hook", "prestart"]), _state(_bundle(tmp, ["PATH=/bin"]))


def _docker_hook_void(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
    return _main(["prestart"], "nvidia_hook_main"), _state(_bundle(tmp, ["PATH=/bin"]))


def _hook_gpu(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
    argv = ["hook", "createRuntime", "--driver-root", sim.root, "--dev-root", sim.root]
    return _main(argv), _state(_bundle(tmp, GPU_ENV))


def _hook_create_container(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
    bundle = _bundle(tmp, [])
    lib = Path(bundle, "rootfs/usr/lib/libcuda.so.1")
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    argv = ["hook", "create-container", "--link", "libcuda.so.1::/usr/lib/libcuda.so"]
    argv += ["--lib", "/usr/lib/libcuda.so.1::0x0303"]
    return _main(argv), _state(bundle)


def _hook_cdi(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
    bundle = _bundle(tmp, [])
    lib = Path(bundle, "rootfs/usr/lib/libcuda.so.1")
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    argv = [
        "hook",
        "cdi",
        "--ocihook-version",
        "0.1.0",
        "--links",
        "/usr/lib::libcuda.so/libcuda.so.1",
    ]
    argv += ["--libs", "/usr/lib::0x0303::libcuda.so.1"]
    return _main(argv), _state(bundle)


def _hook_linked(tmp: Path) -> bool:
    """The hook made the link it was given."""
    return os.readlink(tmp / "bundle/rootfs/usr/lib/libcuda.so") == "libcuda.so.1"


def _hook_poststop(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
    return _main(["hook", "poststop"]), _state(_bundle(tmp, GPU_ENV))


def _edit_void(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
    return _main(["edit", "-b", _bundle(tmp, ["PATH=/bin"])]), ""


def _edit_gpu(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
    argv = ["edit", "-b", _bundle(tmp, GPU_ENV), "--driver-root", sim.root]
    return _main([*argv, "--dev-root", sim.root]), ""


def _linked(tmp: Path) -> bool:
    """The GPU container's rootfs was edited (the driver's libcuda linked in it)."""
    return os.path.islink(tmp / "bundle/rootfs/usr/lib64/libcuda.so.1")


def _cdi_generate(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
    argv = ["cdi", "generate", "--driver-root", sim.root, "--dev-root", sim.root]
    return _main([*argv, "--output", str(tmp / "nvidia.json")]), ""


def _generated(tmp: Path) -> bool:
    return bool(json.loads((tmp / "nvidia.json").read_text())["kind"] == "nvidia.com/gpu")


def _runtime(environ: dict[str, str], bundle: str) -> str:
    return (
        _EXEC_REPORT + "from ocihook.runtime import main\n"
        f"RC = main(['create', '-b', {bundle!r}, 'x'], environ={environ!r})\n"
    )


def _runtime_void(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
    environ = {"PATH": "/usr/sbin:/usr/bin"}
    return _runtime(environ, _bundle(tmp, ["PATH=/bin"])), ""


def _runtime_gpu(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
    conf = tmp / "ocihook.toml"
    conf.write_text(f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n')
    environ = {"PATH": "/usr/sbin:/usr/bin", "OCIHOOK_CONFIG": str(conf)}
    return _runtime(environ, _bundle(tmp, GPU_ENV)), ""


def _runtime_cdi(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
    specs = tmp / "cdi"
    specs.mkdir()
    (specs / "nvidia.json").write_text(json.dumps(host_cdi_spec(tmp / "host")))
    conf = tmp / "ocihook.toml"
    conf.write_text(f'cdi-spec-dirs = ["{specs}"]\n')
    bundle = _bundle(tmp, ["PATH=/bin"])
    config = json.loads(Path(bundle, "config.json").read_text())
    config["annotations"] = {"cdi.k8s.io/ocihook": "nvidia.com/gpu=0"}
    Path(bundle, "config.json").write_text(json.dumps(config))
    environ = {"PATH": "/usr/sbin:/usr/bin", "OCIHOOK_CONFIG": str(conf)}
    return _runtime(environ, bundle), ""


def _cdi_injected(tmp: Path) -> bool:
    """The CDI device's nodes are in the container's config.json."""
    config = json.loads((tmp / "bundle/config.json").read_text())
    return "/dev/nvidia0" in [d["path"] for d in config["linux"]["devices"]]


def _vendor_edit(vendor: str) -> Callable[[Path, simhost.SimulatedHost], tuple[str, str]]:
    """``ocihook edit`` of a bundle asking for every GPU of ``vendor`` (amd, intel) on
    that vendor's simulated host."""

    def setup(tmp: Path, sim: simhost.SimulatedHost) -> tuple[str, str]:
        dest = str(tmp / "host")
        host = vendors.build_amd(dest) if vendor == "amd" else vendors.build_intel(dest)
        bundle = _bundle(tmp, [f"{vendor.upper()}_VISIBLE_DEVICES=all"])
        argv = ["edit", "-b", bundle, "--driver-root", host.root, "--dev-root", host.root]
        return _main(argv), ""

    return setup


def _edited(tmp: Path) -> bool:
    """The bundle's config.json gives the container device nodes."""
    config = json.loads((tmp / "bundle/config.json").read_text())
    return bool(config["linux"]["devices"])


#: Entry point name (:data:`ENTRY_POINTS`) -> how the test runs it.
SCENARIOS = {
    "hook-void": Scenario(_hook_void),
    "docker-hook-void": Scenario(_docker_hook_void),
    "hook-gpu": Scenario(_hook_gpu, rc=None),  # the container's process is no process
    "hook-create-container": Scenario(_hook_create_container),
    "hook-cdi": Scenario(_hook_cdi, done=_hook_linked),
    "hook-poststop": Scenario(_hook_poststop),
    "edit-void": Scenario(_edit_void),
    "edit-gpu": Scenario(_edit_gpu, done=_linked),
    "edit-amd": Scenario(_vendor_edit("amd"), done=_edited),
    "edit-intel": Scenario(_vendor_edit("intel"), done=_edited),
    "cdi-generate": Scenario(_cdi_generate, done=_generated),
    "runtime-void": Scenario(_runtime_void),
    "runtime-gpu": Scenario(_runtime_gpu, done=_linked),
    "runtime-cdi": Scenario(_runtime_cdi, done=_cdi_injected),
}


def _is(module: str, name: str) -> bool:
    return module == name or module.startswith(name + ".")


def over_budget(entry: EntryPoint, loaded: set[str]) -> list[str]:
    """What ``loaded`` has that ``entry`` does not allow, one line per finding (empty when
    it keeps to its budget)."""
    ours = {m for m in loaded if _is(m, "ocihook")}
    others = loaded - ours
    found = [f"ocihook module not in the table: {m}" for m in sorted(ours - entry.ocihook)]
    found += [f"ocihook module in the table, not loaded: {m}" for m in sorted(entry.ocihook - ours)]
    heavy = {m for m in others if any(_is(m, h) for h in HEAVY)}
    found += [
        f"heavy module without a reason: {m}"
        for m in sorted(heavy)
        if not any(_is(m, h) for h in entry.heavy)
    ]
    found += [
        f"not the standard library's: {m}"
        for m in sorted(others)
        if m.split(".")[0] not in sys.stdlib_module_names and not any(_is(m, h) for h in HEAVY)
    ]
    if sys.version_info[:2] == (3, 11):  # the table's stdlib sets are measured on 3.11
        found += [f"stdlib module not in the table: {m}" for m in sorted(others - entry.stdlib)]
    return found


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> simhost.SimulatedHost:
    return simhost.build(str(tmp_path_factory.mktemp("simhost")))


@pytest.mark.parametrize("entry", ENTRY_POINTS, ids=[e.name for e in ENTRY_POINTS])
def test_entry_point_keeps_to_its_budget(
    entry: EntryPoint, host: simhost.SimulatedHost, tmp_path: Path
) -> None:
    if os.path.exists("/etc/ocihook/config.toml"):
        pytest.skip("this host's /etc/ocihook/config.toml would be read")
    if os.path.exists("/run/ocihook"):
        # a warm start-path cache (the boot unit's, or a benchmark's while it runs) spares the
        # TOML parse and the discovery the table measures
        pytest.skip("this host's start-path cache /run/ocihook would be read")
    scenario = SCENARIOS[entry.name]
    code, stdin = scenario.setup(tmp_path, host)
    if scenario.rc is not None:
        code += f"assert RC == {scenario.rc}, RC\n"
    loaded = loaded_modules(code, tmp_path / "modules", stdin)
    assert over_budget(entry, loaded) == []
    assert scenario.done is None or scenario.done(tmp_path)


def test_every_entry_point_is_run() -> None:
    assert [e.name for e in ENTRY_POINTS] == list(SCENARIOS)
    assert len({e.name for e in ENTRY_POINTS}) == len(ENTRY_POINTS)


def test_forbidden_modules_are_heavy() -> None:
    """The modules the start path must not load are in the table's :data:`HEAVY`, each
    with its reason."""
    forbidden = {"json", "re", "enum", "signal", "fnmatch", "collections.abc", "typing"}
    forbidden |= {"click", "jsonschema", "elftools", "yaml", "grpc", "dataclasses", "tomlkit"}
    assert forbidden <= set(HEAVY)
    assert all(HEAVY.values())


def test_only_the_wrapper_reading_toml_may_load_heavy_modules() -> None:
    assert {e.name for e in ENTRY_POINTS if e.heavy} == {"runtime-gpu", "runtime-cdi"}
    for entry in ENTRY_POINTS:
        assert set(entry.heavy) <= set(HEAVY), entry.name
        assert not {m for m in entry.stdlib if m in HEAVY} - set(entry.heavy), entry.name


def test_the_checker_finds_what_is_over() -> None:
    entry = ENTRY_POINTS[0]
    loaded = set(entry.ocihook) | set(entry.stdlib)
    assert over_budget(entry, loaded) == []
    extra = {"ocihook.plan", "re", "re._parser", "click", "json"}
    assert over_budget(entry, (loaded | extra) - {"ocihook.core.vocab"}) == [
        "ocihook module not in the table: ocihook.plan",
        "ocihook module in the table, not loaded: ocihook.core.vocab",
        "heavy module without a reason: click",
        "heavy module without a reason: json",
        "heavy module without a reason: re",
        "heavy module without a reason: re._parser",
        *(
            ["stdlib module not in the table: " + m for m in ("click", "json", "re", "re._parser")]
            if sys.version_info[:2] == (3, 11)
            else []
        ),
    ]


def test_start_path_modules_are_the_table_s() -> None:
    assert "ocihook.commands.fast" in START_PATH_MODULES
    assert not {m for m in START_PATH_MODULES if _is(m, "ocihook.commands.cli")}
    assert not {m for m in START_PATH_MODULES if _is(m, "ocihook.k8s")}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_type_checking_false_only_on_the_start_path() -> None:
    """``TYPE_CHECKING = False`` (annotations' imports without importing :mod:`typing`)
    is a start-path habit: every other module imports ``TYPE_CHECKING`` from typing, or
    its annotations' modules plainly."""
    found = []
    for path in sorted((Path(REPO) / "ocihook").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "TYPE_CHECKING" for t in node.targets
            ):
                found.append(_module_name(path))
    assert found, "the check found no module at all"
    assert sorted(set(found) - START_PATH_MODULES) == []
