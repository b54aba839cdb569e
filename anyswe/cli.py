"""The ``anyswe`` command line: a thin layer over the Python API."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from anyswe.errors import AnysweError, ResultsError

app = typer.Typer(
    name="anyswe",
    help="Run agents x models x sandbox providers over SWE-bench-style tasks and compare the results.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def fail(exc: AnysweError) -> NoReturn:
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


@app.command()
def smoke(
    providers: Annotated[list[str] | None, typer.Option("--provider", "-p", help="Provider(s) to try.")] = None,
) -> None:
    """Start a sandbox on each provider and run a command in it."""
    from anyswe.config import base_image
    from anyswe.sandbox import get_provider, provider_names

    async def base() -> str:
        return base_image()

    async def one(name: str) -> str:
        provider = get_provider(name)
        await provider.check()
        image = await provider.runnable_image(base, {})
        start = time.monotonic()
        async with provider.sandbox(image) as sb:
            r = await sb.exec(
                'echo "hello from $(. /etc/os-release; echo $PRETTY_NAME) in $0"; python3 --version',
                timeout=60,
            )
        if not r.ok:
            raise AnysweError(f"{name}: command failed ({r.exit_code}): {r.stderr}")
        return f"{name:10s} ok  {time.monotonic() - start:5.2f}s  {' | '.join(r.stdout.split(chr(10))[:2])}"

    try:
        for name in providers or provider_names():
            typer.echo(asyncio.run(one(name)))
    except AnysweError as exc:
        fail(exc)


@app.command()
def gc(
    all_: Annotated[
        bool, typer.Option("--all", help="Also remove sandboxes whose owning anyswe process still runs.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Also remove sandboxes whose owner cannot be told (no readable labels).")
    ] = False,
    session: Annotated[str | None, typer.Option("--session", help="Only sandboxes of this ANYSWE_SESSION.")] = None,
) -> None:
    """Find and remove every leftover anyswe container, apptainer instance and overlay, and the files
    killed runs left: interrupted SIF builds, host scratch directories.

    Sandboxes of a still-running anyswe process are kept unless --all is given; sandboxes whose owner
    cannot be told are listed and kept unless --force is given.
    """
    from anyswe.sandbox import collect_files
    from anyswe.sandbox import gc as sandbox_gc

    found = asyncio.run(sandbox_gc(session=session, include_live=all_, force=force))
    total = 0
    for provider, collected in found.items():
        for name in collected.removed:
            typer.echo(f"removed {provider} {name}")
        for name in collected.unknown_owner:
            typer.secho(f"kept {provider} {name}: its owner cannot be told (--force removes it)", err=True)
        total += len(collected.removed)
    typer.echo(f"{total} leftover sandbox(es) removed")
    files = collect_files()
    for path in files:
        typer.echo(f"removed {path}")
    typer.echo(f"{len(files)} leftover file tree(s) removed")


SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Override a spec field: a.b=c (repeatable).")]


def print_table(rows: list[dict[str, object]], title: str | None = None) -> None:
    """A table on stdout, no column cut (anyswe/results/terminal.py)."""
    from anyswe.results.terminal import render

    render(rows, title)


def _cells_view(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """The default view of a cell or repo table: the columns that matter most, in 100 columns."""
    from anyswe.results.terminal import fit, summary

    return fit(summary(rows))


@app.command()
def plan(
    spec: Annotated[Path, typer.Argument(help="Experiment spec (YAML).")],
    set_: SetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Expand a spec into cells and tasks and print them (nothing runs)."""
    from anyswe.plan import make_plan
    from anyswe.spec import load_spec

    try:
        p = make_plan(load_spec(spec, set_ or ()))
    except AnysweError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps(p.to_json(), indent=1))
        return
    print_table(p.cell_rows(), title=f"{p.spec.name}: {len(p.tasks)} tasks over {len(p.instances)} instances")
    _note_exclusions(p.excluded)
    for note in p.notes:
        typer.echo(note)
    _warn(p.warnings)


def _note_exclusions(excluded: dict[str, str]) -> None:
    from anyswe.results.tables import exclusion_note

    if note := exclusion_note(excluded):
        typer.echo(note)


