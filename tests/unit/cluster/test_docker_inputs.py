"""The base image and wheelhouse inputs: mirror discovery, cache keys, requirements and lock."""

from __future__ import annotations

import hashlib
import os
import sys
import tarfile
from pathlib import Path

import pytest

from flows.cluster.build.base_image import (
    BaseImageSpec,
    host_mirror,
    mirror_from_sources,
    rootfs_tarball,
)
from flows.cluster.build.wheelhouse import (
    WheelhouseSpec,
    engine_requirements,
    ensure_wheelhouse,
    lock_text,
)
from flows.errors import BuildError, SpecError

DEB822 = """Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
"""


def test_mirror_from_deb822_sources() -> None:
    assert mirror_from_sources([DEB822], "bookworm") == "http://deb.debian.org/debian"


def test_mirror_from_one_line_sources_with_options() -> None:
    text = (
        "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main\n"
    )
    assert mirror_from_sources([text], "bookworm") == "http://mirror.example/debian"


def test_no_mirror_for_another_suite(tmp_path: Path) -> None:
    assert mirror_from_sources([DEB822], "trixie") is None
    (tmp_path / "sources.list").write_text("deb http://x/debian trixie main\n")
    with pytest.raises(BuildError, match="no apt source for Debian bookworm"):
        host_mirror("bookworm", tmp_path)


def test_base_tag_is_stable_and_follows_its_inputs() -> None:
    spec = BaseImageSpec(mirror="http://deb.debian.org/debian")
    same = BaseImageSpec(mirror="http://deb.debian.org/debian")
    assert spec.tag == same.tag
    assert spec.tag.startswith("sparkgate-base:bookworm-")
    more = BaseImageSpec(mirror=spec.mirror, packages=(*spec.packages, "procps"))
    assert more.tag != spec.tag
    assert BaseImageSpec(mirror="http://other/debian").tag != spec.tag


def write_pyproject(path: Path) -> Path:
    path.write_text(
        '[build-system]\nrequires = ["setuptools>=69", "wheel"]\n'
        '[project]\nname = "e"\ndependencies = ["numpy>=2.0", "aiohttp>=3.11"]\n'
        '[project.optional-dependencies]\ntest = ["pytest>=8.3", "numpy>=2.0"]\n'
    )
    return path


def test_requirements_are_runtime_test_and_build_deps_once(tmp_path: Path) -> None:
    requirements = engine_requirements(write_pyproject(tmp_path / "pyproject.toml"))
    assert requirements == ("numpy>=2.0", "aiohttp>=3.11", "pytest>=8.3", "setuptools>=69", "wheel")


def test_a_missing_extra_names_the_file_and_key(tmp_path: Path) -> None:
    pyproject = write_pyproject(tmp_path / "pyproject.toml")
    with pytest.raises(SpecError) as caught:
        engine_requirements(pyproject, extras=("gpu",))
    assert str(pyproject) in str(caught.value)
    assert "project.optional-dependencies" in str(caught.value)


def test_unreadable_pyproject_is_a_spec_error(tmp_path: Path) -> None:
    bad = tmp_path / "pyproject.toml"
    bad.write_text("[project\n")
    with pytest.raises(SpecError, match="cannot read engine requirements"):
        engine_requirements(bad)


def test_wheelhouse_key_ignores_requirement_order_only() -> None:
    one = WheelhouseSpec(requirements=("a", "b"))
    assert one.digest() == WheelhouseSpec(requirements=("b", "a")).digest()
    assert one.digest() != WheelhouseSpec(requirements=("a", "b"), machine="aarch64").digest()
    assert one.digest() != WheelhouseSpec(requirements=("a", "b>=2")).digest()


def test_platforms_cover_every_glibc_the_image_accepts() -> None:
    platforms = WheelhouseSpec(requirements=(), machine="aarch64").platforms()
    assert platforms[0] == "manylinux_2_36_aarch64"
    assert "manylinux_2_17_aarch64" in platforms
    assert platforms[-1] == "manylinux_2_5_aarch64"


