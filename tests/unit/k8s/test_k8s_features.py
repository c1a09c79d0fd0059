"""GPU feature discovery's node labels in ``ocihook k8s features``
(:func:`ocihook.k8s.features.gfd_labels`): driver and CUDA versions, compute capability
and family, machine type, MIG capability, sharing strategy, on the simulated host (procfs
and the ``pynvml`` double) and on inventories made by hand; a label that cannot be known
is left out with one warning line naming it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc")

from support import load_pynvml_double, run_cli, sim_nvml

from ocihook.core.hostroot import HostRoot
from ocihook.discovery.records import Gpu
from ocihook.k8s.features import gfd_labels
from ocihook.k8s.inventory import Inventory, K8sDevice, build_inventory
from ocihook.sim import host as simhost

MACHINE = "ProLiant XL675d Gen10 Plus"


@pytest.fixture
def sim(tmp_path: Path) -> simhost.SimulatedHost:
    """The simulated host with a DMI product name."""
    host = simhost.build(str(tmp_path / "host"))
    dmi = Path(host.root) / "sys/class/dmi/id"
    dmi.mkdir(parents=True, exist_ok=True)
    (dmi / "product_name").write_text(MACHINE + "\n")
    return host


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch, sim: simhost.SimulatedHost) -> Any:
    module = load_pynvml_double()
    module.load(sim_nvml(sim))
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def node_labels(labels: dict[str, str]) -> dict[str, str]:
    keep = ("nvidia.com/cuda.", "nvidia.com/gpu.machine", "nvidia.com/mig.capable")
    return {k: v for k, v in sorted(labels.items()) if k.startswith(keep)}


def test_node_labels_procfs(sim: simhost.SimulatedHost) -> None:
    """procfs: the driver version of /proc/driver/nvidia/version, the CUDA version of its
    branch, the machine; MIG capable since a GPU has MIG devices; no compute labels."""
    labels, reasons = gfd_labels(build_inventory(HostRoot.single(sim.root)))
    major, minor, rev = sim.driver_version.split(".")
    assert node_labels(labels) == {
        "nvidia.com/cuda.driver-version.full": sim.driver_version,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": rev,
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": rev,
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "4",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gpu.machine": "ProLiant-XL675d-Gen10-Plus",
        "nvidia.com/mig.capable": "true",
    }
    assert "nvidia.com/gpu.family" not in labels
    assert [r for r in reasons if "compute" in r] == [
        "nvidia.com/gpu.compute.major, .compute.minor and .family left out: the compute "
        "capability is unknown (the procfs GPU backend cannot tell it; use --gpu-backend nvml)"
    ]


def test_node_labels_nvml(sim: simhost.SimulatedHost, nvml: Any) -> None:
    """NVML: the compute capability and family of GPU 0, the CUDA version NVML gives."""
    nvml._description["cuda_version"] = 12080
    labels, reasons = gfd_labels(build_inventory(HostRoot.single(sim.root), gpu_backend="nvml"))
    assert reasons == ()
    assert labels["nvidia.com/gpu.compute.major"] == "8"
    assert labels["nvidia.com/gpu.compute.minor"] == "0"
    assert labels["nvidia.com/gpu.family"] == "ampere"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.8"
    assert labels["nvidia.com/cuda.runtime.minor"] == "8"
    assert labels["nvidia.com/mig.capable"] == "true"


def test_mig_capable_false_and_unknown(
    sim: simhost.SimulatedHost, nvml: Any, tmp_path: Path
) -> None:
    """NVML answers NOT_SUPPORTED for every GPU's MIG mode: ``false``; procfs on a host
    without MIG devices cannot tell, and says so."""
    for gpu in nvml._description["gpus"]:
        del gpu["mig"]
    labels, _ = gfd_labels(build_inventory(HostRoot.single(sim.root), gpu_backend="nvml"))
    assert labels["nvidia.com/mig.capable"] == "false"
    plain = simhost.build(str(tmp_path / "plain"), gpus=1)  # MIG devices are on GPU 1
    labels, reasons = gfd_labels(build_inventory(HostRoot.single(plain.root)))
    assert "nvidia.com/mig.capable" not in labels
    assert (
        "nvidia.com/mig.capable left out: the procfs GPU backend cannot tell whether a GPU "
        "without MIG devices supports MIG (use --gpu-backend nvml)"
    ) in reasons


def inventory(
    architecture: str | None, driver: str = "580.65.06", cuda: str | None = "13.0"
) -> Inventory:
    """One whole NVIDIA B200 (NVML) of compute capability ``architecture``."""
    gpu = Gpu(
        index=0, minor=0, uuid="GPU-00000000-0000-0000-0000-000000000000",
        bus_id="00000000:07:00.0", model="NVIDIA B200", proc_dir="/proc/driver/nvidia/gpus/x",
        architecture=architecture, mig_capable=True, memory_mib=183359,
    )  # fmt: skip
    device = K8sDevice(
        id=gpu.uuid, resource="nvidia.com/gpu", real_id=gpu.uuid, cdi_name="k=0",
        visible="0", vendor="nvidia", bus_id="0000:07:00.0", gpu_uuid=gpu.uuid,
        model=gpu.model, memory_mib=183359,
    )  # fmt: skip
    return Inventory(
        devices={"nvidia.com/gpu": (device,)}, driver_version={"nvidia": driver},
        cuda_version=cuda, nvidia_gpus=(gpu,), gpu_backend="nvml", machine="DGX B200",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("capability", "family"),
    [
        ("3.7", "kepler"), ("5.2", "maxwell"), ("6.0", "pascal"), ("7.0", "volta"),
        ("7.5", "turing"), ("8.6", "ampere"), ("8.9", "ada-lovelace"), ("9.0", "hopper"),
        ("10.0", "blackwell"), ("12.0", "blackwell"),
    ],
)  # fmt: skip
def test_family(capability: str, family: str) -> None:
    labels, reasons = gfd_labels(inventory(capability))
    assert labels["nvidia.com/gpu.family"] == family
    assert labels["nvidia.com/gpu.compute.major"] == capability.split(".")[0]
    assert reasons == ()


def test_family_unknown_and_odd_versions() -> None:
    """A compute capability GFD has no family for, a two-part driver version (empty
    revision, as GFD writes it), a malformed one and an unknown CUDA version."""
    labels, reasons = gfd_labels(inventory("11.0", driver="590.44", cuda=None))
    assert labels["nvidia.com/gpu.compute.major"] == "11"
    assert "nvidia.com/gpu.family" not in labels
    assert labels["nvidia.com/cuda.driver.rev"] == ""
    assert labels["nvidia.com/cuda.driver-version.revision"] == ""
    assert labels["nvidia.com/cuda.driver-version.full"] == "590.44"
    assert labels["nvidia.com/gpu.machine"] == "DGX-B200"
    assert not any(k.startswith("nvidia.com/cuda.runtime") for k in labels)
    assert reasons == (
        "nvidia.com/gpu.family left out: compute capability 11.0 has no family name",
        "nvidia.com/cuda.runtime.* and nvidia.com/cuda.runtime-version.* left out: the CUDA "
        "version the driver supports is unknown (None)",
    )
    labels, reasons = gfd_labels(inventory("9.0", driver="580"))
    assert not any(k.startswith("nvidia.com/cuda.driver") for k in labels)
    assert reasons == (
        "nvidia.com/cuda.driver.* and nvidia.com/cuda.driver-version.* left out: driver "
        "version '580' is not X.Y[.Z]",
    )


def test_cli_features_warns_per_label(sim: simhost.SimulatedHost) -> None:
    (Path(sim.root) / "sys/class/dmi/id/product_name").unlink()
    proc = run_cli(
        "k8s", "features", "--driver-root", sim.root, "--dev-root", sim.root,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "nvidia.com/cuda.driver-version.major=550\n" in proc.stdout
    assert "nvidia.com/gpu.machine" not in proc.stdout
    assert (
        "ocihook: warning: nvidia.com/gpu.machine left out: sysfs class/dmi/id/product_name "
        "is missing or empty\n"
    ) in proc.stderr


def test_features_needs_no_grpc(sim: Any) -> None:
    """``k8s features`` only prints: it runs where the k8s extra (grpcio) is missing."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['grpc'] = None; sys.modules['google.protobuf'] = None\n"
        "from ocihook._main import main\n"
        f"sys.exit(main(['k8s', 'features', '--driver-root', {sim.root!r}, "
        f"'--dev-root', {sim.root!r}]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "ocihook.io/" in out.stdout


