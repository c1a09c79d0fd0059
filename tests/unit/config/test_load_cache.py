"""The parsed configuration cached by content (``ocihook.config.load.parse_config_bytes``
through ``ocihook.linux.cachestore``): the same document as tomllib gives, never a stale
one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from ocihook.config.load import load_config, parse_config_bytes
from ocihook.core.errors import ConfigError
from ocihook.linux import cachestore

REPO = str(Path(__file__).resolve().parents[3])


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    d.mkdir()
    monkeypatch.setattr(cachestore, "DEFAULT_DIR", str(d))
    return d


TEXT = 'driver-root = "/"\nlibrary-path = ["/opt/lib"]\nlog-level = "info"\n'


def test_cached_parse_is_tomllibs(cache_dir: Path, tmp_path: Path) -> None:
    f = tmp_path / "config.toml"
    f.write_text(TEXT)
    first = load_config(str(f))
    (_entry,) = cache_dir.glob("config-*.entry")
    assert parse_config_bytes(TEXT.encode(), path=str(f)) == tomllib.loads(TEXT)
    assert load_config(str(f)) == first
    # other bytes: another entry, parsed again, never the old document
    f.write_text(TEXT.replace('"/"', '"/srv"'))
    assert load_config(str(f)).driver_root == "/srv"
    assert len(list(cache_dir.glob("config-*.entry"))) == 2


def test_a_tampered_entry_is_not_used(cache_dir: Path, tmp_path: Path) -> None:
    parse_config_bytes(TEXT.encode(), path="x")
    (entry,) = cache_dir.glob("config-*.entry")
    tampered = entry.read_bytes().replace(b"/opt/lib", b"/evil/xx")  # same length: well formed
    assert tampered != entry.read_bytes()
    entry.write_bytes(tampered)
    # still the key's text: the value was changed by someone who may write there
    entry.chmod(0o666)
    assert parse_config_bytes(TEXT.encode(), path="x") == tomllib.loads(TEXT)


def test_errors_are_not_cached(cache_dir: Path) -> None:
    for _ in range(2):
        with pytest.raises(ConfigError, match="invalid TOML"):
            parse_config_bytes(b"a = [", path="x")
    assert not list(cache_dir.glob("config-*.entry"))


def test_no_directory_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cachestore, "DEFAULT_DIR", str(tmp_path / "none"))
    assert parse_config_bytes(TEXT.encode(), path="x") == tomllib.loads(TEXT)
    assert not (tmp_path / "none").exists()


def _one_shot(snippet: str, cache: Path, text: str) -> dict[str, Any]:
    """Run ``snippet`` in a fresh ``python -I -S`` (one thread, as a container's start)
    with the store in ``cache`` and the configuration bytes ``text`` as ``data``; the
    snippet sets ``out`` (JSON-able), printed back with the modules it ended with and
    every module whose import this process began (``imported``)."""
    source = cache.parent / "config-bytes.toml"
    source.write_text(text)
    program = (
        f"import sys, os; sys.path[:0] = [{REPO!r}]\n"
        "imported = []\n"
        "class Spy:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        imported.append(name)\n"
        "sys.meta_path.insert(0, Spy())\n"
        "from ocihook.linux import cachestore\n"
        f"cachestore.DEFAULT_DIR = {str(cache)!r}\n"
        "from ocihook.config.load import parse_config_bytes\n"
        f"data = open({str(source)!r}, 'rb').read()\n"
        f"{snippet}\n"
        "from ocihook.core import jsonfast\n"
        "print(jsonfast.dumps({'out': out, 'modules': sorted(sys.modules), "
        "'imported': imported}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_the_wrapper_has_a_helper_process_parse_and_never_imports_tomllib(
    tmp_path: Path,
) -> None:
    """``parse_helper`` (the wrapper runtime): a helper process parses the bytes and
    stores the document; this process takes it from the store and never imports tomllib
    (nor ``re``, ``typing``...: its peak memory is as with a parsed file)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    got = _one_shot("out = parse_config_bytes(data, path='x', parse_helper=True)", cache, TEXT)
    assert got["out"] == tomllib.loads(TEXT)
    assert not {"tomllib", "re", "typing"} & set(got["imported"])
    (entry,) = cache.glob("config-*.entry")
    assert entry.stat().st_mode & 0o777 == 0o600
    # the stored document is the one any later start takes
    assert _one_shot("out = parse_config_bytes(data, path='x')", cache, TEXT)["out"] == got["out"]


def test_bytes_the_helper_cannot_parse_are_reported_as_without_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    snippet = (
        "from ocihook.core.errors import ConfigError\n"
        "try:\n"
        "    parse_config_bytes(data, path='/etc/x.toml', parse_helper=True)\n"
        "except ConfigError as e:\n"
        "    out = [str(e), e.line]\n"
    )
    got = _one_shot(snippet, cache, "a = 1\nb = [\n")
    with pytest.raises(ConfigError) as plain:
        parse_config_bytes(b"a = 1\nb = [\n", path="/etc/x.toml")
    assert got["out"] == [str(plain.value), plain.value.line]
    assert not list(cache.iterdir())


def test_a_one_shot_parse_drops_the_modules_tomllib_brought(tmp_path: Path) -> None:
    """Without the helper (no ``parse_helper``, or no store), a one-shot process parses
    the bytes itself and then drops ``tomllib``, ``re``, ``typing``... again; the
    document is the same and is stored when the store exists."""
    for cache, stored in ((tmp_path / "cache", True), (tmp_path / "none", False)):
        if stored:
            cache.mkdir()
        got = _one_shot("out = parse_config_bytes(data, path='x')", cache, TEXT)
        assert got["out"] == tomllib.loads(TEXT)
        assert "tomllib" in got["imported"]
        assert not {"tomllib", "re", "typing"} & set(got["modules"])
        assert len(list(cache.glob("config-*.entry"))) == (1 if stored else 0)
        assert cache.exists() == stored


def test_a_process_with_threads_keeps_its_modules_and_runs_no_helper(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest has imported ``threading``: no helper process is started (``posix_spawn``
    is never called) and the modules ``tomllib`` brought stay loaded."""
    import threading  # noqa: F401 (what makes this process not a one-shot start)

    def refuse(*_args: object, **_kwargs: object) -> int:
        raise AssertionError("a helper process was started")

    monkeypatch.setattr(os, "posix_spawn", refuse)
    assert parse_config_bytes(TEXT.encode(), path="x", parse_helper=True) == tomllib.loads(TEXT)
    assert "tomllib" in sys.modules
    assert len(list(cache_dir.glob("config-*.entry"))) == 1


def test_the_helper_runs_with_sigchld_ignored_and_puts_it_back(tmp_path: Path) -> None:
    """An inherited ``SIG_IGN`` for ``SIGCHLD`` (bash keeps it) would have the kernel reap
    the helper; it is set to its default while the helper runs and restored after."""
    cache = tmp_path / "cache"
    cache.mkdir()
    snippet = (
        "import signal\n"
        "signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
        "doc = parse_config_bytes(data, path='x', parse_helper=True)\n"
        "out = [doc, signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN]\n"
    )
    got = _one_shot(snippet, cache, TEXT)
    assert got["out"] == [tomllib.loads(TEXT), True]
    assert "tomllib" not in got["imported"]
    assert len(list(cache.glob("config-*.entry"))) == 1


def test_no_helper_where_the_store_cannot_keep_its_work(tmp_path: Path) -> None:
    """A store this process cannot use (group-writable here; root's, for a rootless
    engine's wrapper) gets no helper: it could not store, and would be started again on
    every start. The file is parsed here."""
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o775)
    snippet = (
        "spawned = []\n"
        "os.posix_spawn = lambda *a, **k: spawned.append(a) or 0\n"
        "out = [parse_config_bytes(data, path='x', parse_helper=True), len(spawned)]\n"
    )
    got = _one_shot(snippet, cache, TEXT)
    assert got["out"] == [tomllib.loads(TEXT), 0]
    assert "tomllib" in got["imported"]


def _against_a_hanging_helper(
    tmp_path: Path, text: str, timeout: float, call: str, before: str = ""
) -> tuple[Any, float, bool, list[str]]:
    """Run ``before`` (statements), then time the expression ``call`` in a one-shot
    process (:func:`_one_shot`, store in ``tmp_path/cache``) whose helper interpreter
    never reads and never exits, under a :data:`~ocihook.config.load.HELPER_TIMEOUT` of
    ``timeout``. Returns its value, the seconds it took, whether a child was left
    unreaped, and the modules whose import the process began."""
    cache = tmp_path / "cache"
    cache.mkdir()
    hang = tmp_path / "python3"
    hang.write_text("#!/bin/sh\nexec sleep 60\n")
    hang.chmod(0o755)
    snippet = (
        "import time, ocihook.config.load as load\n"
        f"{before}"
        f"load.HELPER_TIMEOUT = {timeout}\n"
        f"sys.executable = {str(hang)!r}\n"
        "t = time.monotonic()\n"
        f"value = {call}\n"
        "took = time.monotonic() - t\n"
        "try:\n"
        "    os.waitpid(-1, os.WNOHANG)\n"
        "    left = True\n"
        "except ChildProcessError:  # the killed helper was reaped\n"
        "    left = False\n"
        "out = [value, took, left]\n"
    )
    got = _one_shot(snippet, cache, text)
    value, took, left = got["out"]
    return value, took, left, got["imported"]


def test_a_helper_that_hangs_is_killed_and_the_file_parsed_here(tmp_path: Path) -> None:
    call = "parse_config_bytes(data, path='x', parse_helper=True)"
    doc, took, left, imported = _against_a_hanging_helper(tmp_path, TEXT, 0.3, call)
    assert doc == tomllib.loads(TEXT)
    assert 0.3 <= took < 10 and left is False
    assert "tomllib" in imported
    assert len(list((tmp_path / "cache").glob("config-*.entry"))) == 1  # stored here


def test_a_helper_that_never_reads_is_killed_at_the_deadline(tmp_path: Path) -> None:
    """Bytes larger than a pipe holds (64 KiB) and a helper that never reads them: the
    write is bounded by the same deadline, the helper is killed and reaped, and the file is
    parsed here."""
    text = TEXT + "# padding\n" * 20000  # about 200 KB
    call = "parse_config_bytes(data, path='x', parse_helper=True)"
    doc, took, left, _imported = _against_a_hanging_helper(tmp_path, text, 0.5, call)
    assert doc == tomllib.loads(text)
    assert 0.5 <= took < 10 and left is False


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_helper_works_with_descriptors_over_1023_and_without_pidfd(
    tmp_path: Path, pidfd: bool
) -> None:
    """With descriptors 0-1099 in use (a large ``--preserve-fds``) the pipe and the pidfd
    are numbered over 1023, which ``select`` cannot watch; without ``pidfd_open`` (an
    older kernel, a seccomp filter) the helper's exit is polled. The bytes are parsed by
    the helper either way, and a helper that hangs is still killed at the deadline."""
    before = (
        "import resource\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))\n"
        "held = [os.open('/dev/null', os.O_RDONLY) for _ in range(1100)]\n"
        + ("" if pidfd else "del os.pidfd_open\n")
        + "doc = parse_config_bytes(data, path='x', parse_helper=True)\n"
    )
    call = f"[doc, load._parse_in_helper(b'a = 2\\n', {str(tmp_path / 'cache')!r})]"
    (doc, helped), took, left, imported = _against_a_hanging_helper(
        tmp_path, TEXT, 0.3, call, before
    )
    assert doc == tomllib.loads(TEXT)
    assert "tomllib" not in imported  # the first parse was the helper's
    assert helped is False and 0.3 <= took < 10 and left is False
