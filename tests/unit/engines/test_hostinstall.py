"""``ocihook k8s install`` / ``uninstall`` (:mod:`ocihook.engines.hostinstall`) against a
fake host root in tmp: the payload copied under the prefix with the launcher, the
engine detected from the host's files and configured, the record; installing twice
writes nothing; uninstall restores the engine's file byte for byte and leaves the host
as it was; every refusal is one line and exit 13, nothing written outside the host root.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import pytest
from support import run_cli

from ocihook.core.errors import EngineConfigError
from ocihook.engines import hostinstall
from ocihook.engines.hostinstall import (
    PREFIX,
    RECORD,
    detect_engine,
    plan_install,
    plan_uninstall,
)

#: containerd 1.7's file as a node has it (version 2, runc under the CRI plugin).
CONTAINERD_TOML = b"""\
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = true
"""
CRI = "io.containerd.grpc.v1.cri"
OLD_MTIME = 1_700_000_000.0


def _payload(tmp_path: Path, *, extra: dict[str, bytes] | None = None) -> Path:
    """A payload list and its sources as the image has them (a small stand-in for the
    interpreter, loader, libraries and modules)."""
    src = tmp_path / "image"
    files = {
        "libexec/python3": (b"\x7fELF python3.11", 0o755),
        "lib/ld.so": (b"\x7fELF ld-linux-x86-64.so.2", 0o755),
        "lib/libc.so.6": (b"\x7fELF libc", 0o644),
        "lib/python3.11/os.py": (b"# os\n", 0o644),
        "lib/python3.11/__pycache__/os.cpython-311.pyc": (b"pyc", 0o644),
        "lib/python3/dist-packages/ocihook/__init__.py": (b"# ocihook\n", 0o644),
        "bin/ocihook": (b"#!/bin/sh\n# ocihook\n", 0o755),
        "bin/ocihook-runtime": (b"#!/bin/sh\n# runtime\n", 0o755),
        "bin/nvidia-container-runtime-hook": (b"#!/bin/sh\n# hook\n", 0o755),
    }
    for name, data in (extra or {}).items():
        files[name] = (data, 0o644)
    lines = ["# dest\tsource"]
    for dest, (data, mode) in files.items():
        path = src / dest
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
        os.utime(path, (OLD_MTIME, OLD_MTIME))
        lines.append(f"{dest}\t{path}")
    listing = tmp_path / f"payload-{len(files)}.list"
    listing.write_text("\n".join(lines) + "\n")
    return listing


def _host(tmp_path: Path, *, config: bytes | None = CONTAINERD_TOML) -> Path:
    """A node's / with containerd: its socket (a plain file here), its configuration."""
    host = tmp_path / "host"
    for d in ("usr/local/bin", "run/containerd", "etc/containerd"):
        (host / d).mkdir(parents=True)
    (host / "run/containerd/containerd.sock").touch()
    if config is not None:
        (host / "etc/containerd/config.toml").write_bytes(config)
    return host


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with a file's bytes (``None`` for a directory)."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = Path(p).read_bytes()
    return out


def _install(host: Path, listing: Path, *args: str) -> tuple[int, str]:
    proc = run_cli("k8s", "install", "--host-root", str(host), "--payload", str(listing), *args)
    return proc.returncode, proc.stderr


