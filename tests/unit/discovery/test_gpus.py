"""GPU enumeration: the procfs backend on fixture trees, the NVML backend against the
``pynvml`` double (tests/doubles/pynvml.py), and the parsers under hypothesis.

One host description (``Host``) is written both as a procfs tree and as the double's NVML
description, so the two backends can be compared on the very same machine.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import DOUBLES
from support import modules_after as _modules_after

from ocihook.core.errors import DiscoveryError, exit_code_for
from ocihook.core.hostroot import HostRoot
from ocihook.discovery import nvml
from ocihook.discovery.gpus import read_gpus
from ocihook.discovery.mig import mig_management_nodes
from ocihook.discovery.nvidia import discover, enumerate_gpus
from ocihook.discovery.procfs import (
    canonical_bus_id,
    parse_capability_file,
    parse_devices,
    parse_gpu_information,
    parse_mig_minors,
)
from ocihook.discovery.records import Gpu, GpuInventory, HostDeviceNode, MigDevice
from ocihook.sim import host as simhost

DOUBLE = os.path.join(DOUBLES, "pynvml.py")
DRIVER = "550.127.05"
NVIDIA, UVM, CAPS = 195, 237, 240
MAJORS = {"nvidia": NVIDIA, "nvidia-uvm": UVM, "nvidia-caps": CAPS}
# The fields both backends must agree on.
SHARED = ("index", "minor", "uuid", "bus_id", "model", "proc_dir")


def _uuid(n: int) -> str:
    return f"GPU-{n:08x}-1111-2222-3333-{n:012x}"


def _mig_uuid(gpu: int, gi: int, ci: int) -> str:
    return f"MIG-{gpu:08x}-{gi:04x}-{ci:04x}-4444-555555555555"


def gi_minor(gpu_minor: int, gi: int) -> int:
    """The driver's static mig-minors table: config 1, monitor 2, then per GPU minor 15
    GPU instances of 9 minors each (the GI's, then its 8 CIs')."""
    return 3 + gpu_minor * 135 + gi * 9


def ci_minor(gpu_minor: int, gi: int, ci: int) -> int:
    return gi_minor(gpu_minor, gi) + 1 + ci


def mig_minors_text(gpu_minors: int = 8) -> str:
    lines = ["config 1", "monitor 2"]
    for g in range(gpu_minors):
        for gi in range(15):
            lines.append(f"gpu{g}/gi{gi}/access {gi_minor(g, gi)}")
            lines.extend(f"gpu{g}/gi{gi}/ci{ci}/access {ci_minor(g, gi, ci)}" for ci in range(8))
    return "\n".join(lines) + "\n"


def cap_text(minor: int, mode: int = 0o444) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


def _write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


class GpuSpec:
    """One GPU of a test host: ``dir`` is its procfs directory name (4- or 8-digit
    domain, as written), ``mig`` its MIG devices as ``(slot, gi, ci)``."""

    def __init__(
        self,
        dir: str,
        minor: int,
        n: int,
        *,
        model: str = "NVIDIA A100-SXM4-80GB",
        excluded: str | None = None,
        brand: int | None = 2,
        cc: tuple[int, int] | None = (8, 0),
        mig: list[tuple[int, int, int]] | None = None,
    ) -> None:
        self.dir = dir
        self.minor = minor
        self.uuid = _uuid(n)
        self.model = model
        self.excluded = excluded
        self.brand = brand
        self.cc = cc
        self.mig = mig
        self.bus_id, self.key = canonical_bus_id(dir, path="test")


class Host:
    """A host description written as a procfs tree (:meth:`write`) and as the pynvml
    double's description (:meth:`nvml`)."""

    def __init__(self, gpus: list[GpuSpec], *, cuda: int | None = 12040) -> None:
        self.gpus = gpus
        self.cuda = cuda

    def visible(self) -> list[GpuSpec]:
        return sorted((g for g in self.gpus if g.excluded is None), key=lambda g: g.key)

    def write(self, dest: str, *, caps_major: bool = True, mig_minors: bool = True) -> HostRoot:
        proc = os.path.join(dest, "proc")
        _write(
            f"{proc}/driver/nvidia/version",
            f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {DRIVER}  Release Build\n",
        )
        for g in self.gpus:
            lines = [
                f"Model: \t\t {g.model}",
                "IRQ:   \t\t 120",
                f"GPU UUID: \t {g.uuid}",
                "Video BIOS: \t 92.00.45.00.06",
                "Bus Type: \t PCIe",
                f"Bus Location: \t {g.dir}",
                f"Device Minor: \t {g.minor}",
            ]
            if g.excluded is not None:
                lines.append(g.excluded)
            _write(f"{proc}/driver/nvidia/gpus/{g.dir}/information", "\n".join(lines) + "\n")
            caps = f"{proc}/driver/nvidia/capabilities/gpu{g.minor}/mig"
            for _slot, gi, ci in g.mig or ():
                _write(f"{caps}/gi{gi}/access", cap_text(gi_minor(g.minor, gi)))
                _write(f"{caps}/gi{gi}/ci{ci}/access", cap_text(ci_minor(g.minor, gi, ci)))
        devices = f"Character devices:\n{NVIDIA} nvidia\n{UVM} nvidia-uvm\n"
        if caps_major:
            devices += f"{CAPS} nvidia-caps\n"
        _write(f"{proc}/devices", devices + "\nBlock devices:\n  8 sd\n")
        if mig_minors:
            _write(f"{proc}/driver/nvidia-caps/mig-minors", mig_minors_text())
        _write(f"{proc}/driver/nvidia/capabilities/mig/config", cap_text(1, 0o400))
        _write(f"{proc}/driver/nvidia/capabilities/mig/monitor", cap_text(2, 0o444))
        return HostRoot.single(dest)

    def nvml(self, **extra: Any) -> dict[str, Any]:
        gpus = []
        for g in self.visible():
            gpu: dict[str, Any] = {
                "uuid": g.uuid,
                "minor": g.minor,
                "bus_id": g.bus_id,
                "name": g.model,
            }
            if g.brand is not None:
                gpu["brand"] = g.brand
            if g.cc is not None:
                gpu["compute_capability"] = g.cc
            if g.mig is not None:
                gpu["mig"] = {
                    "current": 1,
                    "pending": 1,
                    "max_devices": 7,
                    "devices": {
                        slot: {"gi": gi, "ci": ci, "uuid": _mig_uuid(g.minor, gi, ci)}
                        for slot, gi, ci in g.mig
                    },
                }
            gpus.append(gpu)
        description: dict[str, Any] = {
            "driver_version": DRIVER,
            "cuda_version": self.cuda,
            "gpus": gpus,
        }
        description.update(extra)
        return description


