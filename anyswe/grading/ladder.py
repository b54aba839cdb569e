"""Apply a model patch and run the eval script in a fresh sandbox, exactly as swebench does."""

from __future__ import annotations

import dataclasses
import shlex
from typing import TYPE_CHECKING, Any

from anyswe import _proc
from anyswe.errors import SandboxFileError, SandboxOverLimit
from anyswe.grading import swebench as sb
from anyswe.grading import testrecord
from anyswe.grading.base import Harness, Verdict

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance
    from anyswe.sandbox import Mount, Sandbox

PATCH_PATH = "/tmp/patch.diff"
EVAL_PATH = "/eval.sh"
# Printed after the eval script returns: its absence means the script was cut short, by its sandbox's
# death (no verdict) or by the tests' own processes (see grade_patch). Removed before the log is graded.
END_MARKER = "ANYSWE-EVAL-END"
#: What is kept of an eval script's output: far above any real suite's log (SWE-bench's are at most a
#: few MB), and a bound on the driver's memory.
EVAL_OUTPUT_BYTES = 4 * _proc.MAX_OUTPUT_BYTES


async def apply_patch(
    sandbox: Sandbox[Any], patch: str, workdir: str, ladder: tuple[str, ...] | None = None
) -> tuple[str | None, str]:
    """Run ``ladder`` (default swebench's: ``git apply``, ``--reject``, ``patch --fuzz=5``); the rung that
    worked, and a log."""
    await sandbox.write_file(PATCH_PATH, patch.encode())
    log = []
    for rung in ladder or sb.patch_apply_ladder():
        r = await sandbox.exec([*shlex.split(rung), PATCH_PATH], workdir=workdir, timeout=300)
        log.append(f"$ {rung} {PATCH_PATH}\n(exit {r.exit_code})\n{r.stdout}{r.stderr}")
        if r.ok:
            log.append(sb.APPLY_PATCH_PASS)
            return rung, "\n".join(log)
    log.append(sb.APPLY_PATCH_FAIL)
    return None, "\n".join(log)


def split_end_marker(output: str) -> tuple[str, bool]:
    """The eval script's own output, and whether it ran to its end (the marker line follows it)."""
    at = output.rfind(f"\n{END_MARKER} ")
    if at < 0:
        return output, False
    return output[:at], True


def empty_patch_verdict(instance: Instance, harness: Harness) -> Verdict:
    """An empty patch is unresolved without running anything (swebench: the apply fails)."""
    return Verdict(resolved=False, patch_exists=False, patch_applied=False, eval_script=harness.eval_script(instance))


def record_mounts(instance: Instance, harness: Harness) -> tuple[Mount, ...]:
    """What a grading sandbox of ``instance`` mounts for its record of the tests (grading/testrecord):
    the plugin, read-only, where its tests run under pytest."""
    from anyswe.sandbox import Mount

    if not harness.runs_pytest(instance):
        return ()
    name = f"{testrecord.PLUGIN}.py"
    return (Mount(str(testrecord.PLUGIN_DIR / name), f"{testrecord.PLUGIN_MOUNT}/{name}"),)


async def grade_patch(
    sandbox: Sandbox[Any], instance: Instance, harness: Harness, patch: str | None, *, timeout: float
) -> Verdict:
    """Grade ``patch`` for ``instance`` inside ``sandbox`` (which must be fresh, from the task image).

    An empty patch and a patch no rung can apply are unresolved without running the tests, as in
    swebench's ``run_instance``. A sandbox that one of its own limits ended (the patch's tests used it
    up, and made its PID 1 the OOM kill: sandbox/oom.py) is unresolved too, with the evidence in the
    verdict's ``error``: the patch's doing, not a lost sandbox.
    """
    if not patch or not patch.strip():
        return empty_patch_verdict(instance, harness)
    rungs: list[str] = []
    try:
        return await _grade_patch(sandbox, instance, harness, patch, timeout=timeout, rungs=rungs)
    except SandboxOverLimit as exc:
        error = f"{type(exc).__name__}: {exc}"
        return Verdict(
            resolved=False,
            patch_exists=True,
            patch_applied=bool(rungs),
            applied_by=rungs[0] if rungs else None,
            eval_script=harness.eval_script(instance),
            test_output=f"anyswe: {error}\n",
            error=error,
        )


async def _grade_patch(
    sandbox: Sandbox[Any], instance: Instance, harness: Harness, patch: str, *, timeout: float, rungs: list[str]
) -> Verdict:
    script = harness.eval_script(instance)
    rung, apply_log = await apply_patch(sandbox, harness.patch_to_apply(patch), harness.workdir, harness.apply_ladder)
    if rung is not None:
        rungs.append(rung)  # for the verdict of a sandbox that dies under the tests
    if rung is None:
        await sandbox.check_alive("patch apply", settle=2)  # a dead sandbox fails every rung
        return Verdict(
            resolved=False,
            patch_exists=True,
            patch_applied=False,
            eval_script=script,
            apply_log=apply_log,
            test_output=apply_log,
        )
    applied: dict[str, Any] = {
        "patch_exists": True,
        "patch_applied": True,
        "applied_by": rung,
        "eval_script": script,
        "apply_log": apply_log,
    }
    return await _run_eval(sandbox, instance, harness, timeout=timeout, applied=applied)