def test_lock_pins_every_wheel_with_its_hash(tmp_path: Path) -> None:
    numpy = tmp_path / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl"
    typing = tmp_path / "typing_extensions-4.16.0-py3-none-any.whl"
    numpy.write_bytes(b"n")
    typing.write_bytes(b"t")
    lock = lock_text([typing, numpy])
    sha = hashlib.sha256(b"n").hexdigest()
    assert lock.splitlines() == [
        f"numpy==2.4.6 --hash=sha256:{sha}",
        f"typing-extensions==4.16.0 --hash=sha256:{hashlib.sha256(b't').hexdigest()}",
    ]


def test_a_stray_file_in_a_wheelhouse_is_refused(tmp_path: Path) -> None:
    stray = tmp_path / "numpy.tar.gz"
    stray.write_bytes(b"")
    with pytest.raises(BuildError, match="unexpected file"):
        lock_text([stray])


FAKE_PIP = """
import sys, pathlib
args = sys.argv[1:]
calls = pathlib.Path(__file__).with_name("calls")
calls.write_text(calls.read_text() + "x" if calls.exists() else "x")
if "broken>=1" in args:
    print("ERROR: No matching distribution found for broken>=1", file=sys.stderr)
    sys.exit(1)
dest = pathlib.Path(next(a for a in args if a.startswith("--dest=")).split("=", 1)[1])
dest.mkdir(parents=True, exist_ok=True)
(dest / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"numpy")
"""


def fake_pip(tmp_path: Path) -> tuple[list[str], Path]:
    script = tmp_path / "pip.py"
    script.write_text(FAKE_PIP)
    return [sys.executable, str(script)], tmp_path / "calls"


def test_wheelhouse_is_downloaded_once_then_cached(tmp_path: Path) -> None:
    pip, calls = fake_pip(tmp_path)
    spec = WheelhouseSpec(requirements=("numpy>=2.0",))
    said: list[str] = []
    first = ensure_wheelhouse(spec, tmp_path / "cache", pip, say=said.append)
    second = ensure_wheelhouse(spec, tmp_path / "cache", pip, say=said.append)
    assert calls.read_text() == "x"
    assert said == ["wheelhouse: downloading the engine's dependencies"]  # the miss only
    assert first == second
    assert first.lock.startswith("numpy==2.4.6 --hash=sha256:")
    assert (first.directory / "requirements.lock").read_text() == first.lock


def test_a_failed_download_is_a_build_error_and_caches_nothing(tmp_path: Path) -> None:
    pip, _ = fake_pip(tmp_path)
    spec = WheelhouseSpec(requirements=("broken>=1",))
    with pytest.raises(BuildError, match="No matching distribution found for broken"):
        ensure_wheelhouse(spec, tmp_path / "cache", pip)
    assert list((tmp_path / "cache").iterdir()) == []


FAKE_DEBOOTSTRAP = """#!/bin/sh
# fake debootstrap: ARGS... SUITE TARGET MIRROR
echo run >> "$CALLS"
eval target=\\${$(($# - 1))}
if [ "$FAIL" = 1 ]; then echo "E: Couldn't download packages: python3"; exit 1; fi
mkdir -p "$target/usr/bin" "$target/var/lib/apt/lists"
echo python > "$target/usr/bin/python3"
echo junk > "$target/var/lib/apt/lists/index"
"""


@pytest.fixture
def fake_debootstrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "debootstrap"
    script.write_text(FAKE_DEBOOTSTRAP)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    return tmp_path / "calls"


def test_rootfs_is_built_once_slimmed_and_cached(tmp_path: Path, fake_debootstrap: Path) -> None:
    spec = BaseImageSpec(mirror="http://deb.debian.org/debian")
    first = rootfs_tarball(spec, tmp_path / "cache")
    second = rootfs_tarball(spec, tmp_path / "cache")
    assert first == second
    assert fake_debootstrap.read_text() == "run\n"
    with tarfile.open(first) as tar:
        names = tar.getnames()
    assert "./usr/bin/python3" in names
    assert "./var/lib/apt/lists/index" not in names
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.name]


def test_a_failed_debootstrap_names_the_mirror_and_shows_its_log(
    tmp_path: Path, fake_debootstrap: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAIL", "1")
    spec = BaseImageSpec(mirror="http://deb.debian.org/debian")
    with pytest.raises(BuildError, match=r"from http://deb\.debian\.org/debian failed") as caught:
        rootfs_tarball(spec, tmp_path / "cache")
    assert "Couldn't download packages" in str(caught.value)
    assert list((tmp_path / "cache").iterdir()) == []
