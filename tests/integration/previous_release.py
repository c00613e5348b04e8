"""The previous release installed into a virtualenv of its own, from its git tag, offline.

``git archive <tag>`` unpacks the release's tree; a wheel is assembled from it as its
``pyproject.toml`` says hatch builds one (``[tool.hatch.build.targets.wheel]``: the packages,
plus each ``force-include``), because the build backend (hatchling) is only ever present in
pip's isolated build environments, which need the network; then ``pip install --no-deps
--no-index`` installs that wheel into ``python -m venv DIR`` (its ``fleet`` console script
included). The release's dependencies are this interpreter's: a ``.pth`` file in the new venv
names this venv's site-packages (``--system-site-packages`` would name the base interpreter's,
not this venv's). Nothing of this checkout is on the new venv's path.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import site
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class NoTag(LookupError):
    """The repository has no such tag (a shallow clone, an export without history)."""


@dataclass(frozen=True)
class Release:
    """An installed release: its venv and the ``fleet`` command it installed."""

    tag: str
    venv: Path

    @property
    def fleet(self) -> Path:
        return self.venv / "bin" / "fleet"

    def env(self) -> dict[str, str]:
        """This environment without the ``PYTHONPATH`` (it would put a checkout first); on a
        cluster the suite did not start it keeps only the folder that gives it its login."""
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        login = Path(__file__).parents[1] / "external_login"  # a cluster's login, not our code
        if str(login) in os.environ.get("PYTHONPATH", "").split(os.pathsep):
            env["PYTHONPATH"] = str(login)
        return env


def unpack(tag: str, into: Path) -> Path:
    """The tree of ``tag`` (``git archive``), unpacked under ``into``."""
    done = subprocess.run(["git", "-C", str(REPO), "archive", tag], capture_output=True,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise NoTag(f"no tag {tag} in {REPO}: {done.stderr.decode()[-200:]}")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(tree: Path, out: Path) -> Path:
    """A ``py3-none-any`` wheel of ``tree`` with the file layout its hatch config gives."""
    meta = tomllib.loads((tree / "pyproject.toml").read_text())
    project, hatch = meta["project"], meta["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert meta["build-system"]["build-backend"] == "hatchling.build", meta["build-system"]
    files: dict[str, bytes] = {}
    for package in hatch["packages"]:
        for path in sorted((tree / package).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files[path.relative_to(tree).as_posix()] = path.read_bytes()
    for source, target in hatch.get("force-include", {}).items():
        for path in sorted((tree / source).rglob("*")):
            if path.is_file():
                files[f"{target}/{path.relative_to(tree / source).as_posix()}"] = path.read_bytes()
    name, version = project["name"], project["version"]
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    requires = "".join(f"Requires-Dist: {d}\n" for d in project.get("dependencies", []))
    files[f"{dist}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        f"Requires-Python: {project.get('requires-python', '')}\n{requires}"
    ).encode()
    files[f"{dist}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: tests/integration/previous_release.py\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n"
    )
    scripts = project.get("scripts", {})
    files[f"{dist}/entry_points.txt"] = (
        "[console_scripts]\n" + "".join(f"{k} = {v}\n" for k, v in scripts.items())
    ).encode()
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for path, data in files.items():
        writer.writerow([path, _hash(data), len(data)])
    writer.writerow([f"{dist}/RECORD", "", ""])
    files[f"{dist}/RECORD"] = record.getvalue().encode()
    wheel = out / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return wheel


def install(tag: str, root: Path) -> Release:
    """``tag`` installed into ``root/venv`` (no network: no index, no dependencies fetched)."""
    tree = unpack(tag, root / "src")
    wheel = build_wheel(tree, root)
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    # this venv's packages after the release's own (a .pth line is appended to sys.path)
    (Path(purelib) / "previous_release_deps.pth").write_text("\n".join(site.getsitepackages()))
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", "--disable-pip-version-check", str(wheel)],
        env=Release(tag, venv).env(), check=True,
    )  # fmt: skip
    return Release(tag, venv)
