"""taskq's test suite (a package: its helpers are imported as `tests.*`).

The suite starts a few hundred Python processes that import taskq (workers, CLI commands,
examples as users run them). A machine that sets `PYTHONDONTWRITEBYTECODE` (CI images often
do) makes each of them compile taskq's ~200 modules again, ~0.2 s of CPU apiece; the suite
writes bytecode caches (git ignores `__pycache__/`) so that only the first one does.
"""

import os
import sys

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