def standard_host() -> Host:
    """Five GPU directories: 4- and 8-digit domains, a second PCI domain, one excluded,
    minors not in bus order, and a MIG-enabled GPU (minor 3, index 1) with 2 GPU
    instances and 3 compute instances whose NVML slots are not in (gi, ci) order."""
    return Host(
        [
            GpuSpec("0000:b7:00.0", 0, 1),
            GpuSpec(
                "00000000:3b:00.0",
                3,
                2,
                model="NVIDIA H100 80GB HBM3",
                cc=(9, 0),
                mig=[(0, 2, 0), (1, 1, 0), (3, 1, 1)],
            ),
            GpuSpec("0001:01:00.0", 1, 3, brand=14),
            GpuSpec("00000000:07:00.0", 2, 4, brand=5, cc=(8, 6), model="NVIDIA GeForce RTX 3090"),
            GpuSpec("0000:5e:00.0", 4, 5, excluded="GPU Excluded:\t Yes"),
        ]
    )


@pytest.fixture
def host() -> Host:
    return standard_host()


@pytest.fixture
def root(host: Host, tmp_path: Any) -> HostRoot:
    return host.write(str(tmp_path))


def _load_double() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pynvml", DOUBLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A fresh pynvml double installed as ``sys.modules['pynvml']`` for one test."""
    module = _load_double()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    yield module
    assert module.init_refcount() == 0, "nvmlInit without nvmlShutdown"


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """pynvml not installed: ``import pynvml`` raises ImportError."""
    monkeypatch.setitem(sys.modules, "pynvml", None)


def _shared(inv: GpuInventory) -> list[tuple[Any, ...]]:
    return [tuple(getattr(g, f) for f in SHARED) for g in inv.gpus]


def _mig_keys(gpu: Gpu) -> list[tuple[Any, ...]]:
    return [
        (m.parent_index, m.parent_minor, m.gi, m.ci, m.gi_node, m.ci_node) for m in gpu.mig_devices
    ]


