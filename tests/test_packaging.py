"""The published artifacts: `python -m build` makes a wheel and an sdist that `twine check`
passes; the wheel, installed in a clean virtualenv, gives `import taskq` (typed: py.typed),
a working `taskq --version` and `taskq demo --no-spark`, and registers the pytest plugin.

Built from a copy of the sources (as a fresh clone has them) without build isolation, and
installed with `--no-deps` into a venv whose dependencies come from this environment's
site-packages (a `.pth` line): no download at run time, and only the wheel's own `taskq`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import ROOT

SOURCES = ("pyproject.toml", "README.md", "taskq", "workers", "dlq")


def run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, f"{cmd}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.heavy
def test_build_check_install_and_run(tmp_path: Path) -> None:
    source = tmp_path / "taskq-src"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy(ROOT / name, source / name)
    # Given the wheel and sdist built from the sources
    run(
        sys.executable,
        "-m",
        "build",
        "--no-isolation",
        "--outdir",
        tmp_path / "dist",
        source,
        cwd=tmp_path,
    )
    [wheel] = (tmp_path / "dist").glob("taskq-*.whl")
    [sdist] = (tmp_path / "dist").glob("taskq-*.tar.gz")
    assert "PASSED" in run(
        sys.executable, "-m", "twine", "check", "--strict", wheel, sdist, cwd=tmp_path
    )
    # When the wheel is installed in a clean venv
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    site = Path(
        run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp_path
        ).strip()
    )
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=tmp_path,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TASKQ_NATS_SERVER"] = str(Path(sys.executable).parent / "nats-server")
    # Then taskq is the wheel's, typed, and its commands work
    where = run(python, "-c", IMPORTS, cwd=tmp_path, env=env).split()
    assert where[0].startswith(str(site)) and where[1:] == ["True", "True"], where
    assert run(bin_dir / "taskq", "--version", cwd=tmp_path, env=env) == "taskq, version 0.1.0\n"
    demo = run(bin_dir / "taskq", "demo", "--no-spark", "--tasks", "50", cwd=tmp_path, env=env)
    assert "succeeded" in demo.lower(), demo


IMPORTS = """
import importlib.metadata, pathlib, taskq, taskq.workers, taskq.dlq, taskq.testing
package = pathlib.Path(taskq.__file__).parent
plugins = [e.value for e in importlib.metadata.entry_points(group="pytest11")]
print(taskq.__file__, (package / "py.typed").exists(), "taskq.testing.plugin" in plugins)
"""
