"""What the doctor layers share while they run: :class:`Context`."""

from __future__ import annotations

import os
from typing import Any

from ..core.hostroot import HostRoot
from ..engines.common import under_root

__all__ = ["Context"]


class Context:
    """What the layers share: the host root, discovery's result, facts for the record.

    Attributes:
        root: the host read.
        config_root: root under which engine files and CDI spec dirs are read.
        host: the :class:`~ocihook.discovery.nvidia.NvidiaHost`, or ``None``.
        facts: values gathered for the deployment record (driver, CUDA, engines...).
    """

    def __init__(self, root: HostRoot, config_root: str = "/") -> None:
        self.root = root
        self.config_root = os.path.abspath(config_root)
        self.host: Any = None
        self.facts: dict[str, Any] = {}

    def etc(self, path: str) -> str:
        """``path`` (absolute) under :attr:`config_root`."""
        return under_root(self.config_root, path)