# -- procfs backend --------------------------------------------------------------------------


def test_procfs_order_domains_excluded_and_minors(host: Host, root: HostRoot) -> None:
    inv = enumerate_gpus(root, MAJORS, backend="procfs")
    assert inv.backend == "procfs"
    assert inv.driver_version == DRIVER and inv.cuda_version is None
    gpus_dir = root.proc("driver/nvidia/gpus")
    assert _shared(inv) == [
        (
            0,
            2,
            _uuid(4),
            "00000000:07:00.0",
            "NVIDIA GeForce RTX 3090",
            f"{gpus_dir}/00000000:07:00.0",
        ),
        (
            1,
            3,
            _uuid(2),
            "00000000:3b:00.0",
            "NVIDIA H100 80GB HBM3",
            f"{gpus_dir}/00000000:3b:00.0",
        ),
        (2, 0, _uuid(1), "00000000:b7:00.0", "NVIDIA A100-SXM4-80GB", f"{gpus_dir}/0000:b7:00.0"),
        (3, 1, _uuid(3), "00000001:01:00.0", "NVIDIA A100-SXM4-80GB", f"{gpus_dir}/0001:01:00.0"),
    ]
    assert all(g.brand is None and g.architecture is None for g in inv.gpus)
    assert [w for w in inv.warnings if "excluded" in w] == [
        "GPU 0000:5e:00.0 is excluded by the driver; skipped"
    ]
    assert len(inv.warnings) == 1, inv.warnings


def test_procfs_legacy_blacklisted_key(tmp_path: Any) -> None:
    host = Host(
        [GpuSpec("0000:07:00.0", 0, 1), GpuSpec("0000:08:00.0", 1, 2, excluded="Blacklisted: Yes")]
    )
    inv = enumerate_gpus(host.write(str(tmp_path)), MAJORS, backend="procfs")
    assert [g.uuid for g in inv.gpus] == [_uuid(1)]


def test_procfs_mig_devices(root: HostRoot) -> None:
    inv = enumerate_gpus(root, MAJORS, backend="procfs")
    mig_gpu = inv.gpus[1]
    assert mig_gpu.minor == 3 and mig_gpu.index == 1
    assert [g.mig_devices for g in inv.gpus if g is not mig_gpu] == [(), (), ()]
    caps = root.proc("driver/nvidia/capabilities/gpu3/mig")
    expected = []
    for gi, ci in [(1, 0), (1, 1), (2, 0)]:
        gm, cm = gi_minor(3, gi), ci_minor(3, gi, ci)
        expected.append(
            MigDevice(
                parent_index=1,
                parent_minor=3,
                gi=gi,
                ci=ci,
                gi_node=HostDeviceNode(
                    f"/dev/nvidia-caps/nvidia-cap{gm}",
                    root.dev(f"/dev/nvidia-caps/nvidia-cap{gm}"),
                    CAPS,
                    gm,
                    file_mode=0o444,
                ),
                ci_node=HostDeviceNode(
                    f"/dev/nvidia-caps/nvidia-cap{cm}",
                    root.dev(f"/dev/nvidia-caps/nvidia-cap{cm}"),
                    CAPS,
                    cm,
                    file_mode=0o444,
                ),
                gi_cap_file=f"{caps}/gi{gi}/access",
                ci_cap_file=f"{caps}/gi{gi}/ci{ci}/access",
            )
        )
    assert list(mig_gpu.mig_devices) == expected
    # gpuN in the capability paths is the GPU *minor*: gpu3 for index 1
    assert gi_minor(3, 1) == 3 + 3 * 135 + 9
    assert all(m.uuid is None and m.nvml_index is None for m in mig_gpu.mig_devices)
    assert mig_gpu.mig_devices[0].nodes == (expected[0].gi_node, expected[0].ci_node)


def test_read_gpus_has_no_mig_and_discover_still_works(root: HostRoot) -> None:
    gpus, warnings = read_gpus(root)
    inv = enumerate_gpus(root, MAJORS, backend="procfs")
    assert [g.mig_devices for g in gpus] == [(), (), (), ()]
    assert _shared(GpuInventory(gpus, None, None, "procfs")) == _shared(inv)
    assert len(warnings) == 1


def test_existing_gpu_constructor_still_works() -> None:
    g = Gpu(0, 1, _uuid(1), "00000000:07:00.0", "T", "/x")
    assert (g.brand, g.architecture, g.mig_devices) == (None, None, ())
    assert g.device_path == "/dev/nvidia1"


