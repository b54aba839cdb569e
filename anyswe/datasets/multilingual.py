"""SWE-bench Multilingual (300 tasks, 42 repositories, 9 languages), graded by swebench 4.1.0 as it grades
Verified: its specs, eval scripts, log parsers and verdict rule, with no anyswe-side table.

Rows come from a file (``path:``, the hub's JSONL: FAIL_TO_PASS and PASS_TO_PASS as JSON lists, the
``version`` the PR number that keys swebench's specs) or the local hub cache. Images are the official
names, pulled or built offline (``anyswe prepare images --build``) by swebench's chain for the
repository's language: C, C++ and JavaScript's js_2 variant here (anyswe/images/multilingual_build.py);
the other languages say they cannot be built offline yet.
"""

from __future__ import annotations

from typing import ClassVar

from anyswe.datasets.hub import SWEbenchFamily


class SWEbenchMultilingual(SWEbenchFamily):
    name: ClassVar[str] = "swe-bench-multilingual"
    hub_names: ClassVar[tuple[str, ...]] = ("SWE-bench/SWE-bench_Multilingual",)
    aliases: ClassVar[tuple[str, ...]] = ("multilingual",)


__all__ = ["SWEbenchMultilingual"]