def _warn(warnings: list[str]) -> None:
    for text in warnings:
        typer.secho(f"warning: {text}", fg=typer.colors.YELLOW, err=True)


@app.command()
def apply(
    spec: Annotated[Path, typer.Argument(help="Experiment spec (YAML).")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Run directory (default: runs/<name>).")] = None,
    set_: SetOpt = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-j", min=1)] = None,
    executor: Annotated[
        str | None, typer.Option("--executor", help="local (default) or ray: spread tasks over a Ray cluster.")
    ] = None,
    address: Annotated[str | None, typer.Option("--address", help="Ray cluster address (host:port, or auto).")] = None,
) -> None:
    """Run every task of a spec not already finished in its run directory (re-apply to resume)."""
    from anyswe._sync import run_stoppable, settle_heap
    from anyswe.experiment import Experiment

    exp = None
    received: list[int] = []  # the stop signals, in order
    try:
        exp = Experiment.load(spec, overrides=set_ or (), run_dir=out)
        _warn(exp.planned.warnings)
        settle_heap()
        summary = run_stoppable(exp.run_async(concurrency=concurrency, executor=executor, address=address), received)
    except AnysweError as exc:
        fail(exc)
    except KeyboardInterrupt:
        sig = signal.Signals(received[-1] if received else signal.SIGINT)
        typer.secho(f"interrupted ({sig.name}): results kept; apply again to resume", fg="yellow", err=True)
        if exp is not None and (exp.run_dir / "plan.json").is_file():
            status(exp.run_dir)
        raise typer.Exit(code=128 + sig) from None
    typer.echo(str(summary))
    print_table(_cells_view(exp.cells().to_dicts()), title="cells")
    _note_exclusions(exp.excluded())
    if summary.incomplete:
        typer.secho(
            "some tasks ended without a verdict or every task failed: see error.txt in their folders "
            f"(`anyswe results {exp.run_dir} --by instance`); apply again to retry infra errors",
            fg=typer.colors.YELLOW,
            err=True,
        )
        raise typer.Exit(code=1)


@app.command()
def status(run_dir: Annotated[Path, typer.Argument(help="A run directory.")]) -> None:
    """How far a run got: tasks planned, finished, with errors, per cell."""
    from anyswe.results.store import latest_attempts, read_results

    plan_path = run_dir / "plan.json"
    if not plan_path.is_file():
        fail(ResultsError(f"{run_dir} is not a run directory (no plan.json)"))
    planned = json.loads(plan_path.read_text())
    try:
        found = {r.key: r for r in latest_attempts(read_results(run_dir / "results.jsonl"))}
    except AnysweError as exc:
        fail(exc)
    out = []
    for cell in planned["cells"]:
        keys = [t["key"] for t in planned["tasks"] if t["cell"] == cell["cell"]]
        done = [found[k] for k in keys if k in found]
        out.append(
            {
                "cell": cell["cell"],
                "planned": len(keys),
                "finished": len(done),
                "resolved": sum(r.resolved for r in done),
                "errors": sum(r.error_kind is not None for r in done),
                "pending": len(keys) - len(done),
            }
        )
    print_table(out, title=f"{planned['spec']} ({run_dir})")
    _note_exclusions(planned.get("excluded") or {})


@app.command()
def results(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    by: Annotated[str, typer.Option("--by", help="cell, repo or instance (an instance x cell matrix).")] = "cell",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per row.")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV on stdout.")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Every column (the default view fits 100).")] = False,
    over: Annotated[
        Path | None, typer.Option("--over", help="An exclusion list (gold-check's): rates over the rest only.")
    ] = None,
) -> None:
    """Result tables of a run: per cell (resolve rate with 95% Wilson interval, ...), per repo, or per instance."""
    from anyswe.results.tables import cell_table, instance_matrix, repo_table, task_frame
    from anyswe.results.terminal import numbered

    tables = {"cell": cell_table, "repo": repo_table, "instance": instance_matrix}
    if by not in tables:
        fail(ResultsError(f"--by must be one of {', '.join(tables)}, not {by!r}"))
    try:
        table = tables[by](task_frame(run_dir, over))
    except AnysweError as exc:
        fail(exc)
    if as_json:
        for row in table.to_dicts():
            typer.echo(json.dumps(row))
    elif as_csv:
        typer.echo(table.write_csv(), nl=False)
    else:
        rows, legend = table.to_dicts(), list[str]()
        if not wide:
            rows, legend = numbered(rows) if by == "instance" else (_cells_view(rows), [])
        print_table(rows, title=f"{run_dir} by {by}")
        for line in legend:
            typer.echo(line)
        from anyswe.results.tables import over_exclusions, run_exclusions

        try:
            _note_exclusions(run_exclusions(run_dir) | over_exclusions(over))
        except AnysweError as exc:
            fail(exc)


