"""Shared helpers of the test suite: plain functions, classes and constants, by topic.

Test modules import them from here (``from support import ...``) and never import one
another; fixtures live in ``conftest.py``, which builds the engine fixtures from the
generators here (:func:`guard_host`, :func:`start_podman`, :func:`start_containerd`).
``tests/`` is on ``sys.path`` through ``pythonpath`` in pyproject.toml's
``[tool.pytest.ini_options]``. This package re-exports every public name of its modules:

- :mod:`support.paths`: where things are (:data:`REPO`, :data:`TESTS`, :data:`DOUBLES`,
  :data:`WRAPPER`, :func:`realistic_dir`) and skipping (:func:`need_root_and`);
- :mod:`support.cli`: the ``ocihook`` command in this process (:func:`run_cli`) or as a
  process (:func:`run_cli_process`), ``ocihook edit`` (:func:`edit_cli`,
  :func:`edit_with_cdi`), :func:`modules_after`, a bare virtual environment (:func:`bare_venv`);
- :mod:`support.bundles`: bundles (:func:`make_bundle`), the hooks registered in them and
  what their rootfs holds (:func:`rootfs_tree`);
- :mod:`support.cdi`: CDI specs to start from;
- :mod:`support.nvml`: the ``pynvml`` double;
- :mod:`support.cudanote`: driver ``libcuda`` files with a CUDA note;
- :mod:`support.containers`: what a container shows, running runc or crun;
- :mod:`support.processes`: this host's processes and mounts;
- :mod:`support.engines`: podman and containerd confined to temporary directories;
- :mod:`support.rootless`: an unprivileged user of the tests' own;
- :mod:`support.k8s`: the kubelet's side of the device plugin API, containerd with CRI;
- :mod:`support.fuzz`: the fuzz campaign's settings, records and input strategies.
- :mod:`support.debian` (imported as such): the Debian 12 tree of the packaging tests
  (:func:`~support.debian.base_tarball`).
"""

from support.bundles import (
    FAKE_DRIVER_PROC,
    busybox_bundle,
    config_bytes,
    fake_proc_hook,
    fill_packaged,
    installed_start_path_dirs,
    make_bundle,
    make_executable,
    packaged_hook,
    register_hook,
    register_stage_hook,
    rootfs_tree,
    stage_hook,
    with_mknod_cap,
)
from support.cdi import CDI_GPU_SPEC, GOOD_CDI_YAML, host_cdi_spec
from support.cli import (
    OCIHOOK,
    bare_venv,
    edit_cli,
    edit_with_cdi,
    modules_after,
    run_cli,
    run_cli_process,
)
from support.containers import (
    ENGINE_SCRIPT,
    RUNC_SCRIPT,
    check_gpu0,
    check_no_gpu,
    check_runc_view,
    run_runtime,
    tagged,
)
from support.cudanote import CUDA_NOTE_SECTION, cuda_note, gcc_libcuda, put_libcuda
from support.engines import (
    CONTAINERD_CONFIG,
    PRIVATE_RUN,
    SCRATCH,
    WATCHED,
    Containerd,
    Podman,
    busybox_rootfs,
    guard_host,
    start_containerd,
    start_podman,
    stop_containerd,
)
from support.fuzz import (
    FUZZ_CORPUS,
    FUZZ_COUNTS,
    FUZZ_DEEP,
    Hang,
    fuzz_grafted,
    fuzz_json_bytes,
    fuzz_mutated,
    fuzz_record,
    fuzz_settings,
    time_limit,
)
from support.k8s import (
    BUSYBOX_IMAGE,
    CONTAINERD_SUITES,
    CRI_CONTAINERD_CONFIG,
    CRI_PROTO,
    IMAGE_DIRS,
    PAUSE_IMAGE,
    CriContainerd,
    FakeKubelet,
    busybox_oci_archive,
    containerd_from_deb,
    cri_client,
    cri_messages,
    daemonset_container,
    pod_binds,
    run_cri_pod,
    start_cri_containerd,
    start_in_own_mounts,
)
from support.nvml import load_pynvml_double, sim_nvml
from support.paths import DOUBLES, REPO, TESTS, WRAPPER, need_root_and, realistic_dir
from support.processes import mounts_under, pids_with_arg, wait_gone
from support.rootless import RootlessUser, start_rootless_user

__all__ = [
    "BUSYBOX_IMAGE",
    "CDI_GPU_SPEC",
    "CONTAINERD_CONFIG",
    "CONTAINERD_SUITES",
    "CRI_CONTAINERD_CONFIG",
    "CRI_PROTO",
    "CUDA_NOTE_SECTION",
    "DOUBLES",
    "ENGINE_SCRIPT",
    "FAKE_DRIVER_PROC",
    "FUZZ_CORPUS",
    "FUZZ_COUNTS",
    "FUZZ_DEEP",
    "GOOD_CDI_YAML",
    "IMAGE_DIRS",
    "OCIHOOK",
    "PAUSE_IMAGE",
    "PRIVATE_RUN",
    "REPO",
    "RUNC_SCRIPT",
    "SCRATCH",
    "TESTS",
    "WATCHED",
    "WRAPPER",
    "Containerd",
    "CriContainerd",
    "FakeKubelet",
    "Hang",
    "Podman",
    "RootlessUser",
    "bare_venv",
    "busybox_bundle",
    "busybox_oci_archive",
    "busybox_rootfs",
    "check_gpu0",
    "check_no_gpu",
    "check_runc_view",
    "config_bytes",
    "containerd_from_deb",
    "cri_client",
    "cri_messages",
    "cuda_note",
    "daemonset_container",
    "edit_cli",
    "edit_with_cdi",
    "fake_proc_hook",
    "fill_packaged",
    "fuzz_grafted",
    "fuzz_json_bytes",
    "fuzz_mutated",
    "fuzz_record",
    "fuzz_settings",
    "gcc_libcuda",
    "guard_host",
    "host_cdi_spec",
    "installed_start_path_dirs",
    "load_pynvml_double",
    "make_bundle",
    "make_executable",
    "modules_after",
    "mounts_under",
    "need_root_and",
    "packaged_hook",
    "pids_with_arg",
    "pod_binds",
    "put_libcuda",
    "realistic_dir",
    "register_hook",
    "register_stage_hook",
    "rootfs_tree",
    "run_cli",
    "run_cli_process",
    "run_cri_pod",
    "run_runtime",
    "sim_nvml",
    "stage_hook",
    "start_containerd",
    "start_cri_containerd",
    "start_in_own_mounts",
    "start_podman",
    "start_rootless_user",
    "stop_containerd",
    "tagged",
    "time_limit",
    "wait_gone",
    "with_mknod_cap",
]
