"""The system Chromium the dashboard's browser tests drive, installed by the project itself.

Playwright never downloads a browser here (no `playwright install`: the machine's network
reaches only the package registries). It drives Debian's `chromium` instead, which
`ensure_chromium()` installs with apt-get when it is missing, so the README's test command
works from a fresh clone (CI runs it as root, with no terminal). When the browser cannot be
installed the browser tests FAIL with the reason: they are never skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.system_packages import ensure

CHROMIUM = Path(os.environ.get("TASKQ_TEST_CHROMIUM", "/usr/bin/chromium"))
PACKAGES = ("chromium", "chromium-driver")
# Every flag matters on a machine with a closed network: without the background-networking
# ones Chromium keeps trying (and failing) to reach Google's hosts.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    # fewer processes and less work per page for one localhost site: no zygote, no
    # per-site renderers, no software GPU (measured: tests/dashboard at -n 2, 122-127 ->
    # 116-119 busy CPU-s)
    "--disable-extensions",
    "--disable-software-rasterizer",
    "--no-zygote",
    "--disable-site-isolation-trials",
    "--disable-features=site-per-process,Translate,OptimizationHints,MediaRouter",
    "--mute-audio",
    "--disable-breakpad",
)


def ensure_chromium() -> Path:
    """The Chromium binary, installing Debian's packages first when it is missing."""
    ensure(CHROMIUM.exists, PACKAGES, "dashboard tests")
    return CHROMIUM