def test_malformed_mig_minors_lines_warn(root: HostRoot) -> None:
    path = root.proc("driver/nvidia-caps/mig-minors")
    with open(path, "a") as f:
        f.write(
            "garbage\ngpu0/gi1/access twelve\ngpu0/gi99/cx0/access 5\nconfig 1 2\nmonitor 99999999\n"
        )
        f.write("config 7\n")
    inv = enumerate_gpus(root, MAJORS, backend="procfs")
    assert len(inv.gpus[1].mig_devices) == 3
    assert any("skipped 5 malformed line(s), first 'garbage'" in w for w in inv.warnings), (
        inv.warnings
    )
    assert any("listed twice, first 'config'" in w for w in inv.warnings), inv.warnings


def test_garbage_mig_minors_file_does_not_crash(root: HostRoot) -> None:
    with open(root.proc("driver/nvidia-caps/mig-minors"), "wb") as f:
        f.write(os.urandom(4096) + b"\n\x00\xff\ngpu3/gi1/access 1\n")
    inv = enumerate_gpus(root, MAJORS, backend="procfs")
    assert len(inv.gpus) == 4
    # the table's gpu3/gi1 minor disagrees with the capability file: those are skipped
    assert [(m.gi, m.ci) for m in inv.gpus[1].mig_devices] == [(2, 0)]
    assert any("mig-minors says gpu3/gi1/access 1" in w for w in inv.warnings), inv.warnings


def test_capability_file_disagreeing_with_mig_minors_skips_the_device(root: HostRoot) -> None:
    ci_file = root.proc("driver/nvidia/capabilities/gpu3/mig/gi2/ci0/access")
    _write(ci_file, cap_text(4242))
    inv = enumerate_gpus(root, MAJORS, backend="procfs")
    assert [(m.gi, m.ci) for m in inv.gpus[1].mig_devices] == [(1, 0), (1, 1)]
    assert any("gi 2 ci 0 of GPU 1 skipped" in w and "4242" in w for w in inv.warnings), (
        inv.warnings
    )


def test_malformed_capability_file_skips_the_device(root: HostRoot) -> None:
    _write(root.proc("driver/nvidia/capabilities/gpu3/mig/gi1/access"), "DeviceFileMinor: x\n")
    inv = enumerate_gpus(root, MAJORS, backend="procfs")
    assert [(m.gi, m.ci) for m in inv.gpus[1].mig_devices] == [(2, 0)]
    assert sum("skipped: missing or malformed capability minor" in w for w in inv.warnings) == 2


def test_missing_caps_major_warns(root: HostRoot) -> None:
    majors = {k: v for k, v in MAJORS.items() if k != "nvidia-caps"}
    inv = enumerate_gpus(root, majors, backend="procfs")
    assert all(g.mig_devices == () for g in inv.gpus)
    assert sum("nvidia-caps is not loaded" in w for w in inv.warnings) == 1


def test_missing_mig_minors_uses_capability_files(host: Host, tmp_path: Any) -> None:
    root = host.write(str(tmp_path), mig_minors=False)
    inv = enumerate_gpus(root, MAJORS, backend="procfs")
    assert [m.ci_node.minor for m in inv.gpus[1].mig_devices] == [
        ci_minor(3, 1, 0),
        ci_minor(3, 1, 1),
        ci_minor(3, 2, 0),
    ]
    assert sum("not cross-checked" in w for w in inv.warnings) == 1


def test_no_driver_version_is_a_warning(root: HostRoot) -> None:
    os.unlink(root.proc("driver/nvidia/version"))
    inv = enumerate_gpus(root, MAJORS, backend="procfs")
    assert inv.driver_version is None and len(inv.gpus) == 4
    assert any(w.startswith("no driver version") for w in inv.warnings)


def test_no_gpus_dir(tmp_path: Any) -> None:
    inv = enumerate_gpus(HostRoot.single(str(tmp_path)), {}, backend="procfs")
    assert inv.gpus == () and inv.driver_version is None
    assert any("no GPUs" in w for w in inv.warnings)


def test_unknown_backend() -> None:
    with pytest.raises(ValueError, match="backend must be one of auto, procfs, nvml"):
        enumerate_gpus(HostRoot(), {}, backend="cuda")


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")


