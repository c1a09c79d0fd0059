"""``ocihook k8s features`` without the k8s extra."""

from __future__ import annotations

from typing import Any


def test_features_needs_no_grpc(sim: Any) -> None:
    """``k8s features`` only prints: it runs where the k8s extra (grpcio) is missing."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['grpc'] = None; sys.modules['google.protobuf'] = None\n"
        "from ocihook._main import main\n"
        f"sys.exit(main(['k8s', 'features', '--driver-root', {sim.root!r}, "
        f"'--dev-root', {sim.root!r}]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "ocihook.io/" in out.stdout
