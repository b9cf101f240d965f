"""The package as users get it: a wheel built with the standard build
backend, installed into a fresh virtualenv, imported from there."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


def test_wheel_installs_into_a_fresh_venv(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # No build isolation: the backend (hatchling) is installed with the test
    # extras, and an isolated build would download it again.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(PACKAGE),
        ],
        check=True,
    )
    [wheel] = dist.glob("delayd-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "delayd/py.typed" in names and "delayd/client.py" in names
    assert not any(n.startswith("tests/") for n in names)

    env = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    py = env / "bin" / "python"
    # This interpreter's pip installs into the venv (same Python version):
    # seeding the venv with its own pip would take longer than the test.
    # (--ignore-installed: else pip would uninstall the delayd it runs the tests with.)
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed"]
    pip += ["--disable-pip-version-check"]
    subprocess.run(pip + ["--prefix", str(env), str(wheel)], check=True)
    # httpx (the one dependency) comes from this interpreter's site-packages;
    # delayd itself only from the fresh venv.
    deps = [p for p in sys.path if p.endswith("site-packages")]
    code = "import delayd, sys; print(delayd.__file__); print(delayd.__version__)"
    env_vars = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [str(py), "-c", f"import sys; sys.path += {deps!r}; " + code],
        check=True,
        capture_output=True,
        text=True,
        env=env_vars,
    ).stdout.split()
    assert out[0].startswith(str(env)) and out[1] == "0.1.0"
