"""The parsed configuration cached by content (``ocihook.config.load.parse_config_bytes``
through ``ocihook.linux.cachestore``): the same document as tomllib gives, never a stale
one."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ocihook.config.load import load_config, parse_config_bytes
from ocihook.core.errors import ConfigError
from ocihook.linux import cachestore


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