@app.command()
def diff(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (A).")],
    other: Annotated[Path | None, typer.Argument(help="A second run directory (B): compare cell by cell.")] = None,
    by: Annotated[str, typer.Option("--by", help="Within one run, pair cells differing in this key.")] = "provider",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per compared pair of cells.")] = False,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the paired bootstrap.")] = 0,
    exclude_flaky: Annotated[
        Path | None,
        typer.Option("--exclude-flaky", help="Leave out a triage's flaky instances (a run, or its triage.json)."),
    ] = None,
) -> None:
    """Paired comparison: agreement, flips with instance ids, delta with a bootstrap CI over instances,
    and a paired p (exact McNemar; a sign-flip test by instance when there are several samples)."""
    import polars as pl

    from anyswe.execute.triage import flaky_instances
    from anyswe.results.compare import compare_by, compare_runs
    from anyswe.results.tables import task_frame

    try:
        flaky = sorted(flaky_instances(exclude_flaky)) if exclude_flaky else []
        tasks = task_frame(run_dir).filter(~pl.col("instance_id").is_in(flaky))
        if other:
            found = compare_runs(tasks, task_frame(other).filter(~pl.col("instance_id").is_in(flaky)), seed=seed)
        else:
            found = compare_by(tasks, by, seed=seed)
    except AnysweError as exc:
        fail(exc)
    for c in found:
        typer.echo(json.dumps(c.to_json()) if as_json else str(c))
    if flaky and not as_json:
        typer.echo(f"left out as flaky ({exclude_flaky}): {', '.join(flaky)}")
    _warn([w for c in found for w in c.warnings])


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The HTML file to write.")] = Path("report.html"),
) -> None:
    """Write one self-contained HTML report (tables, backend comparison, charts, per-task drill-down)."""
    from anyswe.results.report import write_report

    problems: list[str] = []
    try:
        path = write_report(run_dir, out, problems=problems)
    except AnysweError as exc:
        fail(exc)
    for problem in problems:
        typer.secho(f"warning: trajectory line not read: {problem}", fg=typer.colors.YELLOW, err=True)
    typer.echo(f"wrote {path}")


export_app = typer.Typer(help="Write a run's results in other tools' formats.", no_args_is_help=True)
app.add_typer(export_app, name="export")


@export_app.command("atif")
def export_atif(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Directory to write (default: RUN/atif).")] = None,
) -> None:
    """Write each task's trajectory as ATIF v1.8 (Harbor's format), one <task key>.json per task."""
    from anyswe.results.atif import export_atif as write

    try:
        paths = write(run_dir, out)
    except AnysweError as exc:
        fail(exc)
    where = out or run_dir / "atif"
    typer.echo(f"wrote {len(paths)} ATIF trajectories to {where}")


# `anyswe prepare ...`, `anyswe gold-check`, `anyswe serve` and the commands that grade again
# (`regrade`, `grade`, `triage`) live with their code.
from anyswe.grade_cli import register as _register_grade  # noqa: E402
from anyswe.prepare.cli import register as _register_prepare  # noqa: E402
from anyswe.serve_cli import register as _register_serve  # noqa: E402

_register_grade(app)
_register_prepare(app)
_register_serve(app)


def main() -> None:
    try:
        app()
    except AnysweError as exc:  # pragma: no cover - typer re-raises only outside commands
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(2)
