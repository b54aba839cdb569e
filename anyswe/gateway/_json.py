"""JSON out on the gateway's path, fast: orjson's encoder (several times the standard library's on a
conversation's body), falling back to the standard library for what orjson refuses (an integer past
64 bits, a lone surrogate), so the output is always the standard library's JSON for such values, but
with every lone surrogate as its ``\\uXXXX`` escape: the bytes are always UTF-8, which any reader
decodes, and read back they give the same string. Reading is orjson's too, with the same rule: what
it reads differently (an integer of 19 digits or more, which it reads as a float) or refuses (NaN, a
lone surrogate, 1e400) the standard library reads, so every body means what ``json.loads`` makes of
it."""

from __future__ import annotations

import json
from typing import Any

from anyswe._text import escape_surrogates

#: Every digit as "0", every other byte as " ": 19 zeros in a row in a body so mapped is an integer
#: orjson may read as a float (its integers stop at 64 bits). A string holding such a run sends the
#: body to the standard library too: slower, never different. (A regular expression for the run took
#: ten times orjson's whole parse; a table and a substring search, both in C, take less than it.)
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_RUN = b"0" * 19


#: How deeply a request body may nest: orjson writes no deeper, so a deeper body is one whose call
#: could not be written as a trajectory step (real requests nest a few levels, a tool's schema a dozen).
MAX_DEPTH = 254


def loads(raw: bytes) -> Any:
    """``raw`` (UTF-8 JSON) as ``json.loads`` reads it; its errors are ``json.loads``'s (ValueError),
    and a body nested past what Python's parser recurses into is one too."""
    import orjson

    if _LONG_RUN not in raw.translate(_DIGITS):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the standard library's reading or its error, whichever it is (orjson stops at 1024 levels)
    try:
        return json.loads(raw)
    except RecursionError:
        raise ValueError("the JSON nests deeper than can be read") from None


def loads_request(raw: bytes) -> Any:
    """A request body: :func:`loads`, and no deeper than :data:`MAX_DEPTH` (a ValueError, the agent's 400:
    such a call could not be recorded). orjson's encoder finds the depth in C (a tenth of the parse)."""
    import orjson

    value = loads(raw)
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError as exc:  # also an integer past 64 bits or a lone surrogate: dumps' fallback
        if "Recursion limit" in str(exc):
            raise ValueError(f"the request body nests deeper than {MAX_DEPTH} levels") from None
    return value


def dumps(obj: Any) -> bytes:
    """``obj`` as compact JSON bytes (UTF-8)."""
    import orjson

    try:
        return orjson.dumps(obj)
    except (TypeError, orjson.JSONEncodeError):
        return escape_surrogates(json.dumps(obj, ensure_ascii=False, separators=(",", ":"))).encode()


def dumps_str(obj: Any) -> str:
    """:func:`dumps` as text (a trajectory line, a response body)."""
    return dumps(obj).decode()