def _ocihook_labels(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line.startswith("ocihook.io/"))


@pytest.mark.parametrize("replicas", [2, 3])
def test_replicas_keep_the_vendor_labels(tmp_path: Path, replicas: int) -> None:
    """Time-slicing replicas (``--replicas`` above 1) change only the advertised counts:
    ``ocihook.io/<vendor>.present`` and ``.devices`` (real devices, each once) are those of
    the unshared node, for both vendors of a mixed NVIDIA and AMD host. (They were left
    out: a replica's id is not its real id, and only devices whose id was their real id
    were counted.)"""
    from ocihook.k8s.features import nfd_features
    from ocihook.sim import vendors

    mixed = vendors.build_mixed(str(tmp_path / "mixed"))
    root = HostRoot.single(mixed.root)
    unshared = _ocihook_labels(nfd_features(build_inventory(root), reasons=[]))
    shared = _ocihook_labels(nfd_features(build_inventory(root, replicas=replicas), reasons=[]))
    assert unshared["ocihook.io/nvidia.present"] == unshared["ocihook.io/amd.present"] == "true"
    assert unshared["ocihook.io/nvidia.devices"] == unshared["ocihook.io/amd.devices"] == "2"
    assert shared == {
        **unshared,
        "ocihook.io/nvidia.com.gpu.count": str(2 * replicas),
        "ocihook.io/amd.com.gpu.count": str(2 * replicas),
    }


def test_time_slicing_renamed_keeps_the_vendor_labels(sim: simhost.SimulatedHost) -> None:
    """NVIDIA's time-slicing of one resource, renamed (``nvidia.com/gpu.shared``): the
    vendor labels count the 9 real devices (7 GPUs, 2 MIG devices) once each."""
    from ocihook.k8s.features import nfd_features
    from ocihook.k8s.inventory import Sharing

    inv = build_inventory(
        HostRoot.single(sim.root),
        mig_strategy="mixed",
        time_slicing={"nvidia.com/gpu": Sharing(4, "nvidia.com/gpu.shared")},
    )
    labels = _ocihook_labels(nfd_features(inv, reasons=[]))
    assert labels["ocihook.io/nvidia.present"] == "true"
    assert labels["ocihook.io/nvidia.devices"] == "9"
    assert labels["ocihook.io/nvidia.com.gpu.shared.count"] == "28"
    assert labels["ocihook.io/nvidia.com.mig.count"] == "2"


def test_cli_features_with_replicas(sim: simhost.SimulatedHost) -> None:
    proc = run_cli(
        "k8s", "features", "--driver-root", sim.root, "--dev-root", sim.root, "--replicas", "2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "ocihook.io/nvidia.present=true" in lines
    assert "ocihook.io/nvidia.devices=8" in lines
    assert "ocihook.io/nvidia.com.gpu.count=16" in lines
    assert "nvidia.com/gpu.replicas=2" in lines
