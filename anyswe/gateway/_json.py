"""JSON out on the gateway's path, fast: orjson's encoder (several times the standard library's on a
conversation's body), falling back to the standard library for what orjson refuses (an integer past
64 bits, a lone surrogate), so the output is always the standard library's JSON for such values.
Reading stays the standard library's: orjson would read an integer past 64 bits as a float."""

from __future__ import annotations

import json
from typing import Any


def dumps(obj: Any) -> bytes:
    """``obj`` as compact JSON bytes (UTF-8)."""
    import orjson

    try:
        return orjson.dumps(obj)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def dumps_str(obj: Any) -> str:
    """:func:`dumps` as text (a trajectory line, a response body)."""
    return dumps(obj).decode("utf-8", "surrogatepass")
