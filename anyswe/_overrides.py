"""``--set KEY.PATH=VALUE`` overrides, as the user typed them, and where a field of a YAML file is.

An override's value is YAML (``--set 'matrix.agents=[gold]'``). A relative path in one is relative to
where the user runs anyswe, as a shell argument is, not to the spec file's folder, where the spec's
own paths are (:func:`as_typed` makes it absolute before the spec resolves the rest).
"""

from __future__ import annotations

import os
from typing import Any

from anyswe.errors import SpecError

#: The spec's fields that hold a path (in any block): ``dataset.path``, ``dataset.exclude_file``,
#: ``dataset.assets``, an agent's ``predictions``, a model's ``script`` and ``replay.run``/``replay.atif``,
#: a provider's ``sif`` template.
PATH_FIELDS = frozenset({"path", "exclude_file", "assets", "predictions", "script", "run", "atif", "sif"})


def as_typed(keys: list[str | int], value: Any) -> Any:
    """``value`` of the override at ``keys`` with each relative path it sets made absolute from here."""
    if isinstance(value, dict):
        return {k: as_typed([*keys, k], v) for k, v in value.items()}
    last = keys[-1] if keys else None
    if last in PATH_FIELDS and isinstance(value, str) and value and not os.path.isabs(value):
        return os.path.abspath(value)
    return value


def locate(root: Any, loc: tuple[Any, ...]) -> tuple[int, int] | None:
    """1-based (line, column) of the deepest YAML node on ``loc`` that exists."""
    node, pos = root, None
    for key in loc:
        lc = getattr(node, "lc", None)
        try:
            if isinstance(node, dict) and key in node:
                if lc is not None:
                    line, col = lc.key(key)
                    pos = (line + 1, col + 1)
                node = node[key]
            elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
                if lc is not None:
                    line, col = lc.item(key)
                    pos = (line + 1, col + 1)
                node = node[key]
            else:
                break
        except (KeyError, TypeError, AttributeError):
            break
    if pos is None and getattr(root, "lc", None) is not None:
        pos = (root.lc.line + 1, root.lc.col + 1)
    return pos


def parse_override(text: str) -> tuple[list[str | int], Any]:
    from ruamel.yaml import YAML

    if "=" not in text:
        raise SpecError(f"--set {text!r}: expected KEY.PATH=VALUE")
    path, raw = text.split("=", 1)
    keys: list[str | int] = [int(k) if k.isdigit() else k for k in path.strip().split(".")]
    if not path.strip() or any(k == "" for k in keys):
        raise SpecError(f"--set {text!r}: empty key in {path!r}")
    value = YAML(typ="safe").load(raw) if raw.strip() else ""
    return keys, value


def apply_override(data: Any, keys: list[str | int], value: Any, text: str) -> None:
    node = data
    for i, key in enumerate(keys[:-1]):
        nxt = keys[i + 1]
        if isinstance(node, dict):
            if key not in node or node[key] is None:
                node[key] = [] if isinstance(nxt, int) else {}
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            raise SpecError(f"--set {text}: cannot descend into {'.'.join(map(str, keys[: i + 1]))}")
    last = keys[-1]
    if isinstance(node, dict):
        node[last] = value
    elif isinstance(node, list) and isinstance(last, int) and last <= len(node):
        if last == len(node):
            node.append(value)
        else:
            node[last] = value
    else:
        raise SpecError(f"--set {text}: cannot set {'.'.join(map(str, keys))}")
