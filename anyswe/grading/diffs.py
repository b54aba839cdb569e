"""What a diff touches, read by unidiff as swebench reads diffs: the files it reads and writes, the
files it creates, and the lines it adds and removes (the apply ladder, sealing and the flags use these)."""

from __future__ import annotations

import re


def patch_targets(patch: str) -> list[str]:
    """Every file a diff leaves behind (added and modified, not deleted), in diff order."""
    from unidiff import PatchSet  # type: ignore[attr-defined]

    out = []
    for f in PatchSet(patch):
        if f.target_file != "/dev/null" and f.target_file.startswith("b/"):
            out.append(f.target_file[2:])
    return out


def touched_files(patch: str) -> set[str]:
    """Every path a diff reads or writes (old and new names of a rename, added and deleted files).

    By unidiff, as swebench reads diffs; a diff unidiff cannot parse falls back to its
    ``diff --git a/X b/Y`` headers, so a strange patch never yields an empty set by accident.
    """
    if not patch.strip():
        return set()
    from unidiff import PatchSet  # type: ignore[attr-defined]
    from unidiff.errors import UnidiffParseError

    out: set[str] = set()
    try:
        for f in PatchSet(patch):
            for name in (f.source_file, f.target_file):
                if name and name != "/dev/null":
                    out.add(_without_prefix(name))
    except UnidiffParseError:
        pass
    for m in re.finditer(r"^diff --git a/(\S+) b/(\S+)$", patch, re.MULTILINE):
        out.update(m.groups())
    return out


def changed_lines(patch: str) -> dict[str, tuple[list[str], list[str]]]:
    """Per file a diff writes (its new name; a deleted file by its old one): the lines it adds and removes.

    By unidiff, as swebench reads diffs; a patch unidiff cannot parse has none.
    """
    if not patch.strip():
        return {}
    from unidiff import PatchSet  # type: ignore[attr-defined]
    from unidiff.errors import UnidiffParseError

    out: dict[str, tuple[list[str], list[str]]] = {}
    try:
        for f in PatchSet(patch):
            name = f.target_file if f.target_file != "/dev/null" else f.source_file
            added = [line.value for hunk in f for line in hunk if line.is_added]
            removed = [line.value for hunk in f for line in hunk if line.is_removed]
            out[_without_prefix(name)] = (added, removed)
    except UnidiffParseError:
        return {}
    return out


def new_files(patch: str) -> set[str]:
    """The paths a diff creates: added files, and the new names of renamed or copied ones (a path that
    did not exist before the patch). By unidiff, as :func:`changed_lines`; a patch unidiff cannot parse
    has none."""
    if not patch.strip():
        return set()
    from unidiff import PatchSet  # type: ignore[attr-defined]
    from unidiff.errors import UnidiffParseError

    out: set[str] = set()
    try:
        for f in PatchSet(patch):
            source, target = _without_prefix(f.source_file), _without_prefix(f.target_file)
            if f.target_file != "/dev/null" and (f.is_added_file or source != target):
                out.add(target)
    except UnidiffParseError:
        return set()
    return out


def changed_in_context(patch: str) -> dict[str, list[tuple[str, str, str]]]:
    """Per file a diff writes: each line it adds or removes with the last section header (``[...]``)
    and the last unindented key (``name =`` / ``name:``) before it, as far as its hunk shows them (its
    context lines and git's hunk header; "" where they do not): a continuation line of a multi-line
    INI or TOML value is read as part of its key. By unidiff, as :func:`changed_lines`."""
    if not patch.strip():
        return {}
    from unidiff import PatchSet  # type: ignore[attr-defined]
    from unidiff.errors import UnidiffParseError

    out: dict[str, list[tuple[str, str, str]]] = {}
    try:
        for f in PatchSet(patch):
            name = f.target_file if f.target_file != "/dev/null" else f.source_file
            seen = out.setdefault(_without_prefix(name), [])
            for hunk in f:
                # git's hunk header names the last line before the hunk that starts with a letter (its
                # default funcname): for a config file, often the key a multi-line value belongs to.
                head = _KEY.match(hunk.section_header or "")
                section, key = "", head.group(1) if head else ""
                for line in hunk:
                    text = line.value.rstrip("\n")
                    if line.is_added or line.is_removed:
                        seen.append((section, key, text))
                    if _SECTION.match(text):
                        section, key = text.strip(), ""
                    elif _KEY.match(text):
                        key = _KEY.match(text).group(1)  # type: ignore[union-attr]
    except UnidiffParseError:
        return {}
    return out


_SECTION = re.compile(r"^\s*\[[^\]]+\]\s*$")
_KEY = re.compile(r"^([A-Za-z_][\w.-]*)\s*[=:]")


def _without_prefix(name: str) -> str:
    """A diff's file name without git's ``a/`` or ``b/``."""
    return name[2:] if name[:2] in ("a/", "b/") else name
