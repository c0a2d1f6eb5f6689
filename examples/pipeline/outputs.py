"""How the pipeline's stages write: every output appears whole or not at all (written under a
hidden temporary name, then renamed: a rename is atomic on one filesystem), and every stage
attempt leaves a line in the run's `stages.log`, the ledger that shows what a resume redid.

A stage's temporary folder is named by its workflow step id (`taskq.current().id`, the same
on every attempt of the step), so an attempt cut short by a crash leaves at most one stale
folder, which the step's next attempt clears before starting over.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

LOG = "stages.log"
MANIFEST = "manifest.json"


def note(run_dir: str | Path, stage: str, ident: str, event: str) -> None:
    """One ledger line: `<stage> <ident> <event> <pid> <unix time>` (appends of a few bytes
    from several processes do not interleave)."""
    line = f"{stage} {ident} {event} {os.getpid()} {time.time():.3f}\n"
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    with open(Path(run_dir, LOG), "a") as ledger:
        ledger.write(line)


def staging(final: Path, step_id: str) -> Path:
    """An empty hidden folder beside `final` for this step to write into (a crashed earlier
    attempt's leftovers removed)."""
    temp = final.with_name(f".{final.name}.{step_id}")
    shutil.rmtree(temp, ignore_errors=True)
    temp.mkdir(parents=True)
    return temp


def publish(temp: Path, final: Path, manifest: dict[str, Any], name: str = MANIFEST) -> None:
    """Write the manifest (what the stage returns), then rename the folder into place."""
    (temp / name).write_text(json.dumps(manifest, indent=2))
    os.rename(temp, final)


def published(final: Path, name: str = MANIFEST) -> dict[str, Any] | None:
    """What a stage published there before (a rerun returns it and redoes nothing), or None."""
    manifest = final / name
    return json.loads(manifest.read_text()) if manifest.exists() else None


def write_atomic(path: Path, text: str) -> None:
    """`text` into `path`, whole or not at all (a hidden temporary file, then a rename)."""
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    temp.write_text(text)
    os.replace(temp, path)
