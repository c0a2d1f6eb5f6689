"""A recorded traceback told the way its reader needs it: the exception and the user's own
frames first, taskq's frames folded (the dashboard's task and dead-letter pages, `taskq
task`, `taskq dlq show`).

A task's traceback starts with a dozen lines of taskq's own (the worker's execute, the
middleware chain, telemetry) before the frame that matters. A frame is taskq's when its
file is inside the installed taskq package: `taskq/` with `taskq.workers` and `taskq.dlq`
(the repository's `workers/` and `dlq/`, wherever they are installed here), or a
`site-packages/taskq/` (or `dist-packages/taskq/`) of another machine, where a worker
recorded it. Chained exceptions come last first: the one raised, then its cause (or the one
it was raised while handling). Text that is not a Python traceback is left as it is.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

HEADER = "Traceback (most recent call last):"
_FRAME = re.compile(r'  File "(?P<file>[^"]*)", line \d+, in (?P<name>.*)')
_INSTALLED = re.compile(r"[/\\](?:site|dist)-packages[/\\]taskq[/\\]")
_LINKS = {
    "The above exception was the direct cause of the following exception:": "cause",
    "During handling of the above exception, another exception occurred:": "context",
}
LINK_TEXT = {"cause": "The direct cause", "context": "Raised while handling"}
PACKAGES = ("taskq", "taskq.workers", "taskq.dlq")


@functools.cache
def _roots() -> tuple[str, ...]:
    """Where taskq's packages are installed here (found, not imported: the core does not
    import the layers above it)."""
    found = (importlib.util.find_spec(name) for name in PACKAGES)
    return tuple(str(Path(s.origin).resolve().parent) for s in found if s and s.origin)


def is_taskq_file(path: str) -> bool:
    """Whether a frame's file belongs to taskq itself (see the module's docstring)."""
    if _INSTALLED.search(path):
        return True
    try:
        resolved = str(Path(path).resolve())
    except (OSError, RuntimeError, ValueError):
        resolved = path
    return any(resolved == root or resolved.startswith(root + "/") for root in _roots())


@dataclass(frozen=True)
class Frame:
    """One frame as recorded: its `File ...` line and the lines under it."""

    lines: tuple[str, ...]
    file: str
    own: bool  # taskq's

    @property
    def module(self) -> str:
        return Path(self.file).stem


@dataclass(frozen=True)
class Section:
    """One exception of a chain: its frames in call order and its exception line(s);
    `link` says what it is to the section before it in `Folded.sections` (`cause`,
    `context`; "" for the exception raised)."""

    frames: tuple[Frame, ...]
    exception: str
    link: str = ""

    def shown(self) -> list[str]:
        """The user's frames in call order; a run of taskq frames after the first of them
        is marked where it was (the run before them, taskq calling the task, is not)."""
        lines: list[str] = []
        folded = 0
        for frame in self.frames:
            if frame.own:
                folded += 1 if lines else 0
                continue
            lines += _marker(folded)
            folded = 0
            lines += frame.lines
        return lines + _marker(folded)

    def hidden(self) -> list[Frame]:
        return [f for f in self.frames if f.own]

    def hidden_lines(self) -> list[str]:
        return [line for f in self.hidden() for line in f.lines]

    def modules(self) -> list[str]:
        """The taskq modules its hidden frames are in, each once, in call order."""
        return list(dict.fromkeys(f.module for f in self.hidden()))


@dataclass(frozen=True)
class Folded:
    """A traceback's sections, the exception raised first."""

    sections: tuple[Section, ...]

    def text_lines(self, hint: str, lead: bool = True) -> list[str]:
        """The traceback as a terminal shows it: each exception then the user's frames
        and one line for taskq's hidden ones (`hint` says how to see them); `lead=False`
        puts the usual header in place of the first exception's line(s), shown already."""
        lines: list[str] = []
        for i, section in enumerate(self.sections):
            head = section.exception.splitlines() or [""]
            if section.link:
                head[0] = f"{LINK_TEXT[section.link]}: {head[0]}"
            lines += head if lead or i else [HEADER]
            lines += section.shown()
            if hidden := len(section.hidden()):
                lines.append(f"  {plural(hidden)} hidden ({hint})")
        return lines


def terminal_lines(trace: str, verbose: bool) -> list[str]:
    """A recorded traceback for a command's output, after the line that shows its error:
    the user's frames, taskq's hidden in one line; as recorded with `verbose` (`-v`)."""
    folded = None if verbose else fold(trace)
    if folded is None:
        return trace.rstrip().splitlines()
    return folded.text_lines("-v shows them", lead=False)


def plural(count: int) -> str:
    return f"{count} taskq frame{'s' if count != 1 else ''}"


def _marker(count: int) -> list[str]:
    return [f"  … {plural(count)} folded"] if count else []


def fold(text: str) -> Folded | None:
    """The traceback `text` folded; None when it is not one this can read."""
    if not text or HEADER not in text.splitlines():
        return None
    sections: list[Section] = []
    link = ""
    for chunk in _chunks(text.rstrip("\n").splitlines()):
        if len(chunk) == 1 and chunk[0] in _LINKS:
            link = _LINKS[chunk[0]]
            continue
        if chunk and chunk[0] == HEADER:
            sections.append(_section(chunk[1:], link))
            link = ""
    if not sections:
        return None
    # Python prints the cause first; the link belongs to the earlier section, seen from
    # the later one: shift them so each says what it is to the one shown before it
    links = [s.link for s in sections[1:]] + [""]
    ordered = [
        Section(s.frames, s.exception, link) for s, link in zip(sections, links, strict=True)
    ]
    return Folded(tuple(reversed(ordered)))


def _chunks(lines: list[str]) -> list[list[str]]:
    """The lines cut at each traceback header and chain message (blank lines dropped
    around the chain messages)."""
    chunks: list[list[str]] = [[]]
    for line in lines:
        if line == HEADER or line in _LINKS:
            chunks.append([line])
            if line in _LINKS:
                chunks.append([])
        else:
            chunks[-1].append(line)
    return [_trimmed(c) for c in chunks if _trimmed(c)]


def _trimmed(chunk: list[str]) -> list[str]:
    while chunk and not chunk[-1].strip():
        chunk = chunk[:-1]
    while chunk and not chunk[0].strip():
        chunk = chunk[1:]
    return chunk


def _section(lines: list[str], link: str) -> Section:
    frames: list[Frame] = []
    rest = 0
    for i, line in enumerate(lines):
        match = _FRAME.fullmatch(line)
        if match is not None:
            file = match["file"]
            frames.append(Frame((line,), file, is_taskq_file(file)))
        elif frames and (line.startswith("    ") or line.startswith("  [Previous line")):
            last = frames[-1]
            frames[-1] = Frame((*last.lines, line), last.file, last.own)
        else:
            rest = i
            break
    else:
        rest = len(lines)
    return Section(tuple(frames), "\n".join(lines[rest:]), link)
