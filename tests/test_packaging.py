"""What ``pip install`` gets: the sdist and the wheel, built from this checkout as PyPI would."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def source_files() -> list[str]:
    """The checkout's files as a fresh clone has them (git's view when there is one)."""
    if shutil.which("git") and (ROOT / ".git").exists():
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        return [name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]
    skipped = {".venv", ".git", "build", "dist", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis"}
    return [
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*")
        if path.is_file()
        and not skipped.intersection(path.relative_to(ROOT).parts)
        and not path.name.endswith((".so", ".pyc"))
        and not any(part.endswith(".egg-info") for part in path.relative_to(ROOT).parts)
    ]


def build_dists(out: Path) -> None:
    """Builds as pip does from PyPI: the sdist from the sources, then the wheel from the sdist. It
    runs on a copy of the checkout: a build writes egg-info and a staging folder where it runs, and
    the checkout's own (an editable install's) must not take part."""
    tree = out / "tree"
    for name in source_files():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, tree / name)
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out / "dist"), str(tree)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    # pytest-xdist workers share the parent of their temporary folders: the first builds, under a
    # lock, and the others take its files
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent
    out = shared / "packaging"
    out.mkdir(exist_ok=True)
    with open(out / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "built").exists():
            build_dists(out)
            (out / "built").touch()
    (sdist,) = (out / "dist").glob("*.tar.gz")
    (wheel,) = (out / "dist").glob("*.whl")
    return sdist, wheel


def test_the_wheel_is_abi3_typed_and_licensed(dists):
    _, wheel = dists
    assert wheel.name.endswith("-cp310-abi3-linux_x86_64.whl") or "-cp310-abi3-" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert "delegate/py.typed" in names
    assert "delegate/_native.abi3.so" in names
    assert "delegate/_litert_accelerator.abi3.so" in names  # LiteRT's GPU accelerator (delegate/litert.py)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith("tests/") for n in names)


def test_the_metadata_states_license_urls_classifiers_and_hosts(dists):
    _, wheel = dists
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    metadata = Parser().parsestr(text)
    assert metadata["License-Expression"] == "Apache-2.0"
    urls = metadata.get_all("Project-URL") or []
    assert any(u.startswith("Homepage, https://") for u in urls) and any(u.startswith("Issues, ") for u in urls)
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert {f"Programming Language :: Python :: 3.{minor}" for minor in (10, 11, 12, 13)} <= set(classifiers)
    requires = metadata.get_all("Requires-Dist") or []
    assert "ai-edge-litert>=2.0" in requires
    # tflite-runtime and a numpy < 2 bound only come with the extra that asks for them
    assert all("extra ==" in r for r in requires if r.startswith("tflite-runtime") or ("<2" in r and "numpy" in r))
    assert metadata["Requires-Python"] == ">=3.10"


def test_the_sdist_carries_docs_schemas_license_and_sources(dists):
    sdist, _ = dists
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    for needed in (
        "LICENSE",
        "README.md",
        "schemas/serialization.fbs",
        "schemas/configuration.proto",
        "docs/runtime.md",
        "docs/plugin.md",
        "csrc/plugin.c",
        "delegate/py.typed",
    ):
        assert needed in names, needed
    assert not any(n.endswith((".so", ".pyc")) for n in names)


def test_build_requires_match_the_license_metadata():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requires = project["build-system"]["requires"]
    # A PEP 639 license expression (a string `license`) and license-files need setuptools 77+.
    assert isinstance(project["project"]["license"], str)
    setuptools = next(r for r in requires if r.startswith("setuptools"))
    assert setuptools == "setuptools>=77"


def test_the_wheel_registers_the_pytest_plugin(dists):
    _, wheel = dists
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt"))).decode()
    section = text.split("[pytest11]", 1)[1].split("\n[", 1)[0] if "[pytest11]" in text else ""
    assert "delegate.pytest_plugin = delegate.pytest_plugin" in section, text
    assert "delegate/pytest_plugin.py" in zipfile.ZipFile(wheel).namelist()