def test_install_copies_the_payload_and_registers_with_containerd(tmp_path: Path) -> None:
    host, listing = _host(tmp_path), _payload(tmp_path)
    rc, err = _install(host, listing)
    assert rc == 0, err
    prefix = host / PREFIX.lstrip("/")
    assert (prefix / "lib/python3/dist-packages/ocihook/__init__.py").read_bytes() == (
        b"# ocihook\n"
    )
    assert (prefix / "libexec/python3").stat().st_mode & 0o777 == 0o755
    assert (prefix / "lib/libc.so.6").stat().st_mode & 0o777 == 0o644
    # the copied .pyc stays valid: the source's mtime is kept
    assert (prefix / "lib/python3.11/os.py").stat().st_mtime == OLD_MTIME
    launcher = (prefix / "bin/python3").read_text()
    assert launcher.startswith("#!/bin/sh\n")
    assert launcher.endswith(
        'exec "$p/lib/ld.so" --argv0 "$p/bin/python3" --library-path "$p/lib" '
        '"$p/libexec/python3" "$@"\n'
    )
    assert "p=/usr/local/ocihook\n" in launcher
    assert (prefix / "bin/python3").stat().st_mode & 0o777 == 0o755
    assert (prefix / "bin/ocihook").read_bytes() == b"#!/bin/sh\n# ocihook\n"
    assert (prefix / "bin/ocihook-runtime").stat().st_mode & 0o777 == 0o755
    # containerd: the ocihook runtime is ocihook-runtime as the host sees it, CDI on
    conf = tomllib.loads((host / "etc/containerd/config.toml").read_text())
    cri = conf["plugins"][CRI]
    runtime = cri["containerd"]["runtimes"]["ocihook"]
    assert runtime["options"]["BinaryName"] == "/usr/local/ocihook/bin/ocihook-runtime"
    assert runtime["options"]["SystemdCgroup"] is True  # copied from runc
    assert cri["enable_cdi"] is True
    assert cri["containerd"]["default_runtime_name"] == "runc"
    record = json.loads((prefix / RECORD).read_text())
    assert record["engine"] == "containerd"
    assert bytes.fromhex(record["before"]) == CONTAINERD_TOML
    assert "bin/ocihook" in record["files"]
    assert "bin/python3" in record["files"]
    assert "restart containerd on the node" in err
    assert "10 files written" in err, err


def test_install_twice_writes_nothing_and_keeps_the_original(tmp_path: Path) -> None:
    host, listing = _host(tmp_path), _payload(tmp_path)
    assert _install(host, listing)[0] == 0
    first = _tree(host)
    plan = plan_install(str(host), payload_list=str(listing))
    assert plan.writes == ()
    assert plan.change is not None and not plan.change.changed
    assert plan.removes == ()
    rc, err = _install(host, listing)
    assert rc == 0
    assert "0 files written (0 KiB), 10 unchanged" in err
    assert "already configured; unchanged" in err
    assert _tree(host) == first  # the record too: the original bytes are still there


def test_uninstall_restores_the_host_as_it_was(tmp_path: Path) -> None:
    host, listing = _host(tmp_path), _payload(tmp_path)
    before = _tree(host)
    assert _install(host, listing)[0] == 0
    # the interpreter wrote a .pyc of its own for a module that had none
    cache = host / PREFIX.lstrip("/") / "lib/python3/dist-packages/ocihook/__pycache__"
    cache.mkdir()
    (cache / "__init__.cpython-311.pyc").write_bytes(b"pyc")
    proc = run_cli("k8s", "uninstall", "--host-root", str(host))
    assert proc.returncode == 0, proc.stderr
    assert _tree(host) == before
    assert "/etc/containerd/config.toml: restored" in proc.stderr
    again = run_cli("k8s", "uninstall", "--host-root", str(host))
    assert again.returncode == 0
    assert again.stderr == "ocihook: /usr/local/ocihook: not installed; nothing to do\n"


def test_uninstall_removes_an_engine_file_the_install_made(tmp_path: Path) -> None:
    host, listing = _host(tmp_path, config=None), _payload(tmp_path)
    before = _tree(host)
    assert _install(host, listing)[0] == 0
    assert (host / "etc/containerd/config.toml").exists()
    plan = plan_uninstall(str(host))
    assert plan.restore == ("/etc/containerd/config.toml", None)
    hostinstall.apply_uninstall(plan)
    assert _tree(host) == before


