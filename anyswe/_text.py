"""Reading the user's text files with errors that say where: a bad byte or bad JSON names file:line:col."""

from __future__ import annotations

import json
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
