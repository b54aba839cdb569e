"""anyswe's record of a pytest run: a second account of each test's outcome, beside the log.

Loaded by pytest before anything of the repository (``-p anyswe_pytest_record`` in ``PYTEST_ADDOPTS``,
and by name in ``PYTEST_PLUGINS``, set in a grading sandbox only), it writes one JSON line per test
report to the file ``--anyswe-record`` (or ``ANYSWE_PYTEST_RECORD``) names, outside the work tree,
and says whether the runner's own report machinery was changed while the tests ran (a module of
``_pytest`` or ``pluggy`` replaced, or a function or class attribute of one rebound). The log parser
reads what the tests printed, which the code under test can print too (an ``atexit`` writing
``PASSED`` lines); this file is what pytest itself made of each test. anyswe compares the two on the
host (``anyswe/grading/testrecord/__init__.py``).

It prints nothing, changes no option, no report and no outcome, and gives the environment back as it
was once read (its options out of ``PYTEST_ADDOPTS`` and ``PYTEST_PLUGINS``), so a pytest the tests
start loads nothing of it. A second session in the same process (pytester) or in a child process
records nothing. Where the runner is the code under test (pytest's own repository) it records only that.

Standalone: any Python 3 and pytest from 3.x on, nothing imported but the standard library and pytest.
"""

import json
import os
import sys

import pytest

if False:  # for type checkers only (typing.TYPE_CHECKING: this file must not import more than it needs)
    import types
    from typing import Any

#: What anyswe appends to PYTEST_ADDOPTS, up to the record's path (taken back out at configure).
OPTION = "--anyswe-record"
_TAKEN = "ANYSWE_PYTEST_RECORD_TAKEN"
_PATH_VAR = "ANYSWE_PYTEST_RECORD"
_NAME = "anyswe_pytest_record"
#: The runner's modules whose functions and classes make, route and print reports.
_WATCHED = (
    "_pytest.reports",
    "_pytest.runner",
    "_pytest.terminal",
    "_pytest.skipping",
    "_pytest.python",
    "_pytest.main",
    "_pytest.nodes",
    "_pytest.outcomes",
    "_pytest.unittest",
    "_pytest.junitxml",
    "pluggy",
    "pluggy._callers",
    "pluggy._hooks",
    "pluggy._result",
    "pluggy._manager",
    "pluggy.callers",
    "pluggy.hooks",
    "pluggy.manager",
)

#: Where a name added to a class is a change too (a report class's new method): elsewhere pytest adds its own
#: (``Function._pytest_diamond_inheritance_warning_shown``, once a warning is shown).
_CLOSED = ("_pytest.reports", "_pytest.runner", "pluggy._result")

_state: "dict[str, Any]" = {}


def pytest_addoption(parser: "pytest.Parser") -> None:
    parser.addoption(OPTION, dest="anyswe_record", default=None, help="(anyswe) where to write the test record")


def _members(module: "types.ModuleType") -> "list[tuple[Any, str, object]]":
    """(namespace, name, object) for each function and class of ``module`` and each attribute of the
    classes it defines: the namespaces are the live ones (the module's and each class's ``__dict__``)."""
    found: list[tuple[Any, str, object]] = []
    space = vars(module)
    for name, value in list(space.items()):
        if isinstance(value, type):
            found.append((space, name, value))
            if getattr(value, "__module__", None) == module.__name__:
                found.extend((vars(value), name + "." + attr, member) for attr, member in list(vars(value).items()))
        elif callable(value):
            found.append((space, name, value))
    return found


def _snapshot() -> "list[Any]":
    """What is checked later: each watched module, its members, and its classes' namespaces' sizes."""
    snap = []
    for name in _WATCHED:
        module = sys.modules.get(name)
        if module is not None:
            members = _members(module)
            sizes = {id(ns): (member.rpartition(".")[0] or name, ns, len(ns)) for ns, member, _ in members}
            snap.append((name, module, members, list(sizes.values()) if name in _CLOSED else []))
    return snap


def _changed(snap: "list[Any]") -> "list[str]":
    """What of the runner differs from the snapshot: a module replaced, a name rebound or removed, a
    namespace grown (a method added to a report class, say)."""
    out = []
    for name, module, members, sizes in snap:
        if sys.modules.get(name) is not module:
            out.append(name + " (module replaced)")
            continue
        for space, member, value in members:
            if space.get(member.rpartition(".")[2]) is not value:
                out.append(name + ": " + member)
        for owner, space, size in sizes:
            if len(space) != size:
                out.append(name + ": " + owner + " (grew)")
    return sorted(set(out))