def test_uninstall_refuses_an_engine_file_changed_since(tmp_path: Path) -> None:
    host, listing = _host(tmp_path), _payload(tmp_path)
    assert _install(host, listing)[0] == 0
    conf = host / "etc/containerd/config.toml"
    conf.write_bytes(conf.read_bytes() + b"# edited by the operator\n")
    installed = _tree(host)
    proc = run_cli("k8s", "uninstall", "--host-root", str(host))
    assert proc.returncode == 13
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "changed since ocihook was installed" in proc.stderr
    assert _tree(host) == installed
    # the operator's way out: the files only
    proc = run_cli("k8s", "uninstall", "--host-root", str(host), "--keep-engine-config")
    assert proc.returncode == 0, proc.stderr
    assert not (host / "usr/local/ocihook").exists()
    assert conf.read_bytes().endswith(b"# edited by the operator\n")


def test_upgrade_removes_what_the_new_payload_lacks(tmp_path: Path) -> None:
    host = _host(tmp_path)
    old = _payload(tmp_path, extra={"lib/python3/dist-packages/gone/__init__.py": b""})
    assert _install(host, old)[0] == 0
    gone = host / "usr/local/ocihook/lib/python3/dist-packages/gone"
    assert gone.exists()
    new = _payload(tmp_path)
    plan = plan_install(str(host), payload_list=str(new))
    assert plan.removes == ("lib/python3/dist-packages/gone/__init__.py",)
    hostinstall.apply_install(plan)
    assert not gone.exists()
    # the record still holds the file from before the first install
    record = json.loads((host / "usr/local/ocihook" / RECORD).read_text())
    assert bytes.fromhex(record["before"]) == CONTAINERD_TOML


def test_crio_detected_and_configured(tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "etc/crio/crio.conf.d").mkdir(parents=True)
    (host / "usr/local").mkdir(parents=True)
    assert detect_engine(str(host)) == "crio"
    rc, err = _install(host, _payload(tmp_path))
    assert rc == 0, err
    conf = tomllib.loads((host / "etc/crio/crio.conf.d/99-ocihook.conf").read_text())
    ocihook = conf["crio"]["runtime"]["runtimes"]["ocihook"]
    assert ocihook["runtime_path"] == "/usr/local/ocihook/bin/ocihook-runtime"
    assert run_cli("k8s", "uninstall", "--host-root", str(host)).returncode == 0
    assert _tree(host) == {
        "etc": None,
        "etc/crio": None,
        "etc/crio/crio.conf.d": None,
        "usr": None,
        "usr/local": None,
    }


def test_detect_engine_refuses_none_and_a_tie(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    with pytest.raises(EngineConfigError, match="no container engine found"):
        detect_engine(str(host))
    (host / "etc/containerd").mkdir(parents=True)
    (host / "etc/containerd/config.toml").touch()
    (host / "etc/crio").mkdir()
    (host / "etc/crio/crio.conf").touch()
    with pytest.raises(EngineConfigError, match="both containerd and CRI-O"):
        detect_engine(str(host))
    # a socket tells more than a file: containerd runs
    (host / "run/containerd").mkdir(parents=True)
    (host / "run/containerd/containerd.sock").touch()
    assert detect_engine(str(host)) == "containerd"
    rc, err = _install(host, _payload(tmp_path), "--runtime", "none", "--dry-run")
    assert rc == 0 and "would be written" in err
    assert not (host / "usr").exists()


def test_nothing_is_written_outside_the_host_root(tmp_path: Path) -> None:
    host, listing = _host(tmp_path), _payload(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    # the host's prefix is a link to an absolute path: it is the host's path, in the root
    (host / "usr/local/ocihook").symlink_to(outside)
    (host / "etc/containerd/config.toml").unlink()
    (host / "etc/containerd/config.toml").symlink_to("../../../../../" + str(outside / "c"))
    rc, err = _install(host, listing)
    assert rc == 0, err
    assert list(outside.iterdir()) == []
    assert (host / str(outside).lstrip("/") / "bin/ocihook").is_file()
    assert (host / str(outside).lstrip("/") / "c").is_file()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("../../etc/passwd\t/etc/hostname", "unsafe payload path '../../etc/passwd'"),
        ("/etc/x\t/etc/hostname", "unsafe payload path '/etc/x'"),
        ("bin/ocihook\t/etc/hostname", "'bin/ocihook' is named twice or reserved"),
        ("bin/python3\t/etc/hostname", "'bin/python3' is named twice or reserved"),
        ("lib/x relative", "is not DEST<TAB>/SOURCE"),
    ],
)
def test_bad_payload_lists_are_refused_in_one_line(tmp_path: Path, line: str, message: str) -> None:
    host, listing = _host(tmp_path), _payload(tmp_path)
    listing.write_text(listing.read_text() + line + "\n")
    before = _tree(host)
    rc, err = _install(host, listing)
    assert rc == 13
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert _tree(host) == before


