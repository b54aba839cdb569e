"""Text in and out. Reading the user's text files with errors that say where: a bad byte or bad JSON
names file:line:col. Writing text UTF-8 cannot hold: a str with a surrogate code point, which JSON can
say (``"\\ud800"``) and Python reads from a model's reply or an agent's request, but which fails any
file, polars frame or HTTP body it is written to. The trajectory (and every body the gateway sends)
keeps the code point as its JSON escape; a result row and a task's files replace it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from anyswe.errors import AnysweError


def read_utf8(path: Path, error: type[AnysweError]) -> str:
    """The text of ``path``; a byte that is not UTF-8 raises ``error`` naming its line and column."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise error(f"{path}:{line}:{col}: not UTF-8 text (byte 0x{data[exc.start]:02x})") from None


def load_json(text: str, where: str, error: type[AnysweError], *, first_line: int = 1) -> Any:
    """``json.loads`` whose error names ``where`` and the line and column (``first_line``: of ``text``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{where}:{first_line + exc.lineno - 1}:{exc.colno}: not valid JSON: {exc.msg}") from None


def json_rows(path: Path, error: type[AnysweError]) -> list[Any]:
    """The rows of a JSON file (a list) or a JSONL file (one value per line), located errors."""
    text = read_utf8(path, error)
    if path.suffix == ".json":
        data = load_json(text, str(path), error)
        if not isinstance(data, list):
            raise error(f"{path}: expected a JSON list of rows, found a {type(data).__name__}")
        return data
    lines = enumerate(text.splitlines(), 1)
    return [load_json(line, str(path), error, first_line=n) for n, line in lines if line.strip()]


#: A surrogate code point in a str (paired or not: as two code points, UTF-8 cannot hold either).
SURROGATE = re.compile("[\ud800-\udfff]")


def escape_surrogates(json_text: str) -> str:
    """JSON text with each surrogate code point as its ``\\uXXXX`` escape (in JSON text one can only be
    inside a string, where the escape means the same code point): valid UTF-8, read back the same."""
    return SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)


def valid_text(value: Any) -> Any:
    """``value`` (JSON types) with every str made encodable: a high and low surrogate in a row become
    the one character they stand for, any other surrogate U+FFFD."""
    if isinstance(value, str):
        if SURROGATE.search(value) is None:
            return value
        return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    if isinstance(value, list):
        return [valid_text(v) for v in value]
    if isinstance(value, dict):
        return {valid_text(k): valid_text(v) for k, v in value.items()}
    return value
