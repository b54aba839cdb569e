"""A second record of a pytest run, and what it says against the log the verdict is read from.

The verdict is the log parser's (swebench's, or a benchmark's own), as the official harness computes
it. But the log is the tests' stdout, which the code under test can write too: a patch that keeps
the bug and registers an ``atexit`` that prints ``PASSED <test>`` lines is resolved by the parser,
which takes a test's last line. So, for a harness whose tests run under pytest, the grading sandbox
also loads a small pytest plugin (``anyswe_pytest_record.py``, beside this module, mounted read-only
outside the work tree and loaded with ``-p`` through ``PYTEST_ADDOPTS`` before anything of the
repository) that writes what pytest itself made of each test to a file outside the work tree, and
whether the runner's report machinery was changed while the tests ran. The host reads that file
after the eval (:func:`read_record`) and sets it against the log (:func:`compare`):

* ``runner_tamper``: a FAIL_TO_PASS or PASS_TO_PASS test whose status in the log is not one pytest
  reported for it (both are kept), a test the log says passed that pytest never reported, a test
  that raised but whose report says it passed, the runner's reports, runner, terminal, skipping or
  pluggy modules changed, or no record at all from a run whose log says such a test passed;
* ``status_conflict`` (any harness, from the log alone): such a test with a failing and a passing
  status in one log whose last, the one the parser keeps, is the passing one (pytest prints a
  test's summary lines passes first, errors and failures after).

Neither changes the verdict; both are flags of the row, and a spec's ``grading.tampered`` says what
a flagged sample's reward is (decide.py). The record is harder to forge than stdout, not
impossible: the code under test runs as the same user in the same process, so it can find the file
and the plugin. Where the runner is the code under test (pytest's own repository) the plugin
records only that, and there is no record to compare.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: The plugin's directory on the host (this package), and where it is mounted read-only in a grading sandbox.
PLUGIN_DIR = Path(__file__).resolve().parent
PLUGIN_MOUNT = "/.anyswe/pytest"
PLUGIN = "anyswe_pytest_record"
#: What of the record file is read (a real run's is a few hundred bytes a test).
RECORD_BYTES = 32 * 1024 * 1024
#: pytest's words when a ``-p`` plugin cannot be imported (the run is then graded again without it).
NOT_LOADED = f'Error importing plugin "{PLUGIN}"'
PASSING = frozenset({"PASSED", "XFAIL"})
FAILING = frozenset({"FAILED", "ERROR"})

#: Flags this module sets (grading/flags.py lists them with the patch's).
RUNNER_TAMPER = "runner_tamper"
STATUS_CONFLICT = "status_conflict"


def record_path() -> str:
    """Where one grading's record goes in its sandbox: outside the work tree, a fresh name each time."""
    return f"/tmp/.anyswe-record-{secrets.token_hex(8)}.jsonl"


def prelude(path: str) -> str:
    """Shell lines run before the eval script: pytest loads the plugin from the read-only mount, found
    on ``PYTHONPATH`` or, where an environment filter drops that (tox passes ``PYTEST_ADDOPTS`` but not
    ``PYTHONPATH``), in the user's site directory of every Python 3 (a link to the mounted file)."""
    return "; ".join(
        [
            # The file exists before pytest starts: a record with no more than this line is a plugin
            # pytest could not load; no file at all is one taken away.
            f"printf '%s\\n' '{{\"kind\": \"armed\"}}' > {path}",
            f'export PYTEST_ADDOPTS="${{PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }}-p {PLUGIN} --anyswe-record={path}"',
            # Also by name and variable: an eval script that sets PYTEST_ADDOPTS itself (Pro's) keeps these.
            f'export PYTEST_PLUGINS="${{PYTEST_PLUGINS:+$PYTEST_PLUGINS,}}{PLUGIN}" ANYSWE_PYTEST_RECORD={path}',
            f'export PYTHONPATH="{PLUGIN_MOUNT}${{PYTHONPATH:+:$PYTHONPATH}}"',
            "for v in 6 7 8 9 10 11 12 13 14; do d=~/.local/lib/python3.$v/site-packages; "
            f'[ -e "$d/{PLUGIN}.py" ] || {{ mkdir -p "$d" && ln -s {PLUGIN_MOUNT}/{PLUGIN}.py "$d/"; }}; '
            "done 2>/dev/null",
        ]
    )


