"""Breaker tests for the wrapper runtime (``ocihook-runtime``), ``ocihook runtime
configure`` and the AMD/Intel paths: each test here failed when it was written and shows a
defect (input, what happened, what should happen in its docstring).

Engine files are always written under the test's temporary directory (``--config``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from test_runtime_wrapper import Stage

from ocihook.core.errors import (
    EXIT_CODES,
    EngineConfigError,
    OcihookError,
    RequestError,
    RuntimeNotFound,
)
from ocihook.core.hostroot import HostRoot
from ocihook.discovery import amd
from ocihook.request import drm_request_from_env, select_drm_gpus
from ocihook.sim import host as simhost
from ocihook.sim import vendors as simvendors

RUNTIME_PATH = "/usr/local/bin/ocihook-runtime"


def _ocihook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ocihook", *args], capture_output=True, text=True, timeout=60
    )


def _configure(engine: str, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return _ocihook(
        "runtime",
        "configure",
        "--runtime",
        engine,
        "--config",
        str(path),
        "--runtime-path",
        RUNTIME_PATH,
        *extra,
    )


# --- ocihook-runtime ------------------------------------------------------------------


@pytest.fixture
def stage(tmp_path: Path, sim: simhost.SimulatedHost) -> Stage:
    return Stage(tmp_path, sim.root)


@pytest.mark.parametrize("args", [["create", "--help"], ["run", "-h"], ["--help", "create"]])
def test_create_help_reaches_the_real_runtime(
    stage: Stage, tmp_path: Path, args: list[str]
) -> None:
    """``ocihook-runtime create --help`` (run in a directory without config.json) must
    show runc's help for create, as ``runc create --help`` does. Found: the wrapper reads
    ./config.json, fails with exit 3 (``config.json not found``) and never runs runc."""
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = stage.run(*args, cwd=str(empty))
    assert proc.returncode == 0, proc.stderr
    called = stage.called()
    assert called is not None and called["argv"] == [stage.runc, *args]


def test_crun_log_driver_prefix_is_not_a_file_in_the_bundle(stage: Stage, tmp_path: Path) -> None:
    """crun's global ``--log`` takes ``file:PATH``, ``journald:ID`` or ``syslog:ID``
    (crun(1)). On an error the wrapper appends its line to the ``--log`` value taken as a
    path: ``--log journald:x`` creates a file named ``journald:x`` in the current
    directory (the bundle), and ``--log file:/abs/log`` writes nothing to ``/abs/log``.
    Expected: ``file:`` stripped, journald/syslog not taken as files."""
    work = tmp_path / "work"
    work.mkdir()
    log = tmp_path / "crun.log"
    proc = stage.run("--log", "journald:x", "create", "-b", "/nonexistent", "cid", cwd=str(work))
    assert proc.returncode == 3, proc.stderr
    assert os.listdir(work) == []
    proc = stage.run(
        "--log", f"file:{log}", "--log-format", "json", "create", "-b", "/nonexistent", "cid"
    )
    assert proc.returncode == 3, proc.stderr
    assert log.exists(), "the error did not reach crun's --log file:PATH"
    entry = json.loads(log.read_text().splitlines()[-1])
    assert entry["level"] == "error" and "config.json not found" in entry["msg"]


def test_failed_exec_leaves_config_json_as_it_was(
    stage: Stage, bundle_factory: Any, tmp_path: Path
) -> None:
    """README: "On an error config.json is left as it was, the real runtime is not run".
    A ``runc`` whose interpreter is missing (``#!/nonexistent/sh``) passes
    :func:`find_runtime` (an executable file) but ``execve`` fails with ENOENT after the
    bundle was edited: exit 12 and config.json keeps the GPU edits. Expected: the
    original bytes put back when the exec fails."""
    Path(stage.runc).write_text("#!/nonexistent/sh\nexit 0\n")
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"])
    config = Path(bundle, "config.json")
    before = config.read_bytes()
    proc = stage.run("create", "-b", bundle, "cid")
    assert proc.returncode == EXIT_CODES[RuntimeNotFound], proc.stderr
    assert config.read_bytes() == before


# --- runtime configure: containerd --------------------------------------------------------


def _containerd_dump(path: Path) -> str:
    if shutil.which("containerd") is None:
        pytest.skip("containerd is not installed")
    proc = subprocess.run(
        ["containerd", "--config", str(path), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _cri_runtimes(dump: str) -> dict[str, Any]:
    doc = tomllib.loads(dump)
    runtimes: dict[str, Any] = doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    return runtimes


def test_containerd_runc_entry_of_the_wrong_type_is_exit_13(tmp_path: Path) -> None:
    """A containerd config whose ``runtimes.runc`` is a string (malformed) must be refused
    with exit 13 and left untouched. Found: ``AttributeError: 'str' object has no
    attribute 'items'`` (traceback, exit 1) in ``configure_containerd``."""
    path = tmp_path / "config.toml"
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\nrunc = "x"\n'
    path.write_text(text)
    proc = _configure("containerd", path)
    assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
    assert "Traceback" not in proc.stderr
    assert path.read_text() == text


@pytest.mark.parametrize(
    "body",
    [
        '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'runtimes = { runc = { runtime_type = "io.containerd.runc.v2" } }\n',
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
        'ocihook = { runtime_type = "io.containerd.runc.v2" }\n',
        'plugins = { "io.containerd.internal.v1.opt" = { path = "/opt" } }\n',
    ],
    ids=["inline-runtimes", "inline-ocihook-entry", "inline-plugins"],
)
def test_containerd_inline_tables_are_edited_or_refused_with_13(tmp_path: Path, body: str) -> None:
    """Inline tables on the path ocihook writes (``runtimes = { runc = {...} }``, an
    ``ocihook = {...}`` entry, ``plugins = {...}``) are valid containerd configs
    (``config dump`` reads them). Found: tomlkit's ``ValueError: Inline tables cannot
    contain a table`` is caught by the CLI as a usage error (exit 2, "Try 'ocihook runtime
    configure --help'"), though the command line was right. Expected: the runtime added
    or exit 13 naming the file, the file untouched."""
    path = tmp_path / "config.toml"
    text = "version = 2\n" + body
    path.write_text(text)
    _containerd_dump(path)  # valid for containerd
    proc = _configure("containerd", path)
    if proc.returncode == 0:
        runtimes = _cri_runtimes(_containerd_dump(path))
        assert runtimes["ocihook"]["options"]["BinaryName"] == RUNTIME_PATH
    else:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
        assert str(path) in proc.stderr
        assert path.read_text() == text


def test_containerd_dotted_keys_keep_runc_and_register_ocihook(tmp_path: Path) -> None:
    """A containerd config that writes the runc runtime with dotted keys::

        [plugins."io.containerd.grpc.v1.cri".containerd]
        runtimes.runc.runtime_type = "io.containerd.runc.v2"
        runtimes.runc.options.SystemdCgroup = true

    Found: exit 0 "updated", but tomlkit writes ``[runtimes.ocihook]`` as a top-level
    table between the two dotted lines, so ``runtimes.runc.options.SystemdCgroup`` lands
    inside the new table: containerd's ``config dump`` then shows no ``ocihook`` runtime
    and runc without ``SystemdCgroup`` (a cgroup-driver mismatch for kubelet). Expected:
    the runtime registered and runc's settings kept, or exit 13 and the file untouched."""
    path = tmp_path / "config.toml"
    text = (
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'runtimes.runc.runtime_type = "io.containerd.runc.v2"\n'
        "runtimes.runc.options.SystemdCgroup = true\n"
    )
    path.write_text(text)
    assert _cri_runtimes(_containerd_dump(path))["runc"]["options"]["SystemdCgroup"] is True
    proc = _configure("containerd", path)
    if proc.returncode == 0:
        runtimes = _cri_runtimes(_containerd_dump(path))
        assert runtimes["runc"]["options"].get("SystemdCgroup") is True, path.read_text()
        assert "ocihook" in runtimes, path.read_text()
        assert runtimes["ocihook"]["options"]["BinaryName"] == RUNTIME_PATH
    else:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
        assert path.read_text() == text


def test_containerd_out_of_order_tables_with_set_as_default(tmp_path: Path) -> None:
    """A valid containerd config whose ``[plugins."io.containerd.grpc.v1.cri".containerd]``
    header comes after its sub-table ``...containerd.runtimes.runc.options`` and another
    plugin's table (TOML allows it; ``config dump`` reads it). With ``--set-as-default``
    (or ``--cdi``): ``AttributeError: 'dict' object has no attribute 'body'`` in
    ``_key_indent`` (tomlkit gives an out-of-order table proxy), exit 1 with a traceback.
    Expected: ``default_runtime_name = "ocihook"`` written (or exit 13)."""
    path = tmp_path / "config.toml"
    text = (
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        "SystemdCgroup = true\n"
        '[plugins."io.containerd.internal.v1.opt"]\n'
        'path = "/opt"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'snapshotter = "native"\n'
    )
    path.write_text(text)
    _containerd_dump(path)  # valid for containerd
    proc = _configure("containerd", path, "--set-as-default", "--cdi")
    assert "Traceback" not in proc.stderr, proc.stderr[-600:]
    if proc.returncode == 0:
        dump = tomllib.loads(_containerd_dump(path))
        cri = dump["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
        assert cri["default_runtime_name"] == "ocihook"
        assert cri["snapshotter"] == "native"
        assert cri["runtimes"]["ocihook"]["options"]["BinaryName"] == RUNTIME_PATH
        assert cri["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    else:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
        assert path.read_text() == text


@pytest.mark.parametrize(
    "text",
    [
        '[crio.runtime]\nruntimes.runc.runtime_path = "/usr/bin/runc"\n'
        'runtimes.runc.monitor_env = ["A=1"]\n',
        '[crio]\nruntime.default_runtime = "runc"\n',
    ],
    ids=["dotted-runtimes", "dotted-runtime"],
)
def test_crio_dotted_keys_register_ocihook_under_crio_runtime(tmp_path: Path, text: str) -> None:
    """A CRI-O drop-in written with dotted keys. Found: exit 0, but the entry is written
    as ``[runtimes.ocihook]`` / ``[runtime.runtimes.ocihook]`` at the top level (CRI-O
    never sees it), and in the first file ``runtimes.runc.monitor_env`` moves into the
    new table. Expected: ``crio.runtime.runtimes.ocihook.runtime_path`` set with the rest
    kept, or exit 13 and the file untouched."""
    path = tmp_path / "99-ocihook.conf"
    path.write_text(text)
    before = tomllib.loads(text)
    proc = _configure("crio", path)
    if proc.returncode == 0:
        after = tomllib.loads(path.read_text())
        assert set(after) == {"crio"}, path.read_text()
        entry = after["crio"]["runtime"]["runtimes"]["ocihook"]
        assert entry["runtime_path"] == RUNTIME_PATH
        old_runtime = before["crio"]["runtime"]
        for key, value in old_runtime.items():
            if key != "runtimes":
                assert after["crio"]["runtime"][key] == value
        for name, value in old_runtime.get("runtimes", {}).items():
            assert after["crio"]["runtime"]["runtimes"][name] == value
    else:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
        assert path.read_text() == text


# --- runtime configure: docker --------------------------------------------------------------


def test_docker_cdi_feature_number_is_not_already_configured(tmp_path: Path) -> None:
    """``features.cdi`` must be a JSON boolean for dockerd (``map[string]bool``). With
    ``"cdi": 1`` and ``--cdi``, ``new == doc`` holds in Python (``1 == True``) and the file
    is reported "already configured; unchanged". Expected: ``true`` written (or exit
    13)."""
    path = tmp_path / "daemon.json"
    doc = {"features": {"cdi": 1}, "runtimes": {"ocihook": {"path": RUNTIME_PATH}}}
    path.write_text(json.dumps(doc))
    proc = _configure("docker", path, "--cdi")
    if proc.returncode == 0:
        assert json.loads(path.read_text())["features"]["cdi"] is True
    else:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr


def test_docker_nan_is_malformed_json(tmp_path: Path) -> None:
    """``{"x": NaN}`` is not JSON (RFC 8259; dockerd's encoding/json refuses it). Found:
    Python's json accepts it and the file is rewritten with ``NaN`` in it, exit 0.
    Expected: exit 13, file untouched, as for any other malformed daemon.json."""
    path = tmp_path / "daemon.json"
    text = '{"x": NaN}'
    path.write_text(text)
    proc = _configure("docker", path)
    assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
    assert path.read_text() == text


# --- AMD / Intel ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def amd_sim(tmp_path_factory: pytest.TempPathFactory) -> simvendors.SimDrmHost:
    return simvendors.build_amd(str(tmp_path_factory.mktemp("amd")))


@pytest.mark.parametrize(
    "value", ["9" * 5000, "0-" + "9" * 5000, "0," + "1" * 4301], ids=["index", "range", "list"]
)
def test_amd_huge_index_is_a_request_error(amd_sim: simvendors.SimDrmHost, value: str) -> None:
    """``AMD_VISIBLE_DEVICES`` with an index of 5000 digits: Python's int() refuses
    more than 4300 digits with ``ValueError``, which escapes ``select_drm_gpus`` (and so
    ``ocihook edit``, the hook and ``ocihook-runtime`` print a traceback). Expected:
    :class:`RequestError` "no AMD GPU with index ..." (exit 5)."""
    host = amd.discover(HostRoot.single(amd_sim.root))
    request = drm_request_from_env("amd", {"AMD_VISIBLE_DEVICES": value})
    assert request is not None
    with pytest.raises(RequestError):
        select_drm_gpus(request, host.gpus)


def test_amd_huge_index_edit_exit_code(amd_sim: simvendors.SimDrmHost, tmp_path: Path) -> None:
    """The same through ``ocihook edit``: found a ``ValueError`` traceback (exit 1);
    expected exit 5 and config.json untouched."""
    bundle = tmp_path / "b"
    (bundle / "rootfs").mkdir(parents=True)
    doc = {
        "ociVersion": "1.0.2",
        "process": {"args": ["true"], "cwd": "/", "env": ["AMD_VISIBLE_DEVICES=" + "9" * 5000]},
        "root": {"path": "rootfs"},
        "linux": {},
    }
    (bundle / "config.json").write_text(json.dumps(doc))
    before = (bundle / "config.json").read_bytes()
    roots = ["--driver-root", amd_sim.root, "--dev-root", amd_sim.root]
    proc = _ocihook("edit", "-b", str(bundle), *roots)
    assert proc.returncode == EXIT_CODES[RequestError], proc.stderr[-500:]
    assert "Traceback" not in proc.stderr
    assert (bundle / "config.json").read_bytes() == before


def test_kfd_properties_with_a_huge_value_never_raise() -> None:
    """``parse_kfd_properties`` says it never raises; a line with a 5000-digit value (a
    corrupt sysfs file) raises ``ValueError`` from int(). Expected: the line ignored."""
    assert amd.parse_kfd_properties("x " + "9" * 5000 + "\ndomain 1\n") == {"domain": 1}


def test_amd_discovery_with_a_huge_kfd_value(tmp_path: Path) -> None:
    """A KFD topology ``properties`` file with a huge number makes ``amd.discover`` (and
    so ``ocihook info``, ``cdi generate --vendor amd``) die with ``ValueError`` instead of
    skipping the line or a :class:`DiscoveryError` (exit 6)."""
    built = simvendors.build_amd(str(tmp_path / "amd"))
    topo = Path(built.root, "sys/class/kfd/kfd/topology/nodes")
    props = sorted(topo.glob("*/properties"))
    assert props
    with open(props[0], "a") as f:
        f.write("max_engine_clk_fcompute " + "9" * 5000 + "\n")
    try:
        host = amd.discover(HostRoot.single(built.root))
    except OcihookError:
        return
    assert len(host.gpus) == len(built.amd)


def test_intel_sriov_numvfs_not_a_number_is_not_a_traceback(tmp_path: Path) -> None:
    """``sriov_numvfs`` holding ``²`` (U+00B2: ``str.isdigit()`` is true, ``int()``
    refuses it): ``intel.discover`` (and ``ocihook info``, ``cdi generate --vendor
    intel``) die with ``ValueError``. Expected: the attribute treated as malformed (a
    warning, or a :class:`DiscoveryError`, exit 6)."""
    from ocihook.discovery import intel

    built = simvendors.build_intel(str(tmp_path / "intel"), sriov=True)
    (numvfs,) = Path(built.root, "sys/devices").rglob("sriov_numvfs")
    numvfs.write_text("\u00b2\n")
    try:
        host = intel.discover(HostRoot.single(built.root))
    except OcihookError as e:
        assert e.path is not None and "sriov_numvfs" in e.path
    else:
        assert host.gpus


def test_amd_partition_dir_with_a_non_ascii_digit_is_not_a_traceback(tmp_path: Path) -> None:
    """A platform device ``amdgpu_xcp_²`` (``isdigit()`` true, ``int()`` refuses):
    ``amd.discover`` dies with ``ValueError``. Expected: the entry ignored, as other
    names that are not ``amdgpu_xcp_<N>``."""
    built = simvendors.build_amd(str(tmp_path / "amd"))
    Path(built.root, "sys/devices/platform/amdgpu_xcp_\u00b2").mkdir()
    host = amd.discover(HostRoot.single(built.root))
    assert len(host.gpus) == len(built.amd)


def test_legacy_mode_adds_the_hook_for_an_amd_request(
    stage: Stage, tmp_path: Path, amd_sim: simvendors.SimDrmHost
) -> None:
    """``mode = "legacy"``: a container asking only for ``AMD_VISIBLE_DEVICES=0`` gets no
    hook (``_add_legacy_hook`` looks only at the NVIDIA request, which is void), so it
    starts without its GPU and without an error; ``auto`` mode edits the same bundle and
    the hook itself serves AMD requests. Expected: the prestart hook added."""
    stage.root = amd_sim.root
    stage.write_config('mode = "legacy"\n')
    bundle = tmp_path / "b"
    (bundle / "rootfs").mkdir(parents=True)
    doc = {
        "ociVersion": "1.0.2",
        "process": {"args": ["true"], "cwd": "/", "env": ["AMD_VISIBLE_DEVICES=0"]},
        "root": {"path": "rootfs"},
        "linux": {},
    }
    (bundle / "config.json").write_text(json.dumps(doc))
    proc = stage.run("create", "-b", str(bundle), "cid")
    assert proc.returncode == 0, proc.stderr
    after = json.loads((bundle / "config.json").read_text())
    prestart = after.get("hooks", {}).get("prestart", [])
    assert [h["args"][-4:] for h in prestart] == [
        ["hook", "prestart", "--config", str(stage.config)]
    ]


def test_containerd_imports_do_not_undo_the_registration(tmp_path: Path) -> None:
    """A main ``config.toml`` with ``imports = ["conf.d/*.toml"]`` whose drop-in
    configures the CRI plugin (``default_runtime_name = "runc"``, runc's
    ``SystemdCgroup``). ``configure --set-as-default`` edits only the main file and says
    "updated"; containerd's merged configuration (``config dump``) then has no
    ``ocihook`` runtime and ``default_runtime_name = "runc"`` (containerd 1.6 replaces a
    plugin's table by the imported one; 2.x merges keys, the drop-in still wins).
    Expected: ocihook registered in the configuration containerd uses (a drop-in of its
    own in an imported directory, or the import considered), or exit 13 / a note."""
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    (conf_d / "10-base.toml").write_text(
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'default_runtime_name = "runc"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        "SystemdCgroup = true\n"
    )
    path = tmp_path / "config.toml"
    text = f'version = 2\nimports = ["{conf_d}/*.toml"]\n'
    path.write_text(text)
    proc = _configure("containerd", path, "--set-as-default")
    notes = proc.stderr.replace(str(tmp_path), "")
    if proc.returncode == 0 and "import" not in notes:
        dump = tomllib.loads(_containerd_dump(path))
        cri = dump["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
        assert (
            cri["runtimes"].get("ocihook", {}).get("options", {}).get("BinaryName") == RUNTIME_PATH
        ), path.read_text()
        assert cri["default_runtime_name"] == "ocihook"
    elif proc.returncode != 0:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
        assert path.read_text() == text


def test_crio_out_of_order_tables_with_set_as_default(tmp_path: Path) -> None:
    """The CRI-O twin of the containerd case: ``[crio.runtime]`` defined after
    ``[crio.runtime.runtimes.runc]`` and ``[crio.api]`` (valid TOML). ``--set-as-default``
    dies with ``AttributeError`` in ``_key_indent`` (exit 1, traceback). Expected:
    ``crio.runtime.default_runtime = "ocihook"`` with the rest kept, or exit 13."""
    path = tmp_path / "crio.conf"
    text = (
        "[crio.runtime.runtimes.runc]\n"
        'runtime_path = "/usr/bin/runc"\n'
        "[crio.api]\n"
        'listen = "/x"\n'
        "[crio.runtime]\n"
        'cgroup_manager = "systemd"\n'
    )
    path.write_text(text)
    proc = _configure("crio", path, "--set-as-default")
    assert "Traceback" not in proc.stderr, proc.stderr[-600:]
    if proc.returncode == 0:
        runtime = tomllib.loads(path.read_text())["crio"]["runtime"]
        assert runtime["default_runtime"] == "ocihook"
        assert runtime["cgroup_manager"] == "systemd"
        assert runtime["runtimes"]["runc"] == {"runtime_path": "/usr/bin/runc"}
        assert runtime["runtimes"]["ocihook"]["runtime_path"] == RUNTIME_PATH
    else:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
        assert path.read_text() == text
