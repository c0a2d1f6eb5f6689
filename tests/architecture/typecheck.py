"""`mypy --strict` on the packages under their installed names, and its cache.

mypy does not follow editable-install import hooks, so it checks a staged copy where
workers/ and dlq/ sit inside taskq/. Its cache lives in the clone (`.mypy_cache/staged`):
a cold run reads the sources of what taskq imports (pydantic, nats-py, FastAPI...), ~20 s of
CPU; a warm one ~1 s, and reports the same, since mypy's incremental mode re-checks every
module whose source or dependencies changed. On a fresh clone `tests/warm_caches.py` runs
it once (`python -m tests.architecture.typecheck`) on the core the cold collection leaves
idle, before the test processes start; `test_mypy_strict` then runs it for its verdict.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.architecture.modules import PACKAGES, ROOT

BIN = Path(sys.executable).parent
CACHE = ROOT / ".mypy_cache" / "staged"


def stage(folder: Path) -> None:
    """Copy the packages into `folder` under their installed names (`folder/taskq/...`)."""
    for package, source in PACKAGES.items():
        target = folder.joinpath(*package.split("."))
        shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.pyc"))


def mypy(folder: Path) -> subprocess.CompletedProcess[str]:
    """`mypy --strict -p taskq` on a copy staged in `folder`, with the clone's cache."""
    stage(folder)
    command = [str(BIN / "mypy"), "--strict", "--config-file", str(ROOT / "pyproject.toml")]
    command += ["--cache-dir", str(CACHE), "-p", "taskq"]
    return subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)


if __name__ == "__main__":  # the warm-up: write the cache, the verdict is the test's
    with tempfile.TemporaryDirectory() as scratch:
        sys.exit(mypy(Path(scratch)).returncode)