@dataclass(frozen=True)
class RunRecord:
    """What the plugin wrote: each test's statuses in pytest's summary words, and what it saw change."""

    #: The file was there before the tests (the eval's own first line).
    armed: bool = False
    #: The plugin ran in the session (its first line is there).
    started: bool = False
    #: The session ended (its last line is there).
    ended: bool = False
    #: The runner is the code under test: nothing was recorded.
    runner_in_repo: bool = False
    #: nodeid -> every status pytest reported for it (PASSED, FAILED, ERROR, SKIPPED, XFAIL, XPASS), in order.
    statuses: dict[str, list[str]] = field(default_factory=dict)
    #: The runner's names rebound or modules replaced while the tests ran.
    changed: list[str] = field(default_factory=list)
    #: Tests that raised but whose report said they passed.
    raised_but_passed: list[str] = field(default_factory=list)
    #: Lines that are not the plugin's (the file was written by something else too).
    foreign_lines: int = 0

    @property
    def usable(self) -> bool:
        return self.started and not self.runner_in_repo


def _status(report: Mapping[str, object]) -> str | None:
    """A report's status as pytest's summary prints it (``_pytest.terminal``/``skipping``), or None."""
    when, outcome, xfail = report.get("when"), report.get("outcome"), bool(report.get("wasxfail"))
    if outcome == "skipped":
        return "XFAIL" if xfail else "SKIPPED"
    if when == "call":
        if outcome == "passed":
            return "XPASS" if xfail else "PASSED"
        return "FAILED" if outcome == "failed" else None
    return "ERROR" if outcome == "failed" else None


def read_record(text: str) -> RunRecord:
    """The record from the file's text (untrusted: anything unparseable is counted, never raised)."""
    armed = started = ended = in_repo = False
    statuses: dict[str, list[str]] = {}
    changed: list[str] = []
    raised: list[str] = []
    foreign = 0
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            foreign += 1
            continue
        kind = entry.get("kind") if isinstance(entry, dict) else None
        if kind == "armed":
            armed = True
        elif kind == "start":
            started, in_repo = True, bool(entry.get("runner_in_repo"))
        elif kind == "end":
            ended = True
        elif kind == "report" and isinstance(entry.get("nodeid"), str):
            status = _status(entry)
            if status is not None:
                statuses.setdefault(entry["nodeid"], []).append(status)
        elif kind == "changed" and isinstance(entry.get("names"), list):
            changed += [str(n) for n in entry["names"]]
        elif kind == "raised_but_passed" and isinstance(entry.get("nodeid"), str):
            raised.append(entry["nodeid"])
        elif kind != "collect":
            foreign += 1
    return RunRecord(armed, started, ended, in_repo, statuses, changed, raised, foreign)


#: A log parser of one harness: a log's text -> test name -> status (swebench's parsers' shape).
Parser = Callable[[str], Mapping[str, str]]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def statuses_per_line(log: str, parse: Parser) -> dict[str, list[str]]:
    """Each test's statuses in a log, in order, by its parser applied line by line (swebench's pytest
    parsers read one line at a time and keep a test's last status)."""
    out: dict[str, list[str]] = {}
    for line in log.split("\n"):
        if not line.strip():
            continue
        for name, status in parse(line).items():
            out.setdefault(name, []).append(status)
    return out


def record_in_log_names(record: RunRecord, parse: Parser) -> dict[str, set[str]]:
    """The record's statuses under the names the harness's parser gives (a parametrized id with a space
    is cut at it, say): each status as the ``-rA`` summary line pytest prints, read by the parser."""
    out: dict[str, set[str]] = {}
    for nodeid, said in record.statuses.items():
        for status in set(said):
            for name, parsed in parse(f"{status} {nodeid}").items():
                out.setdefault(name, set()).add(parsed)
    return out


