"""The one progress bar of long CLI work (requeue, purge, export, import, bulk enqueue).

Drawn on stderr, and only when stderr is a terminal: a script or a pipe gets nothing extra,
not even the label (stdout stays the command's output, e.g. `dlq export > file`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

Advance = Callable[[int], None]  # called with how many more items are done


def _ignore(_done: int) -> None:
    """Advance nothing: the bar is not shown."""


def shown() -> bool:
    """Whether a bar would be drawn (stderr is a terminal)."""
    return sys.stderr.isatty()


@contextmanager
def progress(label: str, length: int) -> Iterator[Advance]:
    """A bar of `length` items labelled `label` while the block runs; yields the function
    that advances it."""
    if not shown() or length <= 0:
        yield _ignore
        return
    # redrawn about 200 times in all, not once per item of a million-line export
    steps = max(1, length // 200)
    with click.progressbar(
        length=length, label=label, file=sys.stderr, update_min_steps=steps
    ) as bar:
        yield bar.update
