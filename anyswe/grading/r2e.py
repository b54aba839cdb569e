"""The R2E-Gym harness, graded natively from its rows: the pytest summary must equal ``expected_output_json``.

R2E-Gym rows carry the expected status of every test; a sample is resolved when the parsed short
test summary has exactly the same tests with the same statuses (R2E-Gym's own reward rule: names
cut at " - ", ANSI colours removed). Its images run the hidden tests with ``/root/run_tests.sh``.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, ClassVar

from anyswe.errors import GradingError
from anyswe.grading.base import Harness, LogVerdict

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance

_ANSI = re.compile(r"\x1b\[\d+m")


def parse_pytest_summary(log: str) -> dict[str, str]:
    """Test name -> PASSED/FAILED/ERROR from the first pytest "short test summary info" section on."""
    if "short test summary info" not in log:
        return {}
    status: dict[str, str] = {}
    for line in log.split("short test summary info")[1].strip().split("\n"):
        for word in ("PASSED", "FAILED", "ERROR"):
            if word in line:
                name = ".".join(line.split("::")[1:]).split(" - ")[0]
                status[name] = word
                break
    return status


def _normalise(statuses: dict[str, str]) -> dict[str, str]:
    clean = {_ANSI.sub("", k): v for k, v in statuses.items()}
    return {k.split(" - ")[0]: clean[k] for k in sorted(clean)}


def r2e_resolved(log: str, expected_output_json: str) -> tuple[bool, dict[str, str], dict[str, str]]:
    """(resolved, parsed, expected) by R2E-Gym's rule."""
    try:
        expected = _normalise(json.loads(expected_output_json))
    except (json.JSONDecodeError, TypeError, AttributeError) as exc:
        raise GradingError(f"expected_output_json is not a JSON object: {exc}") from None
    parsed = _normalise(parse_pytest_summary(log))
    ok = len(parsed) == len(expected) and all(k in expected and parsed[k] == expected[k] for k in parsed if k)
    return ok, parsed, expected


class R2EHarness(Harness):
    name: ClassVar[str] = "r2e"

    def _eval_script(self, instance: Instance) -> str:
        return "\n".join(["#!/bin/bash", "set -uxo pipefail", f"cd {self.workdir}", "bash /root/run_tests.sh"]) + "\n"

    def _grade_log(self, instance: Instance, test_output: str) -> LogVerdict:
        expected_json = (instance.model_extra or {}).get("expected_output_json")
        if not isinstance(expected_json, str):
            raise GradingError(f"{instance.instance_id}: R2E-Gym row has no expected_output_json")
        resolved, parsed, expected = r2e_resolved(test_output, expected_json)
        success = sorted(k for k in expected if parsed.get(k) == expected[k])
        failure = sorted(k for k in expected if parsed.get(k) != expected[k])
        return LogVerdict(resolved=resolved, tests_status={"EXPECTED": {"success": success, "failure": failure}})
