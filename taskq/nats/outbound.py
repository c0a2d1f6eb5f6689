"""What taskq may send: a subject and headers that the NATS protocol carries as they are.

Every name that comes from a user or a message is made safe before it gets here
(`taskq.ids.safe_id`, `taskq.flowcontrol.keys.token`, validated queue and task names). This
is the last line: a subject with white space or a wildcard, or a header value with a line
break, would make the server close the connection (`maximum control line exceeded`,
`invalid subject`) or let one header smuggle in another, so it is refused here with a typed
error, and the connection stays up.
"""

from __future__ import annotations

import re

from taskq.errors import UnsafeName

MAX_SUBJECT = 1024  # well inside the server's 4 KiB control line, with a reply subject
# tokens of printable characters other than `.`, `*` and `>`, joined by single dots; as
# a negated class (no C0/C1 control, space, `*`, `.`, `>`): the same set as the ranges
# `!-)+-\-/-=?-~\u00a0-\U0010ffff`, compiled in 0.4 ms instead of 10 (at every import)
_TOKEN = r"[^\x00-\x20*.>\x7f-\x9f]+"
_SUBJECT = re.compile(rf"{_TOKEN}(?:\.{_TOKEN})*")
_BREAKS = re.compile(r"[\r\n\x00]")
_NAME = re.compile(r"[!-9;-~]+")  # a header name: printable, no space, no colon


# subjects, and apart from them header names, checked already (a bulk enqueue's messages
# share them): each kept up to MAX_PASSED, then forgotten all at once
_SUBJECTS: dict[str, None] = {}
_NAMES: dict[str, None] = {}
MAX_PASSED = 4096


def check(subject: str, headers: dict[str, str] | None = None) -> None:
    """Raise UnsafeName unless `subject` is a valid publish subject and every header name
    and value fits on its header line."""
    if subject not in _SUBJECTS:
        if len(subject) > MAX_SUBJECT or not _SUBJECT.fullmatch(subject):
            raise UnsafeName("subject", subject)
        _passed(_SUBJECTS, subject)
    if headers:
        for name, value in headers.items():
            if _BREAKS.search(value):
                raise UnsafeName(f"header {name[:40]!r}", value)
            if name not in _NAMES:
                if not _NAME.fullmatch(name):
                    raise UnsafeName(f"header {name[:40]!r}", value)
                _passed(_NAMES, name)


def _passed(seen: dict[str, None], text: str) -> None:
    if len(seen) >= MAX_PASSED:
        seen.clear()
    seen[text] = None