@dataclass(frozen=True)
class Check:
    """What the record and the log say against each other, for the tests of the verdict."""

    #: "compared" (a record, set against the log), "none" (no record made: not a pytest run, or the
    #: runner is the code under test), "missing" (a record was due and is not there) or "unloadable"
    #: (pytest could not import the plugin: the tests ran again without it).
    record: str
    #: test -> {"log": its status in the log, "record": the statuses pytest reported ("-": none)}.
    disagree: dict[str, dict[str, str]] = field(default_factory=dict)
    #: test -> its statuses in the log, in order (a failing one, then a passing one kept by the parser).
    conflicts: dict[str, list[str]] = field(default_factory=dict)
    #: What else the record said: the runner changed, a test that raised reported as passed.
    notes: list[str] = field(default_factory=list)

    def findings(self) -> list[str]:
        """What the flags were raised for, a line each (the row's ``tamper``)."""
        out = [f"{t}: log {d['log']}, record {d['record']}" for t, d in self.disagree.items()]
        out += [f"{t}: log {', '.join(said)}" for t, said in self.conflicts.items()]
        return out + self.notes

    @property
    def flags(self) -> list[str]:
        tamper = bool(self.disagree or self.notes or self.record == "missing")
        return [f for f, on in ((RUNNER_TAMPER, tamper), (STATUS_CONFLICT, bool(self.conflicts))) if on]


def compare(
    log: str,
    parse: Parser,
    tests: Iterable[str],
    record: RunRecord | None,
    *,
    expected: bool,
    record_names: Callable[[RunRecord], dict[str, set[str]]] | None = None,
    log_statuses: dict[str, list[str]] | None = None,
) -> Check:
    """The log (the tests' span the verdict was read from) against ``record`` for ``tests`` (FAIL_TO_PASS
    and PASS_TO_PASS). ``expected``: the harness ran the tests under pytest with the plugin, so a missing
    record is a finding; ``record_names``: the record under the log's names (default: through ``parse``);
    ``log_statuses``: each test's statuses in the log, where the harness reads them otherwise than a line
    at a time (default: ``parse`` line by line)."""
    wanted = list(dict.fromkeys(tests))
    in_log = log_statuses if log_statuses is not None else statuses_per_line(_ANSI.sub("", log), parse)
    conflicts = {t: in_log[t] for t in wanted if t in in_log and in_log[t][-1] in PASSING and FAILING & set(in_log[t])}
    passing_in_log = [t for t in wanted if t in in_log and in_log[t][-1] in PASSING]
    if record is None or not record.started:
        missing = expected and bool(passing_in_log)
        notes = [f"no record of the test run, and the log says {len(passing_in_log)} of its tests passed"]
        return Check("missing" if missing else "none", conflicts=conflicts, notes=notes if missing else [])
    if record.runner_in_repo:
        return Check("none", conflicts=conflicts)
    named = (record_names or (lambda r: record_in_log_names(r, parse)))(record)
    disagree = {}
    for t in wanted:
        log_status = in_log[t][-1] if t in in_log else None
        said = named.get(t, set())
        if log_status is None and not said:
            continue  # neither ran it (a test the verdict already counts as failing)
        if log_status not in said:
            disagree[t] = {"log": log_status or "-", "record": ", ".join(sorted(said)) or "-"}
    notes = [f"the runner changed while the tests ran: {', '.join(record.changed[:10])}"] if record.changed else []
    if record.raised_but_passed:
        notes.append(f"reported passed though it raised: {', '.join(record.raised_but_passed[:10])}")
    return Check("compared", disagree, conflicts, notes)


__all__ = [
    "NOT_LOADED",
    "PLUGIN",
    "PLUGIN_DIR",
    "PLUGIN_MOUNT",
    "RECORD_BYTES",
    "RUNNER_TAMPER",
    "STATUS_CONFLICT",
    "Check",
    "RunRecord",
    "compare",
    "prelude",
    "read_record",
    "record_in_log_names",
    "record_path",
    "statuses_per_line",
]
