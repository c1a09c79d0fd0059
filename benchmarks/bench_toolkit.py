"""ocihook beside the NVIDIA Container Toolkit: the per-container cost of each path an engine
takes, in one interleaved run, on a fresh rootfs every round.

Each round runs every case once, ocihook's and the toolkit's in turn (so that load drift on
a shared machine hits both alike), and each run gets a rootfs made afresh for it, untimed:
on ``tmpfs`` a copy of a busybox tree on a tmpfs, on ``overlay`` an overlayfs mount whose
lower layer is that tree and whose upper layer is new (as containerd's overlay snapshotter
gives a container), on the disk under ``--work``. Cases, on the realistic 535.261.03 8-GPU
host (``fixtures/realistic/build.py``):

* ``runc create``: the bare runtime, the baseline every other case is measured over;
* ``wrapper 8 GPUs all`` / ``wrapper 8 GPUs u+c``: ``ocihook-runtime create`` (auto mode)
  asking for every GPU with every capability / utility,compute, against the toolkit's
  ``nvidia-container-runtime`` in ``cdi`` mode with its own spec (``nvidia-ctk cdi generate
  --mode=management``; a CDI spec holds every driver file whatever the capabilities);
* ``prestart hook u+c``: ``runc create`` with ocihook's prestart hook as ``install`` registers
  it, against the same toolkit CDI path (the toolkit's legacy hook needs libnvidia-container,
  which is not here);
* ``engine-native CDI``: ``runc create`` of a ``config.json`` into which each tool's own spec
  was injected for ``nvidia.com/gpu=all`` (untimed, with ``ocihook.cdi.inject_devices``, as
  a CDI-native engine injects it): runc's mounts and the spec's hooks;
* ``wrapper, nothing asked``: each wrapper for a container that asks for no GPU;
* ``cdi generate``: ``ocihook cdi generate`` against ``nvidia-ctk cdi generate`` (whole
  process time, not over runc).

With ``--decompose``, where engine-native CDI's time goes, in the same rounds: each tool's
injected ``config.json`` again with its ``createContainer`` hooks removed (``CDI, no hooks``:
runc's mounts and device nodes), each hook replaced by ``/bin/true`` (``CDI, hooks as
true``: runc's cost of running that many hooks), and, for ocihook alone, its hook's
interpreter running nothing (``CDI, hook interpreter``) and importing the modules the hook
loads (``CDI, hook imports``: ``hook-cdi`` of :mod:`ocihook.core.startpath`, from the module
image as the hook loads them) without doing the work.

Both tools' configuration files are shaped as shipped: neither names the runtime, which
each finds on ``PATH`` (``--config-runtimes`` names runc's path in both, as the runs
before this option did: ocihook's no-GPU wrapper then parses its configuration on every
start);
ocihook's names the realistic host's driver and device roots and its CDI spec directory,
the toolkit's its ``cdi`` mode and spec directory.

Reported per file system: median ms added over ``runc create`` (min-max of the rounds), the
ratio ocihook / toolkit of the medians and the target of the per-container-cost issue; peak
memory (GNU ``time``) of ocihook's processes. Timing targets live here, never in tests.

Usage (root, runc, GNU time, the realistic host, a non-editable install)::

    python3 -m venv /tmp/v && /tmp/v/bin/pip install .
    .venv/bin/python benchmarks/bench_toolkit.py --venv /tmp/v [--runs 20] [--fs tmpfs,overlay]

The toolkit's binaries are read from ``--toolkit`` (default ``../shared/peers/nct/bin``
beside the checkout); they are used for comparison only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cost import (  # a sibling script, found through sys.path above
    ALL,
    CACHE_DIR,
    GNU_TIME,
    RUNC,
    UC,
    Env,
    _check,
    _hook,
    _make_bundle,
    _peak,
    _realistic_root,
    _set_hooks,
    _timed,
)

#: ocihook / toolkit targets of the per-container-cost issue (medians, every file system).
TARGETS = {
    "wrapper 8 GPUs all": 0.8,
    "wrapper 8 GPUs u+c": 0.7,
    "prestart hook u+c": 0.7,
    "engine-native CDI": 0.8,
    "hook-free CDI spec": 0.3,
    "wrapper, nothing asked": 1.5,
    "cdi generate": 1.5,
}
MEMORY_TARGET_MIB = 12.0
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_TOOLKIT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "peers", "nct", "bin"
)


class Rootfs:
    """Makes a fresh rootfs for each run from ``base``, on ``fs`` (``tmpfs`` or
    ``overlay``), at the bundle's ``rootfs`` path; :meth:`fresh` before a run,
    :meth:`release` after it (both untimed)."""

    def __init__(self, fs: str, base: str, scratch: str) -> None:
        self.fs, self.base, self.scratch = fs, base, scratch

    def fresh(self, bundle: str) -> None:
        target = os.path.join(bundle, "rootfs")
        self.release(bundle)
        os.makedirs(target, exist_ok=True)
        if self.fs == "tmpfs":
            subprocess.run(["mount", "-t", "tmpfs", "tmpfs", target], check=True)
            subprocess.run(["cp", "-a", f"{self.base}/.", target], check=True)
        else:
            layer = os.path.join(self.scratch, uuid.uuid4().hex[:12])
            upper, work = os.path.join(layer, "upper"), os.path.join(layer, "work")
            os.makedirs(upper)
            os.makedirs(work)
            opts = f"lowerdir={self.base},upperdir={upper},workdir={work}"
            subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, target], check=True)

    def release(self, bundle: str) -> None:
        target = os.path.join(bundle, "rootfs")
        while os.path.ismount(target):
            subprocess.run(["umount", "-l", target], check=True)
        if os.path.isdir(target) and not os.listdir(target):
            return
        shutil.rmtree(target, ignore_errors=True)


def _toolkit_config(d: str, spec_dir: str, runtimes: bool) -> dict[str, str]:
    """An environment whose ``nvidia-container-runtime`` runs in ``cdi`` mode with
    ``spec_dir`` ($XDG_CONFIG_HOME/nvidia-container-runtime) and finds the real runc on
    ``PATH``, or (``runtimes``) is given its path."""
    conf = os.path.join(d, "xdg", "nvidia-container-runtime")
    os.makedirs(conf, exist_ok=True)
    with open(os.path.join(conf, "config.toml"), "w") as f:
        f.write(
            "[nvidia-container-runtime]\n"
            'mode = "cdi"\n'
            + (f'runtimes = ["{RUNC}"]\n' if runtimes else "")
            + "[nvidia-container-runtime.modes.cdi]\n"
            f'spec-dirs = ["{spec_dir}"]\n'
        )
    return {"PATH": PATH, "XDG_CONFIG_HOME": os.path.join(d, "xdg")}


def _inject(bundle: str, spec_dir: str) -> None:
    """Inject ``nvidia.com/gpu=all`` from the spec in ``spec_dir`` into the bundle's
    config.json, as a CDI-native engine does (ocihook's library; untimed)."""
    from ocihook import cdi

    registry = cdi.Registry.load([spec_dir])
    cfg = os.path.join(bundle, "config.json")
    with open(cfg) as f:
        doc = json.load(f)
    doc = cdi.inject_devices(doc, registry, ["nvidia.com/gpu=all"])
    with open(cfg, "w") as f:
        json.dump(doc, f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", required=True, help="a virtual environment with ocihook installed")
    ap.add_argument("--toolkit", default=DEFAULT_TOOLKIT, help="the toolkit's binaries")
    ap.add_argument("--runs", type=int, default=20, help="rounds (20)")
    ap.add_argument("--fs", default="tmpfs,overlay", help="file systems (tmpfs,overlay)")
    ap.add_argument("--work", default="/var/tmp", help="where overlay upper layers go")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    ap.add_argument(
        "--decompose",
        action="store_true",
        help="also time engine-native CDI without hooks, with /bin/true hooks, and "
        "(ocihook) its hook's bare interpreter and imports",
    )
    ap.add_argument(
        "--config-runtimes",
        action="store_true",
        help="name runc's path in both tools' configuration files (default: as shipped, "
        "neither names it and both find runc on PATH)",
    )
    ns = ap.parse_args()
    if os.geteuid() != 0 or not os.path.exists(RUNC) or not os.path.exists(GNU_TIME):
        print("needs root, runc and GNU time (apt-get install runc time)")
        return 1
    host = _realistic_root()
    if host is None:
        print("realistic host not built: python fixtures/realistic/build.py")
        return 1
    nct = os.path.abspath(ns.toolkit)
    for b in ("nvidia-ctk", "nvidia-container-runtime", "nvidia-cdi-hook"):
        if not os.access(os.path.join(nct, b), os.X_OK):
            print(f"toolkit binary missing: {nct}/{b}")
            return 1
    env = Env("ocihook", ns.venv)
    work = tempfile.mkdtemp(prefix="ocihook-bench-toolkit-", dir=ns.work)
    made_cache = not os.path.isdir(CACHE_DIR)
    state = os.path.join(work, "runc-state")
    bundles: list[str] = []
    try:
        ours, theirs = os.path.join(work, "ocihook"), os.path.join(work, "toolkit")
        our_cdi, their_cdi = os.path.join(ours, "cdi"), os.path.join(theirs, "cdi")
        for d in (our_cdi, their_cdi):
            os.makedirs(d)
        conf = os.path.join(ours, "config.toml")
        with open(conf, "w") as f:
            f.write(
                f'driver-root = "{host}"\ndev-root = "{host}"\n'
                + (f'runtimes = ["{RUNC}"]\n' if ns.config_runtimes else "")
                + f'cdi-spec-dirs = ["{our_cdi}"]\n'
            )
        # as the boot unit does on a deployed host: the spec, and the start-path cache
        # (discovery, and the parse of the configuration file the wrapper reads)
        our_gen = [env.ocihook, "cdi", "generate", "--driver-root", host, "--dev-root", host]
        our_boot = [*our_gen, "--format", "json", "--output", f"{our_cdi}/nvidia.json"]
        _timed([*our_boot, "--warm-cache"], {"PATH": PATH, "OCIHOOK_CONFIG": conf})
        their_gen = [os.path.join(nct, "nvidia-ctk"), "cdi", "generate", "--driver-root", host]
        their_gen += ["--dev-root", host, "--mode=management", "--nvidia-cdi-hook-path"]
        their_gen += [os.path.join(nct, "nvidia-cdi-hook")]
        _timed([*their_gen, "--output", f"{their_cdi}/nvidia.yaml"])
        toolkit_env = _toolkit_config(theirs, their_cdi, ns.config_runtimes)

        base = os.path.join(work, "base")
        _make_bundle(base, [])
        base_rootfs = os.path.join(base, "rootfs")

        def run_create(runtime: list[str], bundle: str, renv: dict[str, str] | None) -> float:
            cid = f"b{uuid.uuid4().hex[:12]}"
            pid = os.path.join(work, f"{cid}.pid")
            argv = [*runtime, "--root", state, "create", "--pid-file", pid, "-b", bundle, cid]
            t = _timed(argv, renv)
            _check(
                subprocess.run([RUNC, "--root", state, "delete", "-f", cid], capture_output=True),
                ["runc", "delete", cid],
            )
            return t

        def case_bundle(name: str, env_vars: list[str]) -> tuple[str, bytes]:
            bundle = _make_bundle(os.path.join(work, name.replace(" ", "_")), env_vars)
            shutil.rmtree(os.path.join(bundle, "rootfs"))
            bundles.append(bundle)
            with open(os.path.join(bundle, "config.json"), "rb") as f:
                return bundle, f.read()

        # case -> (ocihook run, toolkit run); each run takes the Rootfs maker
        Run = Callable[[Rootfs], float]
        cases: dict[str, tuple[Run, Run | None]] = {}

        def fresh_run(bundle: str, pristine: bytes, timed: Callable[[], float]) -> Run:
            def run(rootfs: Rootfs) -> float:
                with open(os.path.join(bundle, "config.json"), "wb") as f:
                    f.write(pristine)
                rootfs.fresh(bundle)
                try:
                    return timed()
                finally:
                    rootfs.release(bundle)

            return run

        plain, plain_cfg = case_bundle("plain", [])
        cases["runc create"] = (
            fresh_run(plain, plain_cfg, lambda: run_create([RUNC], plain, None)),
            None,
        )
        our_env = {"PATH": PATH, "OCIHOOK_CONFIG": conf}
        pristine: dict[str, tuple[str, bytes]] = {}  # the wrapper cases' bundles, unedited
        wrapper = [env.wrapper]
        toolkit = [os.path.join(nct, "nvidia-container-runtime")]
        for name, env_vars in (
            ("wrapper 8 GPUs all", ALL),
            ("wrapper 8 GPUs u+c", UC),
            ("wrapper, nothing asked", []),
        ):
            b1, c1 = case_bundle(name + " o", env_vars)
            b2, c2 = case_bundle(name + " t", env_vars)
            pristine[name] = (b1, c1)
            cases[name] = (
                fresh_run(b1, c1, lambda b=b1: run_create(wrapper, b, our_env)),
                fresh_run(b2, c2, lambda b=b2: run_create(toolkit, b, toolkit_env)),
            )
        hb, _ = case_bundle("prestart hook u+c o", UC)
        _set_hooks(hb, {"prestart": [_hook([*env.hook, "hook", "prestart", "--config", conf])]})
        with open(os.path.join(hb, "config.json"), "rb") as f:
            hc = f.read()
        tb, tc = case_bundle("prestart hook u+c t", ALL)
        cases["prestart hook u+c"] = (
            fresh_run(hb, hc, lambda: run_create([RUNC], hb, None)),
            fresh_run(tb, tc, lambda: run_create(toolkit, tb, toolkit_env)),
        )
        nb1, _ = case_bundle("engine-native CDI o", [])
        nb2, _ = case_bundle("engine-native CDI t", [])
        _inject(nb1, our_cdi)
        _inject(nb2, their_cdi)
        with open(os.path.join(nb1, "config.json"), "rb") as f:
            nc1 = f.read()
        with open(os.path.join(nb2, "config.json"), "rb") as f:
            nc2 = f.read()
        cases["engine-native CDI"] = (
            fresh_run(nb1, nc1, lambda: run_create([RUNC], nb1, None)),
            fresh_run(nb2, nc2, lambda: run_create([RUNC], nb2, None)),
        )
        if ns.decompose:
            for name, (ours_doc, theirs_doc) in _decompositions(nc1, nc2).items():
                o_b, _ = case_bundle(name + " o", [])
                t_run = None
                if theirs_doc is not None:
                    t_b, _ = case_bundle(name + " t", [])
                    t_run = fresh_run(t_b, theirs_doc, lambda b=t_b: run_create([RUNC], b, None))
                cases[name] = (
                    fresh_run(o_b, ours_doc, lambda b=o_b: run_create([RUNC], b, None)),
                    t_run,
                )
        # the hook-free spec (cdi generate --hook-free) against the toolkit's CDI spec
        free_cdi = os.path.join(ours, "cdi-hook-free")
        os.makedirs(free_cdi, exist_ok=True)
        free_out = ["--format", "json", "--output", f"{free_cdi}/nvidia.json", "--hook-free"]
        _timed([*our_gen, *free_out])
        fb, _ = case_bundle("hook-free CDI o", [])
        _inject(fb, free_cdi)
        with open(os.path.join(fb, "config.json"), "rb") as f:
            fc = f.read()
        cases["hook-free CDI spec"] = (
            fresh_run(fb, fc, lambda: run_create([RUNC], fb, None)),
            fresh_run(nb2, nc2, lambda: run_create([RUNC], nb2, None)),
        )
        our_out, their_out = os.path.join(ours, "gen.json"), os.path.join(theirs, "gen.yaml")
        cases["cdi generate"] = (
            lambda _r: _timed([*our_gen, "--format", "json", "--output", our_out]),
            lambda _r: _timed([*their_gen, "--output", their_out]),
        )

        filesystems = [f for f in ns.fs.split(",") if f]
        times: dict[tuple[str, str, str], list[float]] = {}
        for fs in filesystems:
            rootfs = Rootfs(fs, base_rootfs, os.path.join(work, "layers"))
            os.makedirs(rootfs.scratch, exist_ok=True)
            for run_o, run_t in cases.values():  # warm up
                run_o(rootfs)
                if run_t is not None:
                    run_t(rootfs)
            for _ in range(ns.runs):
                for name, (run_o, run_t) in cases.items():
                    times.setdefault((fs, name, "ocihook"), []).append(run_o(rootfs))
                    if run_t is not None:
                        times.setdefault((fs, name, "toolkit"), []).append(run_t(rootfs))
        # the wrapper's peak on a start like the timed ones: config.json as the engine
        # wrote it, a fresh rootfs; its configuration file (runtime /bin/true) parsed by
        # the boot unit, as on a deployed host, and once a file no run has parsed yet
        # (the first start after the file changed: tomllib is imported)
        peak_bundle, peak_config = pristine["wrapper 8 GPUs all"]
        true_conf = _true_config(ours, host)
        _timed([*our_boot, "--warm-cache"], {"PATH": PATH, "OCIHOOK_CONFIG": true_conf})
        new_conf = os.path.join(ours, "new.toml")
        with open(true_conf) as f, open(new_conf, "w") as g:
            g.write(f"{f.read()}# {uuid.uuid4().hex}: text no run has parsed\n")
        peaks: dict[str, float | None] = {}
        for what, config in (
            ("wrapper (exec /bin/true)", true_conf),
            ("wrapper, configuration not parsed before", new_conf),
        ):
            with open(os.path.join(peak_bundle, "config.json"), "wb") as f:
                f.write(peak_config)
            rootfs.fresh(peak_bundle)
            try:
                peaks[what] = _peak(
                    [env.wrapper, "create", "-b", peak_bundle, "x"],
                    {"PATH": PATH, "OCIHOOK_CONFIG": config},
                )
            finally:
                rootfs.release(peak_bundle)
        peaks["cdi generate"] = _peak([*our_gen, "--format", "json", "--output", our_out])
    finally:
        subprocess.run(
            [
                "sh",
                "-c",
                f"for c in $({RUNC} --root {state} list -q 2>/dev/null); "
                f"do {RUNC} --root {state} delete -f $c; done",
            ],
            check=False,
        )
        for b in bundles:
            target = os.path.join(b, "rootfs")
            while os.path.ismount(target):
                subprocess.run(["umount", "-l", target], check=False)
        shutil.rmtree(work, ignore_errors=True)
        if made_cache:
            shutil.rmtree(CACHE_DIR, ignore_errors=True)

    return _report(ns, filesystems, cases, times, peaks)


Hook = Callable[[dict[str, object]], dict[str, object]]


def _with_hooks(config: bytes, hook: Hook | None) -> bytes:
    """``config`` (a ``config.json`` with CDI edits injected) with each ``createContainer``
    hook replaced by ``hook(it)``, or all hooks removed (``None``)."""
    doc = json.loads(config)
    if hook is None:
        doc.pop("hooks", None)
    else:
        doc["hooks"]["createContainer"] = [hook(h) for h in doc["hooks"]["createContainer"]]
    return json.dumps(doc).encode()


def _decompositions(ours: bytes, theirs: bytes) -> dict[str, tuple[bytes, bytes | None]]:
    """The ``--decompose`` cases: name -> (ocihook's ``config.json``, the toolkit's or
    ``None``), from each tool's injected ``config.json`` (see the module docstring)."""
    from ocihook.core.startpath import ENTRY_POINTS

    modules = next(e.ocihook for e in ENTRY_POINTS if e.name == "hook-cdi")

    def true(_h: dict[str, object]) -> dict[str, object]:
        return {"path": "/bin/true", "args": ["true"]}

    def program(text: str) -> Hook:
        def replace(h: dict[str, object]) -> dict[str, object]:
            args = list(h["args"])  # type: ignore[call-overload]
            if args[1:4] != ["-I", "-S", "-c"]:
                raise SystemExit(f"--decompose: not an interpreter hook: {args[:4]}")
            prefix = args[4].split("from ocihook._main import")[0]  # its sys.path setting
            return dict(h, args=[*args[:4], text.replace("PREFIX", prefix)])

        return replace

    imports = "PREFIX from ocihook.core import modimage; modimage.install(); import "
    imports += ", ".join(sorted(modules))
    return {
        "CDI, no hooks": (_with_hooks(ours, None), _with_hooks(theirs, None)),
        "CDI, hooks as true": (_with_hooks(ours, true), _with_hooks(theirs, true)),
        "CDI, hook interpreter": (_with_hooks(ours, program("pass")), None),
        "CDI, hook imports": (_with_hooks(ours, program(imports)), None),
    }


def _true_config(d: str, host: str) -> str:
    path = os.path.join(d, "true.toml")
    with open(path, "w") as f:
        f.write(f'driver-root = "{host}"\ndev-root = "{host}"\nruntimes = ["/bin/true"]\n')
    return path


def _report(
    ns: argparse.Namespace,
    filesystems: list[str],
    cases: dict[str, object],
    times: dict[tuple[str, str, str], list[float]],
    peaks: dict[str, float | None],
) -> int:
    figures: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{ns.runs} rounds per file system; median ms added over runc create (min-max)")
    for fs in filesystems:
        base = [t * 1000 for t in times[(fs, "runc create", "ocihook")]]
        runc_ms = statistics.median(base)
        print(f"\n[{fs}] runc create {runc_ms:.1f} ms ({min(base):.1f}-{max(base):.1f})")
        print(f"{'case':24} {'ocihook +ms':>20} {'toolkit +ms':>20} {'ratio':>6} {'target':>7}")
        for name in cases:
            if name == "runc create":
                continue
            over = 0.0 if name == "cdi generate" else runc_ms
            o = [t * 1000 - over for t in times[(fs, name, "ocihook")]]
            mo = statistics.median(o)
            target = TARGETS.get(name)
            shown = f"{'<=' + str(target) if target else '':>7}"
            if (fs, name, "toolkit") not in times:  # --decompose: ocihook's alone
                figures.setdefault(fs, {})[name] = {"ocihook_ms": round(mo, 1)}
                spread = f"({min(o):5.1f}-{max(o):5.1f})"
                print(f"{name:24} {mo:7.1f} {spread} {'-':>20} {'-':>6} {shown}")
                continue
            t = [x * 1000 - over for x in times[(fs, name, "toolkit")]]
            mt = statistics.median(t)
            ratio = mo / mt if mt > 0 else float("inf")
            figures.setdefault(fs, {})[name] = {
                "ocihook_ms": round(mo, 1),
                "toolkit_ms": round(mt, 1),
                "ratio": round(ratio, 2),
            }
            print(
                f"{name:24} {mo:7.1f} ({min(o):5.1f}-{max(o):5.1f}) "
                f"{mt:7.1f} ({min(t):5.1f}-{max(t):5.1f}) {ratio:6.2f} {shown}"
            )
    print()
    for what, mib in peaks.items():
        shown = "n/a" if mib is None else f"{mib:.1f} MiB"
        print(f"peak memory, {what}: {shown} (target <= {MEMORY_TARGET_MIB:.0f} MiB)")
    if ns.json:
        print(json.dumps({"figures": figures, "peaks": peaks}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
