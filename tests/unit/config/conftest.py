"""Fixtures of the ``ocihook.config`` tests: no test reads the machine's configuration."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ocihook.config import load


@pytest.fixture(autouse=True)
def _no_default_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests never read the machine's /etc/ocihook/config.toml or OCIHOOK_CONFIG: the
    default file is ``<tmp_path>/etc-ocihook/config.toml`` (absent unless a test makes it)."""
    monkeypatch.setattr(load, "DEFAULT_PATH", str(tmp_path / "etc-ocihook" / "config.toml"))
    monkeypatch.delenv("OCIHOOK_CONFIG", raising=False)


@pytest.fixture
def config_file(tmp_path: Path) -> Callable[..., str]:
    """``config_file(text, name="config.toml") -> path``: ``text`` (str: UTF-8, or bytes)
    written to ``<tmp_path>/<name>``."""

    def write(text: str | bytes, name: str = "config.toml") -> str:
        path = tmp_path / name
        path.write_bytes(text.encode() if isinstance(text, str) else text)
        return str(path)

    return write