def test_missing_payload_and_missing_parts(tmp_path: Path) -> None:
    host = _host(tmp_path)
    rc, err = _install(host, tmp_path / "nope.list")
    assert rc == 13 and "no payload list: this is not ocihook's image" in err
    listing = _payload(tmp_path)
    listing.write_text(
        "".join(ln + "\n" for ln in listing.read_text().splitlines() if "ld.so" not in ln)
    )
    rc, err = _install(host, listing)
    assert rc == 13 and "the payload lacks lib/ld.so" in err


def test_a_malformed_engine_file_is_refused_and_left(tmp_path: Path) -> None:
    host = _host(tmp_path, config=b"version = 2\n[plugins\n")
    before = _tree(host)
    rc, err = _install(host, _payload(tmp_path))
    assert rc == 13 and len(err.strip().splitlines()) == 1, err
    assert _tree(host) == before


#: containerd 1.7's file with the CRI table but no ``containerd`` sub-table, indented as
#: ``containerd config default`` writes: configure used to re-indent what it added on
#: every run, so a second install rewrote the file.
NO_CONTAINERD_TABLE = b"""\
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "registry.k8s.io/pause:3.9"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/opt/cni/bin"
"""


def test_install_twice_and_uninstall_without_a_containerd_table(tmp_path: Path) -> None:
    host, listing = _host(tmp_path, config=NO_CONTAINERD_TABLE), _payload(tmp_path)
    before = _tree(host)
    assert _install(host, listing)[0] == 0
    first = _tree(host)
    rc, err = _install(host, listing)
    assert rc == 0 and "already configured; unchanged" in err, err
    assert _tree(host) == first
    proc = run_cli("k8s", "uninstall", "--host-root", str(host))
    assert proc.returncode == 0, proc.stderr
    assert _tree(host) == before


def test_commands_are_written_after_the_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upgrade writes the commands of ``bin/`` last: cut short, the node never runs a new
    command against the library it has not replaced yet (the payload list is sorted, so
    ``bin/`` would come first)."""
    host = _host(tmp_path)
    plan = plan_install(str(host), payload_list=str(_payload(tmp_path)))
    # in the order of the image's payload list, which is sorted: bin/ first
    plan = plan.replace(writes=tuple(sorted(plan.writes, key=lambda s: s.path)))
    assert plan.writes[0].path.startswith("bin/")
    written: list[str] = []
    real = hostinstall._write

    def record(root_fd: int, path: str, *args: object, **kwargs: object) -> None:
        written.append(os.path.relpath(path, PREFIX))
        real(root_fd, path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(hostinstall, "_write", record)
    hostinstall.apply_install(plan)
    files = [p for p in written if p != RECORD]
    first_command = next(i for i, p in enumerate(files) if p.startswith("bin/"))
    assert files[first_command:] == [p for p in files if p.startswith("bin/")]
    assert "lib/python3/dist-packages/ocihook/__init__.py" in files[:first_command]
    assert written[-1] == RECORD
