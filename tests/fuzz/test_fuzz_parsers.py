"""The fuzz campaign, in-process part: every parser and entry point that reads untrusted
input, fed bytes that hypothesis makes from valid seeds (byte flips, insertions, cuts,
splices) and from structure-aware grafts (a random JSON/TOML/YAML value put at a random
place of a valid document).

Each target is a function of ``bytes`` that may return anything or raise only the
documented :class:`~ocihook.core.errors.OcihookError` subclass(es) of that entry point;
any other exception is a crash, and an input that takes longer than :data:`LIMIT` seconds
is a hang (:func:`support.time_limit`). Runs are seeded (derandomised); the CI budget is
:data:`EXAMPLES` inputs per target; ``OCIHOOK_FUZZ_DEEP=1`` multiplies it (see
:func:`support.fuzz_settings`). ``OCIHOOK_FUZZ_CRASHES=<dir>`` keeps failing inputs.

Every input kept in ``tests/fuzz/corpus/<target>/`` (found crashes, and seeds) is
replayed by :func:`test_corpus_replays`; ``<name>.xfail`` next to an input holds the
reason of a known, not yet fixed crash (strict: the test fails once it is fixed, so the
marker is removed with the fix).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import (
    CDI_GPU_SPEC,
    FUZZ_CORPUS,
    GOOD_CDI_YAML,
    REPO,
    Hang,
    fuzz_grafted,
    fuzz_json_bytes,
    fuzz_mutated,
    fuzz_record,
    fuzz_settings,
    time_limit,
)

from ocihook.core.errors import (
    CdiError,
    ConfigError,
    DiscoveryError,
    EngineConfigError,
    LdCacheError,
    OcihookError,
    RequestError,
    SpecError,
    StateError,
)
from ocihook.core.hostroot import HostRoot
from ocihook.linux import ldcache
from ocihook.sim import host as simhost
from ocihook.sim.elfwrite import make_executable, make_shared_object

#: Inputs per target in the default (CI) run.
EXAMPLES = 400
#: Seconds one input may take before it counts as a hang.
LIMIT = 10.0

# --- seeds ----------------------------------------------------------------------------------


def _ldcache_seeds() -> list[bytes]:
    E = ldcache.CacheEntry
    entries = [
        E("libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0x0303, 0x030200),
        E("libcuda.so.1", "/usr/lib/i386-linux-gnu/libcuda.so.1", 0x0003),
        E(
            "libc.so.6",
            "/lib/x86_64-linux-gnu/glibc-hwcaps/x86-64-v3/libc.so.6",
            0x0303,
            hwcaps_subdir="x86-64-v3",
        ),
        E("libm.so.6", "/lib/tls/libm.so.6", 0x0303, 0, 1 << 63),
    ]
    seeds = [ldcache.build(entries), ldcache.build(entries, byteorder="big"), ldcache.build([])]
    # the old format: header, 12-byte entries, strings
    seeds.append(b"ld.so-1.7.0\0" + (1).to_bytes(4, "little") + bytes(12) + b"a\0b\0")
    if os.path.exists("/etc/ld.so.cache"):
        with open("/etc/ld.so.cache", "rb") as f:
            seeds.append(f.read(64 * 1024))
    return seeds


def _elf_seeds() -> list[bytes]:
    return [
        make_shared_object("libcuda.so.1", needed=("libc.so.6",), abi_tag=(2, 6, 32)),
        make_shared_object("libx.so.1", elf_class=32, machine="i386"),
        make_shared_object("liby.so.1", machine="aarch64", endian="big"),
        make_shared_object(None, note_sections=((".note.cuda", b"\0" * 16),)),
        make_executable(),
    ]


def _config_doc() -> dict[str, Any]:
    from ocihook.sim.demo import default_config

    doc = default_config(
        ["sh"],
        [
            "NVIDIA_VISIBLE_DEVICES=0,GPU-3c4a4330-83d3-6797-364b-dad1344e8807,1:0",
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility,compat32",
            "NVIDIA_REQUIRE_CUDA=cuda>=11.0 brand=tesla,driver>=450",
            "AMD_VISIBLE_DEVICES=0",
            "INTEL_VISIBLE_DEVICES=0000:00:02.0",
            "NVIDIA_MIG_CONFIG_DEVICES=all",
            "NVIDIA_IMEX_CHANNELS=0,1",
            "NVIDIA_GDS=enabled",
        ],
    )
    doc["annotations"] = {"cdi.k8s.io/plugin_gpu0": "nvidia.com/gpu=0"}
    return doc


def _state_doc() -> dict[str, Any]:
    return {
        "ociVersion": "1.0.2",
        "id": "ctr",
        "status": "creating",
        "pid": 4242,
        "bundle": "/run/containers/ctr",
        "annotations": {"a": "b"},
    }


_CDI_YAML_ALIASES = (
    b"cdiVersion: 0.6.0\nkind: nvidia.com/gpu\n"
    b"x: &a [A=1, A=1, A=1]\ny: &b [*a, *a, *a]\n"
    b"devices:\n- name: '0'\n  containerEdits:\n    env: *a\n"
)

with open(os.path.join(REPO, "packaging", "config.toml.example"), "rb") as _f:
    _TOML_EXAMPLE = _f.read()

_TOML_SEEDS = [
    _TOML_EXAMPLE,
    b'driver-root = "/"\nsupported-driver-capabilities = "compute,utility"\n'
    b"accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
    b'[nvidia-container-runtime]\nmode = "cdi"\nruntimes = ["runc"]\n',
]

_DOCKER = b'{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "features": {}}\n'
_CONTAINERD = (
    b'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
    b'  default_runtime_name = "runc"\n'
    b'  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
    b'    runtime_type = "io.containerd.runc.v2"\n'
    b'    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
    b"      SystemdCgroup = true\n"
)
_CRIO = b'[crio.runtime]\ndefault_runtime = "runc"\n[crio.runtime.runtimes.runc]\n'


def _toml_dumps(doc: Any) -> bytes:
    import tomlkit

    try:
        return tomlkit.dumps(doc).encode("utf-8", "surrogatepass")
    except Exception:  # not representable in TOML (None, mixed keys): the plain document
        return b""


def toml_bytes(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    import tomllib

    docs = [tomllib.loads(s.decode()) for s in seeds]
    return st.one_of(
        fuzz_mutated(seeds),
        st.sampled_from(docs).flatmap(fuzz_grafted).map(_toml_dumps),
    )


# --- targets --------------------------------------------------------------------------------


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("fuzz", os.MFD_CLOEXEC)
    os.write(fd, data)
    return fd


def target_ldcache(data: bytes) -> None:
    try:
        entries = ldcache.parse(data, path="/etc/ld.so.cache")
    except LdCacheError:
        return
    assert all(isinstance(e, ldcache.CacheEntry) for e in entries)
    # what the hook does with an image's cache (appliers/live/libraries.py): drop the
    # entries the writer cannot represent, merge ours, write it again
    kept = [e for e in entries if not (e.hwcap >> 62 & 1 and e.hwcaps_subdir is None)]
    added = [ldcache.CacheEntry("libcuda.so.1", "/usr/lib64/libcuda.so.1", 0x0303)]
    again = ldcache.parse(ldcache.build(ldcache.merge(kept, added)))
    assert len(again) == len(ldcache.merge(kept, added))


def target_elf(data: bytes) -> None:
    from ocihook.linux import elfscan
    from ocihook.linux.elf import read_elf_info_fd

    fd = _memfd(data)
    try:
        for scan in (
            elfscan.identify,
            elfscan.abi_tag,
            elfscan.dynamic_names,
            elfscan.cuda_compat_note,
        ):
            os.lseek(fd, 0, 0)
            scan(fd)  # documented: a value or None, never an exception
        elfscan.parse_cuda_compat_note(data)
        with contextlib.suppress(DiscoveryError):
            read_elf_info_fd(fd, path="/usr/lib/libfuzz.so")
    finally:
        os.close(fd)


def target_config_json(data: bytes) -> None:
    from ocihook.cdi.names import parse_annotations
    from ocihook.oci.bundle import load_bundle
    from ocihook.request.drm import drm_requests_from_spec
    from ocihook.request.nvidia import request_from_spec

    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "wb") as f:
            f.write(data)
        try:
            bundle = load_bundle(d)
        except SpecError:
            return
    config = bundle.config
    for read in (request_from_spec, drm_requests_from_spec):
        with contextlib.suppress(SpecError, RequestError):
            read(config, path="config.json")
    annotations = config.get("annotations")
    if isinstance(annotations, dict):
        with contextlib.suppress(CdiError):
            parse_annotations(annotations)


def target_state(data: bytes) -> None:
    """The hook's stdin: the state, then the bundle it names (a missing one is a
    SpecError, as the hook reports it)."""
    from ocihook.oci.bundle import load_bundle, parse_state

    try:
        state = parse_state(data)
    except StateError:
        return
    with contextlib.suppress(SpecError):
        load_bundle(state.bundle)


def _cdi(data: bytes, name: str) -> None:
    from ocihook.cdi.spec import load_spec, minimum_version

    try:
        spec = load_spec(data, path=f"/etc/cdi/{name}")
    except CdiError:
        return
    minimum_version(spec)


def target_cdi_json(data: bytes) -> None:
    _cdi(data, "gpu.json")


def target_cdi_yaml(data: bytes) -> None:
    _cdi(data, "gpu.yaml")


def target_config_toml(data: bytes) -> None:
    from ocihook.config.load import parse_config_bytes
    from ocihook.config.validate import config_from_dict

    try:
        doc = parse_config_bytes(data, path="/etc/ocihook/config.toml")
        config_from_dict(doc, source="/etc/ocihook/config.toml")
    except ConfigError:
        pass


_HOST: Any = None


def _sim_host() -> Any:
    """The simulated host's discovery result, made once (a module-level cache: hypothesis
    tests take no function-scoped fixtures)."""
    global _HOST
    if _HOST is None:
        from ocihook.discovery.nvidia import discover

        root = tempfile.mkdtemp(prefix="ocihook-fuzz-sim-")
        _HOST = discover(HostRoot.single(simhost.build(root).root))
    return _HOST


def target_env(data: bytes) -> None:
    """Environment values: NUL-separated ``NAME=value`` words (as the kernel passes them),
    the request read from them, the GPUs selected and the plan made on the simulated host."""
    from ocihook.plan.build import ContainerLayout, make_plan
    from ocihook.request.drm import drm_requests_from_spec
    from ocihook.request.nvidia import request_from_spec

    text = data.decode("utf-8", "surrogateescape")
    env = [w for w in text.split("\0") if w]
    config = {"process": {"env": env, "capabilities": {"bounding": ["CAP_SYS_ADMIN"]}}}
    with contextlib.suppress(SpecError, RequestError):
        drm_requests_from_spec(config)
    try:
        request = request_from_spec(config)
        make_plan(_sim_host(), request, ContainerLayout())
    except (SpecError, RequestError):
        pass


def target_runtime_argv(data: bytes) -> None:
    from ocihook.commands.runtime import parse_args

    argv = data.decode("utf-8", "surrogateescape").split("\0")
    inv = parse_args(argv)  # documented: never raises, never changes argv
    for value in (inv.bundle, inv.config, inv.log):
        assert value is None or any(value in a for a in argv)
    assert inv.command is None or inv.command in argv


def _engine(configure: Callable[..., Any], name: str, data: bytes) -> None:
    flags = data[-1] if data else 0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, name)
        with open(path, "wb") as f:
            f.write(data)
        with contextlib.suppress(EngineConfigError):
            configure(
                data,
                path=path,
                runtime_path="/usr/local/bin/ocihook-runtime",
                set_as_default=bool(flags & 1),
                cdi=bool(flags & 2),
            )


def target_engine_docker(data: bytes) -> None:
    from ocihook.engines import configure_docker

    _engine(configure_docker, "daemon.json", data)


def target_engine_containerd(data: bytes) -> None:
    from ocihook.engines import configure_containerd

    _engine(configure_containerd, "config.toml", data)


def target_engine_crio(data: bytes) -> None:
    from ocihook.engines import configure_crio

    _engine(configure_crio, "99-ocihook.conf", data)


#: name -> (the target, its input strategy)
TARGETS: dict[str, tuple[Callable[[bytes], None], Callable[[], st.SearchStrategy[bytes]]]] = {
    "ldcache": (target_ldcache, lambda: fuzz_mutated(_ldcache_seeds())),
    "elf": (target_elf, lambda: fuzz_mutated(_elf_seeds())),
    "config_json": (target_config_json, lambda: fuzz_json_bytes(_config_doc())),
    "state_json": (target_state, lambda: fuzz_json_bytes(_state_doc())),
    "cdi_json": (target_cdi_json, lambda: fuzz_json_bytes(CDI_GPU_SPEC)),
    "cdi_yaml": (
        target_cdi_yaml,
        lambda: st.one_of(
            fuzz_mutated([GOOD_CDI_YAML.encode(), _CDI_YAML_ALIASES]),
            fuzz_grafted(CDI_GPU_SPEC).map(_yaml_dumps),
        ),
    ),
    "config_toml": (target_config_toml, lambda: toml_bytes(_TOML_SEEDS)),
    "env": (
        target_env,
        lambda: st.one_of(
            fuzz_mutated(["\0".join(_config_doc()["process"]["env"]).encode()]),
            st.lists(
                st.tuples(
                    st.sampled_from(
                        [
                            "NVIDIA_VISIBLE_DEVICES",
                            "NVIDIA_DRIVER_CAPABILITIES",
                            "NVIDIA_REQUIRE_CUDA",
                            "NVIDIA_MIG_CONFIG_DEVICES",
                            "NVIDIA_IMEX_CHANNELS",
                            "AMD_VISIBLE_DEVICES",
                            "INTEL_VISIBLE_DEVICES",
                            "NVIDIA_DISABLE_REQUIRE",
                        ]
                    ),
                    st.text(
                        alphabet=st.sampled_from("0123456789abcdefxzGPU-MIG:.,/= all\u0663"),
                        max_size=40,
                    ),
                ),
                max_size=5,
            ).map(lambda kv: "\0".join(f"{k}={v}" for k, v in kv).encode()),
        ),
    ),
    "runtime_argv": (
        target_runtime_argv,
        lambda: st.lists(
            st.one_of(
                st.sampled_from(
                    ["create", "run", "--bundle", "-b", "--log", "--root", "--", "-", "=", "x"]
                ),
                st.text(max_size=12),
            ),
            max_size=10,
        ).map(lambda words: "\0".join(words).encode("utf-8", "surrogateescape")),
    ),
    "engine_docker": (target_engine_docker, lambda: fuzz_json_bytes(json.loads(_DOCKER))),
    "engine_containerd": (target_engine_containerd, lambda: toml_bytes([_CONTAINERD])),
    "engine_crio": (target_engine_crio, lambda: toml_bytes([_CRIO])),
}


def _yaml_dumps(doc: Any) -> bytes:
    import yaml

    try:
        return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")
    except Exception:  # a lone surrogate yaml refuses: the document without it
        return b""


def check(target: str, data: bytes) -> None:
    """Run ``target`` on ``data``: documented errors only, within :data:`LIMIT`."""
    run = TARGETS[target][0]
    try:
        with time_limit(LIMIT):
            run(data)
    except (Hang, AssertionError) as err:
        fuzz_record(target, data, err)
        raise
    except OcihookError as err:  # an error class the entry point does not document
        fuzz_record(target, data, err)
        raise AssertionError(f"{target}: undocumented {type(err).__name__}: {err}") from err
    except Exception as err:
        fuzz_record(target, data, err)
        raise AssertionError(f"{target}: crash {type(err).__name__}: {err!r}") from err
    fuzz_record(target, data)


#: Targets whose seeded run finds a known crash that is not fixed yet: target -> reason
#: (strict: once fixed the run passes, the xfail fails, and the entry goes with the fix).
KNOWN_CRASHES: dict[str, str] = {}  # none open: each found crash is fixed and in the corpus


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(t, marks=pytest.mark.xfail(strict=True, reason=KNOWN_CRASHES[t]))
        if t in KNOWN_CRASHES
        else t
        for t in sorted(TARGETS)
    ],
)
def test_fuzz(target: str) -> None:
    @fuzz_settings(EXAMPLES)
    @given(TARGETS[target][1]())
    def run(data: bytes) -> None:
        check(target, data)

    run()


def _corpus() -> list[Any]:
    cases = []
    if not os.path.isdir(FUZZ_CORPUS):
        return cases
    for target in sorted(os.listdir(FUZZ_CORPUS)):
        folder = os.path.join(FUZZ_CORPUS, target)
        for name in sorted(os.listdir(folder)):
            if name.endswith(".xfail"):
                continue
            reason_file = os.path.join(folder, name + ".xfail")
            marks = []
            if os.path.exists(reason_file):
                with open(reason_file) as f:
                    marks.append(pytest.mark.xfail(strict=True, reason=f.read().strip()))
            cases.append(
                pytest.param(target, os.path.join(folder, name), id=f"{target}/{name}", marks=marks)
            )
    return cases


@pytest.mark.parametrize(("target", "path"), _corpus())
def test_corpus_replays(target: str, path: str) -> None:
    assert target in TARGETS, f"{path}: no fuzz target {target!r}"
    with open(path, "rb") as f:
        check(target, f.read())
