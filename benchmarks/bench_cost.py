"""Per-container cost of ocihook's deployed paths (issue 17), before/after in one run.

Every case runs the commands of one or more *installed* (non-editable) ocihook
environments, interleaved round-robin with each other and with the baselines, so that load
drift on a shared machine hits every case alike:

* ``bare``: ``python -I -c pass`` (the interpreter of the first environment);
* ``runc create``: ``runc create`` of a busybox bundle that asks for nothing, no hook (the
  container is deleted, untimed, after each run);
* ``wrapper 8 GPUs u+c`` / ``wrapper 8 GPUs all``: ``ocihook-runtime create`` (spec mode) of
  a bundle asking for all 8 GPUs of the realistic 535.261.03 host, capabilities
  ``utility,compute`` / ``all``, running the real runc (which runs the createContainer hook
  the edit registers, if any) with ``--pid-file`` as containerd, podman and Docker do;
  ``config.json`` restored before each run;
* ``prestart hook u+c``: ``runc create`` of a bundle whose ``hooks.prestart`` is the
  environment's ``ocihook hook prestart`` as ``ocihook install`` registers it
  (``ocihook.config.options.hook_command``: the interpreter with ``-I -c``; 8 GPUs,
  utility,compute);
* ``CDI spec hooks``: ``runc create`` of a bundle carrying what the environment's own CDI
  spec (``ocihook cdi generate``) gives for ``nvidia.com/gpu=all`` — its hooks run as an
  engine's runc would run them (the config is made once, untimed, by that environment's
  ``ocihook edit`` from the spec, as a CDI-native engine would inject it);
* ``wrapper, nothing asked`` / ``hook, nothing asked``: the wrapper and the prestart hook for
  a container asking for no GPU;
* ``cdi generate``: ``ocihook cdi generate --format json --output F`` of the realistic host
  (a process of its own, not added to runc).

Figures: median wall ms; for runc cases the ms added over ``runc create`` and that as a
ratio to ``bare``; ``cdi generate`` as its whole time over ``bare``. Peak memory (maximum
resident set, GNU ``time``) of every ocihook process: the wrapper measured exec'ing
``/bin/true`` (runc's own memory is not ocihook's), the hooks measured in place inside runc
(registered through ``/usr/bin/time -a -o FILE``).

Every case runs with the start-path cache ``/run/ocihook`` present (made for the run, and
removed after it, when missing), as on a host whose boot unit ran ``cdi generate
--warm-cache``; the warm-up round fills it.

Usage (root, runc, GNU time, the realistic host built by ``fixtures/realistic/build.py``)::

    python benchmarks/bench_cost.py --env before=/tmp/bench-base --env after=/tmp/bench-venv \
        [--runs N] [--json]

``--env LABEL=VENV`` names a virtual environment holding a non-editable install
(``python -m venv V && V/bin/pip install DIR``); the default is the running interpreter's.
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
import time
import uuid

TARGETS = {
    "wrapper 8 GPUs all": 2.5,
    "prestart hook u+c": 2.0,
    "CDI spec hooks": 1.5,
    "wrapper, nothing asked": 1.2,
    "hook, nothing asked": 1.1,
    "cdi generate": 2.0,
}
MEMORY_TARGET_MIB = 16.0
GNU_TIME = "/usr/bin/time"
#: ocihook's start-path cache directory (``ocihook.linux.cachestore.DEFAULT_DIR``).
CACHE_DIR = "/run/ocihook"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
UC = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility,compute"]
ALL = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"]


def _realistic_root() -> str | None:
    cache = os.environ.get("OCIHOOK_CACHE") or os.path.expanduser("~/.cache/ocihook")
    root = os.path.join(cache, "realistic-535.261.03", "root")
    return root if os.path.exists(os.path.join(root, ".ocihook-fixture.json")) else None


class Env:
    """One installed ocihook: its interpreter and commands."""

    def __init__(self, label: str, venv: str) -> None:
        self.label = label
        self.bin = os.path.join(os.path.abspath(venv), "bin")
        self.python = os.path.join(self.bin, "python")
        self.ocihook = os.path.join(self.bin, "ocihook")
        self.wrapper = os.path.join(self.bin, "ocihook-runtime")
        for p in (self.python, self.ocihook, self.wrapper):
            if not os.path.exists(p):
                raise SystemExit(f"{label}: {p} missing (pip install the project there)")
        probe = subprocess.run(
            [self.python, "-I", "-c", "import ocihook;print(ocihook.__file__)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if "site-packages" not in probe:
            raise SystemExit(f"{label}: ocihook comes from {probe}, not an installed copy")
        # the hook command as this installation registers it (hooks.d, CDI specs, bundles)
        self.hook = json.loads(
            subprocess.run(
                [self.python, "-I", "-c", _HOOK_COMMAND],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )


#: Prints the installation's registered hook argv prefix (``hook_command`` of
#: ``ocihook.config.options``, or of ``ocihook.settings`` in an installation that predates it).
_HOOK_COMMAND = (
    "import json\n"
    "try:\n"
    "    from ocihook.config.options import hook_command\n"
    "except ImportError:\n"
    "    from ocihook.settings import hook_command\n"
    "print(json.dumps(list(hook_command())))\n"
)


def _check(proc: subprocess.CompletedProcess[bytes], argv: list[str]) -> None:
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace") if proc.stderr else ""
        raise SystemExit(f"{argv} failed ({proc.returncode}): {err}")


def _timed(argv: list[str], env: dict[str, str] | None = None, stdin: bytes = b"") -> float:
    # stderr to a file, not a pipe: runc create leaves the container's init holding it
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.run(argv, input=stdin, env=env, stdout=subprocess.DEVNULL, stderr=err)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{argv} failed ({proc.returncode}): {err.read().decode()}")
    return elapsed


def _make_bundle(path: str, env: list[str]) -> str:
    from ocihook.sim.demo import make_busybox_bundle

    make_busybox_bundle(path, ["sh", "-c", "exit 0"], env)
    return path


def _set_hooks(bundle: str, hooks: dict[str, list[dict[str, object]]]) -> None:
    cfg = os.path.join(bundle, "config.json")
    with open(cfg) as f:
        doc = json.load(f)
    doc["hooks"] = hooks
    with open(cfg, "w") as f:
        json.dump(doc, f)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", action="append", default=[], metavar="LABEL=VENV")
    ap.add_argument("--runs", type=int, default=15, help="rounds (15)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    ns = ap.parse_args()
    if os.geteuid() != 0 or not os.path.exists(RUNC) or not os.path.exists(GNU_TIME):
        print("needs root, runc and GNU time (apt-get install runc time)")
        return 1
    host = _realistic_root()
    if host is None:
        print("realistic host not built: python fixtures/realistic/build.py")
        return 1
    envs = [Env(*e.split("=", 1)) for e in ns.env] or [Env("this", sys.prefix)]
    work = tempfile.mkdtemp(prefix="ocihook-bench-cost-")
    # the start-path cache, as on a host where the boot unit ran; removed afterwards when
    # this run made it (tests must not find it: it changes what they measure)
    made_cache = not os.path.isdir(CACHE_DIR)
    if made_cache:
        os.makedirs(CACHE_DIR, mode=0o755)
    state = os.path.join(work, "runc-state")
    path_env = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    try:
        plain = _make_bundle(os.path.join(work, "plain"), [])

        def runc_create(bundle: str) -> float:
            cid = f"b{uuid.uuid4().hex[:12]}"
            pid = os.path.join(work, f"{cid}.pid")  # as every engine passes it
            t = _timed([RUNC, "--root", state, "create", "--pid-file", pid, "-b", bundle, cid])
            _check(
                subprocess.run([RUNC, "--root", state, "delete", "-f", cid], capture_output=True),
                ["runc", "delete", cid],
            )
            return t

        # case name -> {env label -> (timed callable, peak callable or None)}
        cases: dict[str, dict[str, tuple[object, object]]] = {}
        bare = [envs[0].python, "-I", "-c", "pass"]
        cases["bare"] = {"-": (lambda: _timed(bare), lambda: _peak(bare))}
        cases["runc create"] = {"-": (lambda: runc_create(plain), None)}
        for e in envs:
            d = os.path.join(work, e.label)
            os.makedirs(d)
            conf = os.path.join(d, "config.toml")
            cdi_dir = os.path.join(d, "cdi")
            with open(conf, "w") as f:
                f.write(
                    f'driver-root = "{host}"\ndev-root = "{host}"\nruntimes = ["{RUNC}"]\n'
                    f'cdi-spec-dirs = ["{cdi_dir}"]\n'
                )
            true_conf = os.path.join(d, "true.toml")
            with open(true_conf, "w") as f:
                f.write(f'driver-root = "{host}"\ndev-root = "{host}"\nruntimes = ["/bin/true"]\n')
            peaks = os.path.join(d, "peaks")

            def wrapper_case(
                name: str,
                env_vars: list[str],
                e: Env = e,
                d: str = d,
                conf: str = conf,
                true_conf: str = true_conf,
            ) -> None:
                bundle = _make_bundle(os.path.join(d, name), env_vars)
                cfg = os.path.join(bundle, "config.json")
                with open(cfg, "rb") as f:
                    pristine = f.read()

                def run(config: str = conf) -> float:
                    with open(cfg, "wb") as f:
                        f.write(pristine)
                    cid = f"w{uuid.uuid4().hex[:12]}"
                    env = {"PATH": path_env, "OCIHOOK_CONFIG": config}
                    pid = os.path.join(work, f"{cid}.pid")
                    argv = [e.wrapper, "--root", state, "create", "--pid-file", pid, "-b", bundle]
                    argv.append(cid)
                    t = _timed(argv, env)
                    if config == conf:
                        subprocess.run(
                            [RUNC, "--root", state, "delete", "-f", cid], capture_output=True
                        )
                    return t

                def peak(e: Env = e, true_conf: str = true_conf) -> float | None:
                    with open(cfg, "wb") as f:
                        f.write(pristine)
                    env = {"PATH": path_env, "OCIHOOK_CONFIG": true_conf}
                    return _peak([e.wrapper, "create", "-b", bundle, "x"], env)

                cases.setdefault(name, {})[e.label] = (run, peak)

            wrapper_case("wrapper 8 GPUs u+c", UC)
            wrapper_case("wrapper 8 GPUs all", ALL)
            wrapper_case("wrapper, nothing asked", [])

            def hook_case(
                name: str,
                env_vars: list[str],
                e: Env = e,
                d: str = d,
                conf: str = conf,
                peaks: str = peaks,
            ) -> None:
                bundle = _make_bundle(os.path.join(d, name), env_vars)
                plain_hook = [*e.hook, "hook", "prestart", "--config", conf]
                peak_file = os.path.join(peaks, name.replace(" ", "_").replace(",", ""))
                timed_hook = [GNU_TIME, "-a", "-o", peak_file, "-f", "%M", *plain_hook]
                timed = os.path.join(d, name + " (peak)")
                shutil.copytree(bundle, timed, symlinks=True)
                _set_hooks(bundle, {"prestart": [_hook(plain_hook)]})
                _set_hooks(timed, {"prestart": [_hook(timed_hook)]})
                cases.setdefault(name, {})[e.label] = (
                    lambda: runc_create(bundle),
                    lambda: _peak_file(lambda: runc_create(timed), peak_file),
                )

            os.makedirs(peaks)
            hook_case("prestart hook u+c", UC)
            hook_case("hook, nothing asked", [])

            # the environment's own CDI spec, injected once as an engine would
            os.makedirs(cdi_dir)
            gen = [
                e.ocihook,
                "cdi",
                "generate",
                "--driver-root",
                host,
                "--dev-root",
                host,
                "--format",
                "json",
                "--output",
                os.path.join(cdi_dir, "nvidia.json"),
            ]
            _timed(gen)
            cdi_bundle = _make_bundle(
                os.path.join(d, "cdi"),
                ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=all"],
            )
            _timed([e.ocihook, "edit", "-b", cdi_bundle, "--config", conf])
            cdi_peak = os.path.join(d, "cdi (peak)")
            shutil.copytree(cdi_bundle, cdi_peak, symlinks=True)
            peak_file = os.path.join(peaks, "cdi")
            with open(os.path.join(cdi_peak, "config.json")) as f:
                doc = json.load(f)
            for hooks in (doc.get("hooks") or {}).values():
                for h in hooks:
                    h["args"] = [
                        GNU_TIME,
                        "-a",
                        "-o",
                        peak_file,
                        "-f",
                        "%M",
                        h["path"],
                        *h["args"][1:],
                    ]
                    h["path"] = GNU_TIME
            with open(os.path.join(cdi_peak, "config.json"), "w") as f:
                json.dump(doc, f)
            cases.setdefault("CDI spec hooks", {})[e.label] = (
                lambda b=cdi_bundle: runc_create(b),
                lambda b=cdi_peak, p=peak_file: _peak_file(lambda: runc_create(b), p),
            )
            gen_out = [*gen[:-1], os.path.join(d, "generated.json")]
            cases.setdefault("cdi generate", {})[e.label] = (
                lambda g=gen_out: _timed(g),
                lambda g=gen_out: _peak(g),
            )

        flat = [(c, label, fns) for c, by in cases.items() for label, fns in by.items()]
        for _c, _label, (run, _peak_fn) in flat:  # warm up
            run()  # type: ignore[operator]
        times: dict[tuple[str, str], list[float]] = {(c, lb): [] for c, lb, _ in flat}
        for _ in range(ns.runs):
            for c, label, (run, _peak_fn) in flat:
                times[(c, label)].append(run())  # type: ignore[operator]
        peak: dict[tuple[str, str], float | None] = {}
        for c, label, (_run, peak_fn) in flat:
            peak[(c, label)] = (
                max((p for p in (peak_fn() for _ in range(3)) if p is not None), default=None)  # type: ignore[operator]
                if peak_fn
                else None
            )
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
        shutil.rmtree(work, ignore_errors=True)
        if made_cache:
            shutil.rmtree(CACHE_DIR, ignore_errors=True)

    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    bare_ms = med[("bare", "-")]
    runc_ms = med[("runc create", "-")]
    for e in envs:  # each install's own interpreter (not the one running this script)
        version = subprocess.run(
            [e.python, "-I", "-S", "-c", "import sys; print(sys.version.split()[0])"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        print(f"{e.label}: {e.python} (Python {version})")
    print(f"runc: {RUNC}")
    print(f"{ns.runs} rounds, median wall ms; bare {bare_ms:.1f} ms, runc create {runc_ms:.1f} ms")
    labels = [e.label for e in envs]
    head = f"{'case':24}" + "".join(
        f" {lb + ' ms':>10} {lb + ' +ms':>9} {lb + ' x':>8} {lb + ' MiB':>9}" for lb in labels
    )
    print(head + f" {'target':>7}")
    figures: dict[str, dict[str, dict[str, float | None]]] = {}
    for c in cases:
        if c in ("bare", "runc create"):
            continue
        row = f"{c:24}"
        for lb in labels:
            ms = med[(c, lb)]
            added = ms if c == "cdi generate" else ms - runc_ms
            mib = peak[(c, lb)]
            figures.setdefault(c, {})[lb] = {
                "ms": round(ms, 1),
                "added_ms": round(added, 1),
                "ratio": round(added / bare_ms, 2),
                "peak_mib": None if mib is None else round(mib, 1),
            }
            shown = "n/a" if mib is None else f"{mib:.1f}"
            row += f" {ms:10.1f} {added:9.1f} {added / bare_ms:8.2f} {shown:>9}"
        target = TARGETS.get(c)
        print(row + f" {'<=' + str(target) if target else '':>7}")
    print(f"peak memory target: <= {MEMORY_TARGET_MIB:.0f} MiB")
    if ns.json:
        print(json.dumps({"bare_ms": bare_ms, "runc_create_ms": runc_ms, "cases": figures}))
    return 0


def _hook(argv: list[str]) -> dict[str, object]:
    return {"path": argv[0], "args": argv, "env": ["PATH=/usr/bin:/bin"]}


def _peak(argv: list[str], env: dict[str, str] | None = None) -> float | None:
    """Peak resident memory of ``argv`` in MiB (GNU time ``%M``)."""
    proc = subprocess.run(
        [GNU_TIME, "-f", "OCIHOOK-PEAK-KB %M", *argv],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    for line in proc.stderr.decode(errors="replace").splitlines():
        if line.startswith("OCIHOOK-PEAK-KB "):
            return int(line.split()[1]) / 1024.0
    return None


def _peak_file(run: object, path: str) -> float | None:
    """Run ``run`` (a runc create whose hooks append ``%M`` to ``path``) and return the
    largest peak the hooks wrote, in MiB."""
    if os.path.exists(path):
        os.unlink(path)
    run()  # type: ignore[operator]
    try:
        with open(path) as f:
            values = [int(x) for x in f.read().split() if x.isdigit()]
    except OSError:
        return None
    return max(values) / 1024.0 if values else None


if __name__ == "__main__":
    sys.exit(main())
