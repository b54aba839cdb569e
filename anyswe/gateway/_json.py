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


def loads(raw: bytes) -> Any:
    """``raw`` (UTF-8 JSON) as ``json.loads`` reads it; its errors are ``json.loads``'s (ValueError)."""
    import orjson

    if _LONG_RUN not in raw.translate(_DIGITS):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the standard library's reading or its error, whichever it is
    return json.loads(raw)


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
