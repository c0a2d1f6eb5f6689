"""Refusing the floats JSON has no form for (nan, inf, -inf) wherever taskq encodes a
user's value to send (task arguments, results, workflow journals).

pydantic-core writes them as `NaN` / `Infinity`, which is not JSON: another reader refuses
the body, and pydantic's own JSON mode turns them into null, which arrives as None. So a
value holding one is refused where it is encoded, saying where it is. The check costs one
scan of the encoded bytes; only a body with `NaN` or `Infinity` in it (a string may hold
those letters) is parsed back, to confirm and locate the float.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from pydantic_core import from_json, to_json

from taskq.errors import NonFiniteFloat

Path = tuple[str | int, ...]
_N, _I = ord("N"), ord("I")  # the first bytes of `NaN` and `Infinity`, as pydantic-core writes them


def finite_json(
    value: Any, *, what: str = "value", fallback: Callable[[Any], Any] | None = None
) -> bytes:
    """`value` as compact UTF-8 JSON (pydantic-core's `to_json`, `fallback` as there), or
    NonFiniteFloat naming the first nan/inf/-inf in it (`what` names the value: its
    `where` then reads `args[0]`, `result['mean']`)."""
    body = to_json(value, fallback=fallback, inf_nan_mode="constants")
    # a byte first (memchr: ~0.1 us for a message, ~2 us for 200 KB), then the word: most
    # bodies have neither; one that has it maybe only in a string is parsed to make sure
    if (_N in body and b"NaN" in body) or (_I in body and b"Infinity" in body):
        found = _first_non_finite(_parsed(body))
        if found is not None:
            raise NonFiniteFloat(what, *found)
    return body


def _parsed(body: bytes) -> Any:
    """The JSON `body` as Python values, `NaN` and `Infinity` read as floats."""
    try:
        return from_json(body)
    except ValueError:  # nested deeper than pydantic-core reads (it writes deeper)
        return json.loads(body)


def _first_non_finite(value: Any) -> tuple[Path, float] | None:
    """The path to the first non-finite float in parsed JSON, and that float (None: none),
    depth first in document order (iterative: any depth to_json writes)."""
    stack: list[tuple[Any, Path]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return path, item
        elif isinstance(item, dict):
            stack.extend((v, (*path, k)) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, (*path, i)) for i, v in reversed(list(enumerate(item))))
    return None