def _mknod(root: HostRoot, path: str, major: int, minor: int, mode: int = 0o444) -> None:
    host_path = root.dev(path)
    os.makedirs(os.path.dirname(host_path), exist_ok=True)
    os.mknod(host_path, mode | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(host_path, mode)


def test_present_capability_nodes_are_checked(root: HostRoot) -> None:
    _need_root()
    gm, cm = gi_minor(3, 1), ci_minor(3, 1, 0)
    _mknod(root, f"/dev/nvidia-caps/nvidia-cap{gm}", CAPS, gm, 0o400)
    _mknod(root, f"/dev/nvidia-caps/nvidia-cap{cm}", CAPS, cm)
    first = enumerate_gpus(root, MAJORS, backend="procfs").gpus[1].mig_devices[0]
    assert first.gi_node.present and first.gi_node.file_mode == 0o400
    assert first.ci_node.present and (first.ci_node.major, first.ci_node.minor) == (CAPS, cm)
    # a node with another device number is refused, as libnvidia-container does
    bad = f"/dev/nvidia-caps/nvidia-cap{ci_minor(3, 2, 0)}"
    _mknod(root, bad, 1, 3)
    with pytest.raises(DiscoveryError) as ei:
        enumerate_gpus(root, MAJORS, backend="procfs")
    assert ei.value.path == root.dev(bad) and ei.value.value == "char 1:3"


def test_mig_management_nodes(root: HostRoot) -> None:
    config, monitor = mig_management_nodes(root, MAJORS)
    assert (config.path, config.major, config.minor, config.file_mode) == (
        "/dev/nvidia-caps/nvidia-cap1",
        CAPS,
        1,
        0o400,
    )
    assert (monitor.path, monitor.minor, monitor.file_mode, monitor.present) == (
        "/dev/nvidia-caps/nvidia-cap2",
        2,
        0o444,
        False,
    )
    assert mig_management_nodes(root, {"nvidia": NVIDIA}) == ()


def test_mig_management_nodes_absent_or_inconsistent(root: HostRoot) -> None:
    os.unlink(root.proc("driver/nvidia/capabilities/mig/config"))
    assert [n.minor for n in mig_management_nodes(root, MAJORS)] == [2]
    _write(root.proc("driver/nvidia/capabilities/mig/monitor"), cap_text(5))
    with pytest.raises(DiscoveryError, match="unusable MIG monitor capability") as ei:
        mig_management_nodes(root, MAJORS)
    assert ei.value.path == root.proc("driver/nvidia/capabilities/mig/monitor")


def test_mig_management_nodes_present(root: HostRoot) -> None:
    _need_root()
    _mknod(root, "/dev/nvidia-caps/nvidia-cap1", CAPS, 1, 0o400)
    config, _monitor = mig_management_nodes(root, MAJORS)
    assert config.present and config.host_path == root.dev("/dev/nvidia-caps/nvidia-cap1")


# -- NVML backend against the double ----------------------------------------------------------


def test_nvml_and_procfs_agree_on_the_same_host(
    host: Host, root: HostRoot, fake_nvml: ModuleType
) -> None:
    fake_nvml.load(host.nvml())
    via_nvml = enumerate_gpus(root, MAJORS, backend="nvml")
    via_proc = enumerate_gpus(root, MAJORS, backend="procfs")
    assert via_nvml.backend == "nvml"
    assert _shared(via_nvml) == _shared(via_proc)
    assert [_mig_keys(g) for g in via_nvml.gpus] == [_mig_keys(g) for g in via_proc.gpus]
    assert via_nvml.driver_version == via_proc.driver_version == DRIVER
    # what only NVML knows
    assert via_nvml.cuda_version == "12.4"
    assert [(g.brand, g.architecture) for g in via_nvml.gpus] == [
        ("geforce", "8.6"),
        ("tesla", "9.0"),
        ("tesla", "8.0"),
        ("nvidia", "8.0"),
    ]
    migs = via_nvml.gpus[1].mig_devices
    assert [(m.gi, m.ci, m.uuid, m.nvml_index) for m in migs] == [
        (1, 0, _mig_uuid(3, 1, 0), 1),
        (1, 1, _mig_uuid(3, 1, 1), 3),
        (2, 0, _mig_uuid(3, 2, 0), 0),
    ]
    assert via_nvml.warnings == ()
    calls = fake_nvml.history()
    assert calls[0] == "nvmlInitWithFlags" and calls[-1] == "nvmlShutdown"
    assert "nvmlSystemGetCudaDriverVersion" not in calls  # the v2 function answered


def test_auto_prefers_nvml(host: Host, root: HostRoot, fake_nvml: ModuleType) -> None:
    fake_nvml.load(host.nvml())
    inv = enumerate_gpus(root, MAJORS)
    assert inv.backend == "nvml" and inv.gpus[0].brand == "geforce"


def test_nvml_init_failure(host: Host, root: HostRoot, fake_nvml: ModuleType) -> None:
    fake_nvml.load(host.nvml(init_error=fake_nvml.NVML_ERROR_DRIVER_NOT_LOADED))
    inv = enumerate_gpus(root, MAJORS, backend="auto")
    assert inv.backend == "procfs" and len(inv.gpus) == 4 and inv.cuda_version is None
    assert (
        inv.warnings[0]
        == "NVML not used (nvmlInit failed: Driver Not Loaded); GPUs read from procfs"
    )
    with pytest.raises(nvml.NvmlInitError) as ei:
        enumerate_gpus(root, MAJORS, backend="nvml")
    assert (ei.value.field, ei.value.value) == ("nvmlInit", 9)
    assert exit_code_for(ei.value) == 6


def test_nvml_not_installed(root: HostRoot, no_nvml: None) -> None:
    inv = enumerate_gpus(root, MAJORS)
    assert inv.backend == "procfs"
    assert not any("NVML" in w for w in inv.warnings)
    with pytest.raises(nvml.NvmlNotInstalled) as ei:
        enumerate_gpus(root, MAJORS, backend="nvml")
    assert ei.value.hint is not None and "ocihook[nvml]" in ei.value.hint


def test_nvml_unsupported_optional_facts_are_none(tmp_path: Any, fake_nvml: ModuleType) -> None:
    host = Host([GpuSpec("0000:07:00.0", 0, 1, brand=None, cc=None)], cuda=None)
    root = host.write(str(tmp_path))
    fake_nvml.load(host.nvml())
    inv = enumerate_gpus(root, MAJORS, backend="nvml")
    (gpu,) = inv.gpus
    assert (gpu.brand, gpu.architecture, gpu.mig_devices, inv.cuda_version) == (
        None,
        None,
        (),
        None,
    )
    assert inv.warnings == ()  # NOT_SUPPORTED is not worth a warning


def test_nvml_cuda_version_v1_fallback(tmp_path: Any, fake_nvml: ModuleType) -> None:
    host = Host([GpuSpec("0000:07:00.0", 0, 1)], cuda=11080)
    root = host.write(str(tmp_path))
    fake_nvml.load(host.nvml(missing=["nvmlSystemGetCudaDriverVersion_v2"]))
    inv = enumerate_gpus(root, MAJORS, backend="nvml")
    assert inv.cuda_version == "11.8" and inv.warnings == ()
    assert "nvmlSystemGetCudaDriverVersion" in fake_nvml.history()


def test_nvml_other_errors_on_optional_facts_warn(tmp_path: Any, fake_nvml: ModuleType) -> None:
    host = Host([GpuSpec("0000:07:00.0", 0, 1)])
    root = host.write(str(tmp_path))
    description = host.nvml()
    description["gpus"][0]["errors"] = {"nvmlDeviceGetBrand": fake_nvml.NVML_ERROR_UNKNOWN}
    fake_nvml.load(description)
    inv = enumerate_gpus(root, MAJORS, backend="nvml")
    assert inv.gpus[0].brand is None and inv.gpus[0].architecture == "8.0"
    assert inv.warnings == (
        "GPU 0 brand unknown: nvmlDeviceGetBrand failed: Unknown Error (NVML error 999)",
    )


def test_nvml_failure_on_essential_fact_falls_back(
    host: Host, root: HostRoot, fake_nvml: ModuleType
) -> None:
    description = host.nvml()
    description["gpus"][2]["errors"] = {
        "nvmlDeviceGetMinorNumber": fake_nvml.NVML_ERROR_GPU_IS_LOST
    }
    fake_nvml.load(description)
    inv = enumerate_gpus(root, MAJORS)
    assert inv.backend == "procfs" and len(inv.gpus) == 4
    assert "nvmlDeviceGetMinorNumber failed: GPU is lost" in inv.warnings[0]
    with pytest.raises(nvml.NvmlError) as ei:
        enumerate_gpus(root, MAJORS, backend="nvml")
    assert (ei.value.field, ei.value.value) == ("nvmlDeviceGetMinorNumber", 15)


def test_nvml_sees_another_machine(host: Host, root: HostRoot, fake_nvml: ModuleType) -> None:
    description = host.nvml()
    description["gpus"][0]["bus_id"] = "00000000:99:00.0"
    fake_nvml.load(description)
    inv = enumerate_gpus(root, MAJORS)
    assert inv.backend == "procfs"
    assert "00000000:99:00.0" in inv.warnings[0]
    with pytest.raises(nvml.NvmlMismatch):
        enumerate_gpus(root, MAJORS, backend="nvml")


def test_nvml_mig_device_without_procfs_capabilities_is_skipped(
    host: Host, root: HostRoot, fake_nvml: ModuleType
) -> None:
    description = host.nvml()
    description["gpus"][1]["mig"]["devices"][6] = {"gi": 5, "ci": 0, "uuid": _mig_uuid(3, 5, 0)}
    fake_nvml.load(description)
    inv = enumerate_gpus(root, MAJORS, backend="nvml")
    assert [(m.gi, m.ci) for m in inv.gpus[1].mig_devices] == [(1, 0), (1, 1), (2, 0)]
    assert len(inv.warnings) == 1 and "gi 5 ci 0 of GPU 1 skipped" in inv.warnings[0]


def test_nvml_mig_disabled_or_pending(host: Host, root: HostRoot, fake_nvml: ModuleType) -> None:
    description = host.nvml()
    description["gpus"][1]["mig"]["current"] = 0  # enabled only after a reset
    fake_nvml.load(description)
    inv = enumerate_gpus(root, MAJORS, backend="nvml")
    assert inv.gpus[1].mig_devices == ()
    assert "nvmlDeviceGetMigDeviceHandleByIndex" not in fake_nvml.history()


def test_nvml_without_caps_major(host: Host, root: HostRoot, fake_nvml: ModuleType) -> None:
    fake_nvml.load(host.nvml())
    inv = enumerate_gpus(root, {"nvidia": NVIDIA}, backend="nvml")
    assert inv.gpus[1].mig_devices == ()
    assert sum("nvidia-caps is not loaded" in w for w in inv.warnings) == 1


def test_nvml_old_pynvml_returning_bytes(host: Host, root: HostRoot, fake_nvml: ModuleType) -> None:
    fake_nvml.load(host.nvml(bytes_strings=True))
    via_nvml = enumerate_gpus(root, MAJORS, backend="nvml")
    assert _shared(via_nvml) == _shared(enumerate_gpus(root, MAJORS, backend="procfs"))
    assert via_nvml.driver_version == DRIVER
    assert via_nvml.gpus[1].mig_devices[0].uuid == _mig_uuid(3, 1, 0)


def test_nvml_on_the_simulated_host(
    sim: simhost.SimulatedHost, sim_root: HostRoot, fake_nvml: ModuleType
) -> None:
    fake_nvml.load(
        {
            "driver_version": sim.driver_version,
            "cuda_version": 12040,
            "gpus": [
                {"uuid": g.uuid, "minor": g.minor, "bus_id": g.bus_id, "name": g.model, "brand": 2}
                for g in sim.gpus
            ],
        }
    )
    with open(sim_root.proc("devices")) as f:
        majors = parse_devices(f.read())
    via_nvml = enumerate_gpus(sim_root, majors)
    via_proc = enumerate_gpus(sim_root, majors, backend="procfs")
    assert via_nvml.backend == "nvml" and _shared(via_nvml) == _shared(via_proc)
    host = discover(sim_root)
    assert [tuple(getattr(g, f) for f in SHARED) for g in host.gpus] == _shared(via_nvml)


def test_brand_names_and_cuda_versions() -> None:
    assert nvml.BRAND_NAMES[2] == "tesla" and nvml.BRAND_NAMES[5] == "geforce"
    assert nvml.BRAND_NAMES[14] == "nvidia" and nvml.BRAND_NAMES[0] == "unknown"
    assert nvml.cuda_version_string(12020) == "12.2"
    assert nvml.cuda_version_string(11080) == "11.8"
    assert nvml.cuda_version_string(12090) == "12.9"


def test_unknown_brand_code(tmp_path: Any, fake_nvml: ModuleType) -> None:
    host = Host([GpuSpec("0000:07:00.0", 0, 1, brand=99)])
    root = host.write(str(tmp_path))
    fake_nvml.load(host.nvml())
    assert enumerate_gpus(root, MAJORS, backend="nvml").gpus[0].brand == "unknown"


def test_gpus_module_imports_stay_cheap(root: HostRoot) -> None:
    # what the interpreter itself loads (an editable install's finder imports re) is not ours
    baseline = _modules_after("pass")
    loaded = (
        _modules_after(
            "from ocihook.discovery.nvidia import enumerate_gpus\n"
            "from ocihook.core.hostroot import HostRoot\n"
            f"enumerate_gpus(HostRoot.single({root.dev_root!r}), {{}}, backend='procfs')"
        )
        - baseline
    )
    heavy = {"pynvml", "ctypes", "typing", "re", "dataclasses", "ocihook.discovery.nvml"}
    assert "ocihook.discovery.gpus" in loaded and not (heavy & loaded), heavy & loaded


# -- parsers under hypothesis -----------------------------------------------------------------

# characters str.splitlines() treats as line ends
_LINE_ENDS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_line_text = st.text(st.characters(exclude_characters=_LINE_ENDS, codec="utf-8"))


@given(st.text())
def test_parse_mig_minors_never_raises(text: str) -> None:
    minors, warnings = parse_mig_minors(text, path="/p")
    assert all(isinstance(v, int) and 0 <= v < 1 << 20 for v in minors.values())
    assert len(warnings) <= 2


_cap_names = st.one_of(
    st.sampled_from(["config", "monitor"]),
    st.builds(lambda g, i: f"gpu{g}/gi{i}/access", st.integers(0, 31), st.integers(0, 14)),
    st.builds(
        lambda g, i, c: f"gpu{g}/gi{i}/ci{c}/access",
        st.integers(0, 31),
        st.integers(0, 14),
        st.integers(0, 7),
    ),
)


@given(
    st.dictionaries(_cap_names, st.integers(0, (1 << 20) - 1)), st.sampled_from([" ", "\t", "  "])
)
def test_parse_mig_minors_round_trip(table: dict[str, int], sep: str) -> None:
    text = "".join(f"{name}{sep}{minor}\n" for name, minor in table.items())
    assert parse_mig_minors(text) == (table, [])


def test_parse_mig_minors_examples() -> None:
    minors, warnings = parse_mig_minors(mig_minors_text(1))
    assert minors["config"] == 1 and minors["monitor"] == 2
    assert minors["gpu0/gi1/access"] == 12 and minors["gpu0/gi1/ci0/access"] == 13
    assert warnings == []


@given(st.text())
def test_parse_gpu_information_never_raises(text: str) -> None:
    info = parse_gpu_information(text)
    assert all(k == k.strip() and k and ":" not in k for k in info)


_keys = _line_text.map(str.strip).filter(lambda k: bool(k) and ":" not in k)
_values = _line_text.map(str.strip)


@given(st.dictionaries(_keys, _values), st.sampled_from([" ", "\t", " \t\t "]))
def test_parse_gpu_information_round_trip(info: dict[str, str], sep: str) -> None:
    text = "".join(f"{k}:{sep}{v}\n" for k, v in info.items())
    assert parse_gpu_information(text) == info


@given(st.text())
def test_parse_capability_file_raises_only_discovery_errors(text: str) -> None:
    try:
        minor, mode = parse_capability_file(text)
    except DiscoveryError as e:
        assert e.field in ("DeviceFileMinor", "DeviceFileMode")
    else:
        assert 0 <= minor < 1 << 20 and 0 <= mode <= 0o7777


@given(st.integers(0, (1 << 20) - 1), st.integers(0, 0o7777), st.booleans())
def test_parse_capability_file_round_trip(minor: int, mode: int, with_mode: bool) -> None:
    text = cap_text(minor, mode) if with_mode else f"DeviceFileMinor: {minor}\n"
    assert parse_capability_file(text) == (minor, mode if with_mode else 0o444)


@given(st.text(max_size=24))
@settings(max_examples=300)
def test_canonical_bus_id_raises_only_discovery_errors(raw: str) -> None:
    try:
        bus_id, key = canonical_bus_id(raw, path="p")
    except DiscoveryError:
        return
    assert canonical_bus_id(bus_id, path="p") == (bus_id, key)
