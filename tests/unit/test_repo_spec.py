"""A repository swebench does not know is handed to each call as a RepoSpec, never written into
swebench's maps: routing and grading never depend on what the process graded before, and the
explicit path gives swebench's own verdicts (checked on real evaluation logs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anyswe.datasets.instance import Instance
from anyswe.grading import get_harness, route_instance
from anyswe.grading import swebench as sb


def _maps() -> tuple[int, ...]:
    from swebench.harness.constants import MAP_REPO_TO_EXT, MAP_REPO_VERSION_TO_SPECS
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER

    versions = sum(len(v) for v in MAP_REPO_VERSION_TO_SPECS.values())
    return len(MAP_REPO_VERSION_TO_SPECS), versions, len(MAP_REPO_TO_PARSER), len(MAP_REPO_TO_EXT)


def test_grading_an_unknown_repo_changes_no_routing_and_no_swebench_map() -> None:
    sb.version()  # swebench loaded, its maps as shipped
    before = _maps()
    plain = Instance(
        instance_id="acme__widgets-1",
        repo="acme/widgets",
        version="1.0",
        base_commit="x",
        test_patch="",
        FAIL_TO_PASS=["t.py::a"],
    )
    declared = Instance.model_validate(
        {**plain.model_dump(), "instance_id": "acme__widgets-2", "swebench_spec": {"test_cmd": "pytest -rA"}}
    )
    assert (route_instance(plain), route_instance(declared)) == ("pytest", "swebench")
    for inst in (plain, declared):
        harness = get_harness(route_instance(inst))
        assert "pytest -rA" in harness.eval_script(inst)
        assert harness.grade_log(inst, "no markers").resolved is False
    # Before, the pytest harness wrote acme/widgets into swebench's maps: the same row then routed to swebench.
    assert (route_instance(plain), route_instance(declared)) == ("pytest", "swebench")
    assert not sb.known_repo("acme/widgets") and _maps() == before


def test_a_repo_spec_needs_a_known_parser() -> None:
    from anyswe.errors import GradingError

    with pytest.raises(GradingError, match="unknown log parser 'junit'"):
        sb.RepoSpec.of(test_cmd="mvn test", parser="junit")


def test_the_explicit_path_gives_swebenchs_verdicts_on_real_logs(shared_swebench: Path) -> None:
    """For every corpus log of a repository swebench reads with its pytest parser, grading it with the
    repository's official spec given as a RepoSpec gives what ``get_eval_report`` gives."""
    from swebench.harness.constants import MAP_REPO_VERSION_TO_SPECS
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
    from swebench.harness.log_parsers.python import parse_log_pytest

    from anyswe.datasets import load_dataset

    rows = load_dataset("princeton-nlp/SWE-bench_Verified", str(shared_swebench / "verified.jsonl")).by_id()
    manifest = [json.loads(x) for x in (shared_swebench / "corpus" / "manifest.jsonl").read_text().splitlines()]
    checked = resolved = 0
    for m in manifest:
        inst = rows.get(m["instance_id"])
        if inst is None or MAP_REPO_TO_PARSER.get(inst.repo) is not parse_log_pytest:
            continue
        log = (shared_swebench / "corpus" / "logs" / m["key"] / "test_output.txt").read_text(errors="replace")
        repo = sb.RepoSpec(MAP_REPO_VERSION_TO_SPECS[inst.repo][inst.version], parser="pytest")
        official = sb.eval_report(inst, log)
        explicit = sb.eval_report(inst, log, repo=repo)
        assert explicit == official, m["key"]
        # As swebench reads a log (text mode), a "\r" ends a line on both paths.
        carriage = log.replace("\n", "\r")
        assert sb.eval_report(inst, carriage, repo=repo) == sb.eval_report(inst, carriage), m["key"]
        if m.get("has_report"):
            assert official["resolved"] == m["official_resolved"], m["key"]
        checked += 1
        resolved += bool(official["resolved"])
    assert checked >= 20 and 0 < resolved < checked
