"""The parsed configuration cached by content (ocihook.config._parse through
ocihook.discovery.cache): the same document as tomllib gives, never a stale one."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from ocihook import config
from ocihook.discovery import cache


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    d.mkdir()
    monkeypatch.setattr(cache, "DEFAULT_DIR", str(d))
    return d


TEXT = 'driver-root = "/"\nlibrary-path = ["/opt/lib"]\nlog-level = "info"\n'


def test_cached_parse_is_tomllibs(cache_dir: Path, tmp_path: Path) -> None:
    f = tmp_path / "config.toml"
    f.write_text(TEXT)
    first = config.load_config(str(f))
    (_entry,) = cache_dir.glob("config-*.json")
    assert config._parse(TEXT.encode(), str(f)) == tomllib.loads(TEXT)
    assert config.load_config(str(f)) == first
    # other bytes: another entry, parsed again, never the old document
    f.write_text(TEXT.replace('"/"', '"/srv"'))
    assert config.load_config(str(f)).driver_root == "/srv"
    assert len(list(cache_dir.glob("config-*.json"))) == 2


def test_a_tampered_entry_is_not_used(cache_dir: Path, tmp_path: Path) -> None:
    config._parse(TEXT.encode(), "x")
    (entry,) = cache_dir.glob("config-*.json")
    entry.write_text(entry.read_text().replace("/opt/lib", "/evil"))
    # still the key's text: the value was changed by someone who may write there
    entry.chmod(0o666)
    assert config._parse(TEXT.encode(), "x") == tomllib.loads(TEXT)


def test_errors_are_not_cached(cache_dir: Path) -> None:
    for _ in range(2):
        with pytest.raises(config.ConfigError, match="invalid TOML"):
            config._parse(b"a = [", "x")
    assert not list(cache_dir.glob("config-*.json"))


def test_no_directory_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache, "DEFAULT_DIR", str(tmp_path / "none"))
    assert config._parse(TEXT.encode(), "x") == tomllib.loads(TEXT)
    assert not (tmp_path / "none").exists()
