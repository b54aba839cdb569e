"""The commands that grade again: ``anyswe regrade`` (stored logs, offline), ``anyswe grade`` (a run's
patches, live) and ``anyswe triage`` (what each backend flip is)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from anyswe.errors import AnysweError


def regrade(
    dataset: Annotated[str, typer.Argument(help="Dataset rows (JSONL/JSON/parquet path) or a known dataset name.")],
    log_dir: Annotated[Path, typer.Argument(help="Directory of <key>/test_output.txt, or an anyswe run directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per log.")] = False,
    name: Annotated[
        str | None, typer.Option("--name", help="Route by this dataset name when DATASET is a file.")
    ] = None,
) -> None:
    """Re-grade stored test logs offline with the harness each instance routes to."""
    from anyswe.cli import fail, print_table
    from anyswe.datasets import load_dataset
    from anyswe.grading.regrade import regrade as run_regrade

    try:
        as_path = Path(dataset)
        ds = load_dataset(name, as_path) if as_path.suffix in (".jsonl", ".json", ".parquet") else load_dataset(dataset)
        results = list(run_regrade(ds, log_dir))
    except AnysweError as exc:
        fail(exc)
    errors = [r for r in results if "error" in r]
    if as_json:
        for r in results:
            typer.echo(json.dumps(r, sort_keys=True))
    else:
        print_table(
            [
                {
                    "key": r["key"],
                    "instance_id": r["instance_id"],
                    "verdict": r.get("error") or ("resolved" if r["resolved"] else "unresolved"),
                }
                for r in results
            ],
            title=f"{len(results)} logs, {sum(bool(r.get('resolved')) for r in results)} resolved, "
            f"{len(errors)} errors",
        )
    if errors:
        raise typer.Exit(code=1)


def triage(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    by: Annotated[str, typer.Option("--by", help="Pair cells differing in this key.")] = "provider",
    k: Annotated[int, typer.Option("-k", help="Grades of each patch on each backend.")] = 5,
    jobs: Annotated[int, typer.Option("-j", "--jobs", help="Grades at once.")] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per flip.")] = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="CSV on stdout.")] = False,
) -> None:
    """What each flip is: its patches graded k more times on both backends (resumable, in RUN/triage):
    flaky, backend-systematic or agent variance, with the tests behind it."""
    from dataclasses import asdict

    from anyswe._sync import run_stoppable
    from anyswe.cli import fail, print_table
    from anyswe.execute.triage import triage_async

    try:
        found = run_stoppable(triage_async(run_dir, by=by, k=k, concurrency=jobs), [])
    except AnysweError as exc:
        fail(exc)
    except KeyboardInterrupt:
        typer.secho("triage stopped; the grades so far are kept: run it again to resume", err=True, fg="yellow")
        raise typer.Exit(130) from None
    if as_json:
        for f in found.findings:
            typer.echo(json.dumps(asdict(f)))
    elif as_csv:
        import polars as pl

        typer.echo(pl.DataFrame(found.rows()).write_csv() if found.rows() else "", nl=False)
    else:
        print_table(found.rows(), title=f"flips of {run_dir} by {by} (k={k})")
        for f in found.findings:
            for test, line in f.detail.items():
                typer.echo(f"{f.instance_id} {test}: {line}")


def grade(
    run_dir: Annotated[Path, typer.Argument(help="A run directory.")],
    provider: Annotated[
        str | None,
        typer.Option("--provider", "-p", help="Grade on this provider of the run's spec (default: each task's own)."),
    ] = None,
    jobs: Annotated[int, typer.Option("-j", "--jobs", help="Grades at once.")] = 4,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per task.")] = False,
) -> None:
    """Grade a run's recorded patches again, live, each in a fresh sandbox (resumable, in RUN/regrade):
    the verdicts that changed. `anyswe regrade` re-reads stored logs instead."""
    from anyswe._sync import run_stoppable
    from anyswe.cli import fail, print_table
    from anyswe.execute.regrade import regrade_run_async

    try:
        rows = run_stoppable(regrade_run_async(run_dir, provider=provider, concurrency=jobs), [])
    except AnysweError as exc:
        fail(exc)
    except KeyboardInterrupt:
        typer.secho("grade stopped; the grades so far are kept: run it again to resume", err=True, fg="yellow")
        raise typer.Exit(130) from None
    changed = [r for r in rows if r["resolved"] is not None and r["resolved"] != r["recorded"]]
    errors = [r for r in rows if r["resolved"] is None]
    if as_json:
        for r in rows:
            typer.echo(json.dumps(r, sort_keys=True))
    else:
        view = [
            {k: r[k] for k in ("cell", "instance_id", "graded_on", "recorded")}
            | {"now": r["error"] if r["resolved"] is None else r["resolved"]}
            for r in changed + errors
        ]
        title = f"{len(rows)} patches graded again: {len(changed)} changed verdict, {len(errors)} could not be graded"
        print_table(view, title=title)
    if errors:
        raise typer.Exit(code=1)


def register(app: typer.Typer) -> None:
    """Add ``regrade``, ``grade`` and ``triage`` to the command line."""
    app.command()(regrade)
    app.command()(grade)
    app.command()(triage)