def _write(entry: "dict[str, object]") -> None:
    out = _state.get("out")
    if out is None:
        return
    try:
        out.write(json.dumps(entry, sort_keys=True) + "\n")
        out.flush()
    except (OSError, ValueError, TypeError):
        pass  # the file was closed or taken away: its absence is what the host reads


def _check() -> None:
    changed = _changed(_state["snapshot"])
    new = [c for c in changed if c not in _state["seen"]]
    if new:
        _state["seen"].update(new)
        _write({"kind": "changed", "names": new})


def _given_back(path: str) -> None:
    """The environment as it was before anyswe's prelude: its options out of PYTEST_ADDOPTS, its name out
    of PYTEST_PLUGINS, its variable gone (a pytest the tests start loads nothing of anyswe's)."""
    plugins = [p for p in os.environ.get("PYTEST_PLUGINS", "").split(",") if p.strip() and p.strip() != _NAME]
    if plugins:
        os.environ["PYTEST_PLUGINS"] = ",".join(plugins)
    else:
        os.environ.pop("PYTEST_PLUGINS", None)
    os.environ.pop(_PATH_VAR, None)
    addopts = os.environ.get("PYTEST_ADDOPTS", "")
    at = addopts.find(" -p anyswe_pytest_record " + OPTION)
    if at < 0:
        at = addopts.find("-p anyswe_pytest_record " + OPTION)
    found = addopts.find(path, at) if at >= 0 else -1
    if found >= 0:
        end = found + len(path)
        rest = (addopts[:at] + addopts[end:]).strip()
        if rest:
            os.environ["PYTEST_ADDOPTS"] = rest
        else:
            os.environ.pop("PYTEST_ADDOPTS", None)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: "pytest.Config") -> None:
    # The path from the option (through tox, which passes PYTEST_ADDOPTS on) or the variable (where an
    # eval script sets PYTEST_ADDOPTS itself, as SWE-bench Pro's export their images' ENV lines).
    path = config.getoption("anyswe_record", None) or os.environ.get(_PATH_VAR)
    if not path or _state or os.environ.get(_TAKEN):
        return
    _given_back(path)
    os.environ[_TAKEN] = "1"
    try:
        out = open(path, "a")  # noqa: SIM115 (open for the session: closed at its end)
    except OSError:
        return
    import _pytest

    source = os.path.dirname(os.path.abspath(_pytest.__file__))
    rootdir = str(getattr(config, "rootpath", getattr(config, "rootdir", "")))
    in_repo = bool(rootdir) and (source + os.sep).startswith(os.path.join(rootdir, ""))
    _state.update(out=out, snapshot=_snapshot(), seen=set(), in_repo=in_repo)
    _write({"kind": "start", "pid": os.getpid(), "pytest": pytest.__version__, "runner_in_repo": in_repo})
    if in_repo:
        _state["out"] = None
        out.close()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: "pytest.Item", call: "pytest.CallInfo[None]") -> "Any":
    outcome = yield
    if not _state.get("out"):
        return
    report = outcome.get_result()
    excinfo = call.excinfo
    if excinfo is not None and getattr(report, "outcome", None) == "passed" and not hasattr(report, "wasxfail"):
        # The test raised, and the report made of it says it passed.
        _write({"kind": "raised_but_passed", "nodeid": item.nodeid, "when": call.when, "raised": excinfo.typename})


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: "pytest.TestReport") -> None:
    if not _state.get("out"):
        return
    _write(
        {
            "kind": "report",
            "nodeid": report.nodeid,
            "when": report.when,
            "outcome": report.outcome,
            "wasxfail": hasattr(report, "wasxfail"),
        }
    )
    if report.when == "call":  # once per test (a check costs about 0.2 ms): before its result is printed
        _check()


@pytest.hookimpl(tryfirst=True)
def pytest_collectreport(report: "pytest.CollectReport") -> None:
    if _state.get("out") and report.outcome != "passed":
        _write({"kind": "collect", "nodeid": report.nodeid, "outcome": report.outcome})


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: "pytest.Session", exitstatus: int) -> None:
    if not _state.get("out"):
        return
    _check()
    _write({"kind": "end", "exitstatus": int(exitstatus)})
    out, _state["out"] = _state["out"], None
    out.close()
