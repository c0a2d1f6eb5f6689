"""How many examples a property test (Hypothesis) tries in a run.

Each property test names the count it was written with. The default run tries a third of
it, never fewer than Hypothesis's own default of 100: the 26 property tests spent 55 s of
CPU at full count, a twentieth of the whole suite's, most of it Hypothesis generating
strings of up to 6,000 characters. `TASKQ_THOROUGH=1` runs the full counts (before a
release, or after changing what ids, names, encodings or the journal accept). A failure
found either way is kept in Hypothesis's example database (`.hypothesis/`) and tried first
on the next run.
"""

from __future__ import annotations

import os

THOROUGH = os.environ.get("TASKQ_THOROUGH") == "1"
FLOOR = 100  # Hypothesis's default max_examples


def examples(full: int) -> int:
    """The count to try: `full` in a thorough run, else a third of it (at least 100)."""
    return full if THOROUGH else max(FLOOR, full // 3)
