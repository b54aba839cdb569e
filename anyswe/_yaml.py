"""A spec's YAML document, read with its line numbers, and bounded: aliases cannot make it explode.

ruamel.yaml composes an alias as a second reference to the anchored node, so a "billion laughs"
document loads at once and only explodes when something walks it (validation, task keys). The
document's size with every alias expanded is counted here, each node once, before anything walks it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from anyswe._text import read_utf8
from anyswe.errors import SpecError

#: The most values a spec may hold with its aliases expanded (a large spec holds a few thousand).
MAX_VALUES = 200_000


def read_yaml(p: Path) -> Any:
    """The YAML document of ``p`` (round-trip: line numbers kept); every error names file:line:col."""
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError
    from ruamel.yaml.reader import ReaderError

    text = read_utf8(p, SpecError)
    try:
        data = YAML(typ="rt").load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"{p}:{mark.line + 1}:{mark.column + 1}" if mark else str(p)
        raise SpecError(f"invalid YAML: {exc.problem}", location=where) from None
    except ReaderError as exc:  # a character YAML does not allow (a NUL, a control character)
        line = text.count("\n", 0, exc.position) + 1
        col = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise SpecError(
            f"invalid YAML: character {exc.character:#06x} is not allowed", location=f"{p}:{line}:{col}"
        ) from None
    except YAMLError as exc:
        raise SpecError(f"invalid YAML: {exc}", location=str(p)) from None
    _Bound(p).size(data, ())
    return data


class _Bound:
    """The expanded size of each container, memoised by identity (an alias costs one lookup)."""

    def __init__(self, p: Path) -> None:
        self.p = p
        self.sizes: dict[int, int] = {}
        self.open: set[int] = set()

    def size(self, node: Any, path: tuple[Any, ...]) -> int:
        if not isinstance(node, dict | list):
            return 1
        known = self.sizes.get(id(node))
        if known is not None:
            return known
        if id(node) in self.open:
            self._refuse(node, path, "an alias refers to a node that holds it (a recursive document)")
        self.open.add(id(node))
        items = node.items() if isinstance(node, dict) else enumerate(node)
        total = 1
        for key, value in items:
            total += 1 + self.size(value, (*path, key))
            if total > MAX_VALUES:
                self._refuse(node, path, f"with its aliases expanded it holds more than {MAX_VALUES} values")
        self.open.discard(id(node))
        self.sizes[id(node)] = total
        return total

    def _refuse(self, node: Any, path: tuple[Any, ...], why: str) -> None:
        lc = getattr(node, "lc", None)
        where = f"{self.p}:{lc.line + 1}:{lc.col + 1}" if lc is not None else str(self.p)
        field = ".".join(map(str, path)) or "(top level)"
        raise SpecError(f"{field}: {why}", location=where)
