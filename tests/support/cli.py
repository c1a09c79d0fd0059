"""Running the ``ocihook`` command: :func:`run_cli` in this process (``main(argv)``
with stdin, stdout, stderr, environment, working directory and ``sys.argv`` of its own),
and :func:`run_cli_process` as ``python -m ocihook``, for tests whose subject is the
process boundary (the real script's exit, signals, what a fresh interpreter imports, an
inherited environment); :func:`edit_cli` and :func:`edit_with_cdi` (``ocihook edit``);
:func:`modules_after` (the modules a fresh interpreter has loaded after some code).

Both runners take the same arguments and return a :class:`subprocess.CompletedProcess`
(``args``, ``returncode``, ``stdout``, ``stderr``: text by default, bytes with
``text=False``), so a test can switch between them without other changes."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ocihook import _main
from ocihook.core import log

#: The command line of the ``ocihook`` program under test (``python -m ocihook``).
OCIHOOK = [sys.executable, "-m", "ocihook"]


def _as_bytes(data: bytes | str | None) -> bytes:
    if data is None:
        return b""
    return data.encode() if isinstance(data, str) else data


def _decoded(data: bytes, text: bool) -> Any:
    """``data`` as :func:`subprocess.run` gives it: bytes, or with ``text`` decoded as
    UTF-8 in universal-newlines mode (``\\r\\n`` and ``\\r`` read as ``\\n``)."""
    if not text:
        return data
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


@contextlib.contextmanager
def _environment(env: Mapping[str, str] | None, cwd: str | Path | None) -> Iterator[None]:
    """``os.environ`` replaced by ``env`` (when given) and the working directory changed
    to ``cwd`` (when given) for the duration; both restored after."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        if env is not None:
            os.environ.clear()
            os.environ.update(saved_env)


def run_cli(
    *args: str,
    stdin: bytes | str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess[Any]:
    """Run ``ocihook args...`` in this process: :func:`ocihook._main.main` with ``args``
    as ``sys.argv[1:]``, standard streams of its own and the exit code a process would
    have.

    Args:
        args: the command line after ``ocihook``.
        stdin: what the command reads on standard input (nothing when ``None``).
        env: the command's whole environment (as :func:`subprocess.run`'s ``env``; ``None``:
            this process's); ``os.environ`` is put back afterwards.
        cwd: the working directory during the command (``None``: this one).
        text: decode stdout and stderr as UTF-8 (universal newlines), as ``text=True`` does.

    Returns:
        ``returncode``: what ``main`` returned, the code of a ``SystemExit``, or 1 after an
        uncaught exception (its traceback is written to ``stderr``, as the interpreter
        would); ``stdout`` and ``stderr``: what the command wrote, encoded as the
        interpreter's standard streams would (UTF-8; ``backslashreplace`` on stderr).
    """
    out, err = io.BytesIO(), io.BytesIO()
    stdout = io.TextIOWrapper(out, encoding="utf-8", errors="strict", write_through=True)
    stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True)
    streams = (sys.stdin, sys.stdout, sys.stderr, sys.argv)
    sys.stdin = io.TextIOWrapper(io.BytesIO(_as_bytes(stdin)), encoding="utf-8")
    sys.stdout, sys.stderr, sys.argv = stdout, stderr, ["ocihook", *args]
    code: int
    try:
        with _environment(env, cwd):
            log.configure(None)
            try:
                code = _main.main(list(args))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
                if isinstance(e.code, str):
                    print(e.code, file=sys.stderr)
            except Exception:
                traceback.print_exc()
                code = 1
            finally:
                log.configure(None)
                log.echo_to_stderr(None)  # the global --debug
        stdout.flush()
        stderr.flush()
        written = (out.getvalue(), err.getvalue())
    finally:
        sys.stdin, sys.stdout, sys.stderr, sys.argv = streams
    return subprocess.CompletedProcess(
        [*OCIHOOK, *args], code, _decoded(written[0], text), _decoded(written[1], text)
    )


def run_cli_process(
    *args: str,
    stdin: bytes | str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    text: bool = True,
    timeout: float = 60,
) -> subprocess.CompletedProcess[Any]:
    """Run ``python -m ocihook args...`` as a child process (arguments and result as
    :func:`run_cli`; ``timeout`` seconds at most). For tests whose subject is the process
    itself."""
    proc = subprocess.run(
        [*OCIHOOK, *args],
        input=_as_bytes(stdin),
        capture_output=True,
        env=None if env is None else dict(env),
        cwd=cwd,
        timeout=timeout,
        check=False,
    )
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, _decoded(proc.stdout, text), _decoded(proc.stderr, text)
    )


def edit_cli(bundle: str, root: str, *, check: bool = False) -> Any:
    """Run ``ocihook edit -b bundle`` against the host tree ``root`` (driver root and dev
    root), in this process (:func:`run_cli`); returns the
    ``subprocess.CompletedProcess`` (text); ``check``: raise
    :class:`subprocess.CalledProcessError` on a non-zero exit."""
    proc = run_cli("edit", "-b", bundle, "--driver-root", root, "--dev-root", root)
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, proc.args, proc.stdout, proc.stderr)
    return proc


def edit_with_cdi(bundle: str, spec_dir: Any, work: Any) -> str:
    """``ocihook edit -b bundle`` with a configuration file (written in ``work``) whose
    ``cdi-spec-dirs`` is ``spec_dir``; asserts it wrote ``config.json`` and returns its
    stderr."""
    cfg = os.path.join(str(work), "config.toml")
    with open(cfg, "w") as f:
        f.write(f'cdi-spec-dirs = ["{spec_dir}"]\n')
    r = run_cli("edit", "--config", cfg, "-b", str(bundle))
    assert r.returncode == 0 and "written" in r.stderr, r.stderr
    return r.stderr


def modules_after(code: str) -> set[str]:
    """The modules a fresh ``python -I`` has loaded after running ``code`` (for the
    import-cost tests: the start path must not load heavy modules)."""
    out = subprocess.run(
        [sys.executable, "-I", "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


def bare_venv(path: Path) -> Path:
    """A virtual environment made at ``path`` by this interpreter, without pip; returns
    its ``site-packages`` directory (where a test puts the ocihook it wants found)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