async def grade_unpatched(sandbox: Sandbox[Any], instance: Instance, harness: Harness, *, timeout: float) -> Verdict:
    """The eval script run on the image as it is, no patch applied: what the tests say without a fix
    (a gold census's empty pass; a run's empty patch is unresolved without running anything)."""
    script = harness.eval_script(instance)
    applied: dict[str, Any] = {"patch_exists": False, "patch_applied": False, "eval_script": script}
    return await _run_eval(sandbox, instance, harness, timeout=timeout, applied=applied)


async def _run_eval(
    sandbox: Sandbox[Any], instance: Instance, harness: Harness, *, timeout: float, applied: dict[str, Any]
) -> Verdict:
    script = applied["eval_script"]
    await sandbox.write_file(EVAL_PATH, script.encode(), mode=0o755)
    # The record of the tests (grading/testrecord): where they run under pytest and the sandbox has the plugin.
    record = testrecord.record_path() if harness.runs_pytest(instance) and _has_plugin(sandbox) else None
    verdict = await _eval(sandbox, instance, harness, timeout=timeout, applied=applied, record=record)
    if record is not None and verdict.check is not None and verdict.check.record == "unloadable":
        # pytest could not import the plugin here (an environment that sees neither PYTHONPATH nor the
        # user's site directory): the tests never ran; they run again as swebench runs them, unrecorded.
        again = await _eval(sandbox, instance, harness, timeout=timeout, applied=applied, record=None)
        check = again.check and dataclasses.replace(again.check, record="unloadable")
        verdict = dataclasses.replace(again, check=check)
    return verdict


def _has_plugin(sandbox: Sandbox[Any]) -> bool:
    return any(m.target.startswith(testrecord.PLUGIN_MOUNT + "/") for m in sandbox.request.mounts)


async def _eval(
    sandbox: Sandbox[Any],
    instance: Instance,
    harness: Harness,
    *,
    timeout: float,
    applied: dict[str, Any],
    record: str | None,
) -> Verdict:
    # One stream, stderr folded in: `set -x` puts the markers on stderr, in order with pytest's output.
    prelude = f"{testrecord.prelude(record)}; " if record else ""
    script_then_marker = f"{prelude}/bin/bash {EVAL_PATH} 2>&1; rc=$?; echo; echo {END_MARKER} $rc"
    r = await sandbox.exec(
        ["bash", "-c", script_then_marker], workdir=harness.workdir, timeout=timeout, max_output=EVAL_OUTPUT_BYTES
    )
    applied = {**applied, "tests_timed_out": r.timed_out}
    if r.stdout_dropped:
        # swebench's log parsers read every test's status line: one cut from the middle of the log
        # would read as a test that did not pass, so a cut log is not graded. Nor is it masked: the
        # tests ran with the patch applied, and a patch whose tests print hundreds of megabytes (a
        # conftest, say) must not buy itself another attempt. Unresolved, with the cap in the row.
        await sandbox.check_alive("the eval script", settle=5)
        size = len(r.stdout.encode()) + r.stdout_dropped
        note = f"\nanyswe: the eval script printed {size} bytes, over the {EVAL_OUTPUT_BYTES}-byte cap: not graded\n"
        return Verdict(resolved=False, test_output=r.stdout + note, output_over_cap=True, **applied)
    output, ended = split_end_marker(r.stdout)
    note = ""
    if not ended:
        # A sandbox that died under the tests is no verdict (SandboxLost, raised here), unless its
        # own memory limit ended it: the tests' doing, unresolved with what they printed. One still
        # alive was not ended from outside: nothing inside can end its PID 1, so what cut the script
        # short is the tests' own processes (the patch's conftest killing every process, say). That
        # is the patch's doing, graded on the output as it stands, as swebench grades such a log.
        try:
            await sandbox.check_alive("the eval script", settle=5)
        except SandboxOverLimit as exc:
            error = f"{type(exc).__name__}: {exc}"
            return Verdict(resolved=False, test_output=f"{output}\nanyswe: {error}\n", error=error, **applied)
        if not r.timed_out:
            note = f"\nanyswe: the eval script was ended from inside the sandbox (exit {r.exit_code}, no end marker)\n"
    if r.timed_out:
        output += f"\n{sb.TESTS_TIMEOUT} after {timeout:g} seconds\n"
    verdict = harness.grade_log(instance, output)
    found = await _read_record(sandbox, record) if record else None
    if found is not None and found.armed and not found.started and _unloadable(instance, harness, output):
        check: testrecord.Check | None = testrecord.Check("unloadable")
    else:
        check = harness.check_record(instance, output, found, expected=record is not None)
    return Verdict(
        resolved=verdict.resolved, tests_status=verdict.tests_status, test_output=output + note, check=check, **applied
    )


def _unloadable(instance: Instance, harness: Harness, output: str) -> bool:
    """pytest stopped at its start because it could not import the plugin: it says so, and no test ran
    (nothing of the repository runs before a ``-p`` plugin is imported)."""
    parse = harness.log_parser(instance)
    return testrecord.NOT_LOADED in output and parse is not None and not parse(output)


async def _read_record(sandbox: Sandbox[Any], path: str) -> testrecord.RunRecord | None:
    """The plugin's record from the sandbox; None where there is none (removed, too large: the tests'
    doing, which the check reads as a missing record)."""
    try:
        data = await sandbox.read_file(path, max_output=testrecord.RECORD_BYTES)
    except SandboxFileError:
        return None
    return testrecord.read_record(data.decode(errors="replace"))
