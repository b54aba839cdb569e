"""``anyswe prepare dataset``, ``anyswe prepare images`` and ``anyswe gold-check``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from anyswe.cli import SetOpt, fail, print_table
from anyswe.errors import AnysweError

if TYPE_CHECKING:
    from anyswe.prepare.images import PrepareReport


def register(app: typer.Typer) -> None:
    """Add the preparation commands to the ``anyswe`` app."""
    app.add_typer(prepare_app, name="prepare")
    app.command("gold-check")(gold_check_cmd)


prepare_app = typer.Typer(
    help="Get ready for a real run: the dataset as a validated file, the images and SIFs.", no_args_is_help=True
)


def _size(text: str) -> int:
    """``500MB``, ``20G``, ``1.5TiB``, ``1048576`` -> bytes."""
    import re

    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(i?B?)\s*", text, re.IGNORECASE)
    if m is None:
        raise typer.BadParameter(f"{text!r} is not a size (e.g. 500MB, 20G)")
    return int(float(m.group(1)) * 1024 ** " KMGT".index(m.group(2).upper() or " "))


@prepare_app.command("dataset")
def prepare_dataset_cmd(
    source: Annotated[str, typer.Argument(help="A hub name (SWE-bench/SWE-bench_Verified), a known name, or a file.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The JSONL file to write.")],
    split: Annotated[str | None, typer.Option("--split", help="Hub split (default: the dataset's own).")] = None,
    limit: Annotated[int | None, typer.Option("--limit", min=1)] = None,
    instances: Annotated[list[str] | None, typer.Option("--instances", "-i", help="Instance ids (repeatable).")] = None,
    repos: Annotated[list[str] | None, typer.Option("--repos", "-r", help="Repos, owner/name (repeatable).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Shuffle with this seed before --limit.")] = None,
    image_template: Annotated[
        str | None,
        typer.Option("--image-template", help="Image names to list, e.g. registry/ns/{instance_id_docker}:tag"),
    ] = None,
    images_out: Annotated[
        Path | None, typer.Option("--images-out", help="Also write instance_id<TAB>image lines here.")
    ] = None,
) -> None:
    """Load a SWE-bench-family dataset, validate every row (each bad row named), write the selection."""
    from anyswe.prepare import prepare_dataset

    try:
        prepared = prepare_dataset(
            source,
            split=split,
            instance_ids=instances,
            repos=repos,
            limit=limit,
            seed=seed,
            image_template=image_template,
        )
    except AnysweError as exc:
        fail(exc)
    prepared.write(out)
    if images_out is not None:
        images_out.write_text("".join(f"{i}\t{img}\n" for i, img in prepared.images.items()))
    print_table([{"repo": repo, "instances": n} for repo, n in prepared.by_repo().items()])
    typer.echo(f"{prepared.source}: {prepared.validated} rows valid, {len(prepared.rows)} selected; wrote {out}")
    if prepared.images:
        first = next(iter(prepared.images.items()))
        typer.echo(f"images: {len(prepared.images)} (e.g. {first[0]} -> {first[1]})")


_SOURCE_HELP = "Provider artefacts (SIFs) from: auto (the image store if it answers), registry, or daemon (the store)."


@prepare_app.command("images")
def prepare_images_cmd(
    spec: Annotated[Path, typer.Argument(help="Experiment spec (YAML).")],
    set_: SetOpt = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Image pulls/builds at once.")] = 4,
    artefact_jobs: Annotated[
        int, typer.Option("--artefact-jobs", "--sif-jobs", min=1, help="Provider artefacts (SIFs) made at once.")
    ] = 2,
    artefact_source: Annotated[str, typer.Option("--artefact-source", "--sif-source", help=_SOURCE_HELP)] = "auto",
    disk_budget: Annotated[
        str | None, typer.Option("--disk-budget", help="Use at most this much of each filesystem (e.g. 200G).")
    ] = None,
    retries: Annotated[int, typer.Option("--retries", min=1, help="Attempts per pull.")] = 3,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Estimate and check the disk; make nothing.")] = False,
    build: Annotated[
        bool, typer.Option("--build", help="Build missing SWE-bench images (swebench's chain, offline); no pulls.")
    ] = False,
    repo_mirror: Annotated[
        Path | None, typer.Option("--repo-mirror", help="With --build: bare repos (<name>.git) to clone from.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON line per artefact, then one of counts and reasons.")
    ] = False,
) -> None:
    """Pull (or build) every image the spec needs and make its providers' artefacts (SIFs), in parallel; resumable."""
    from anyswe._sync import run_sync
    from anyswe.plan import make_plan
    from anyswe.prepare.images import prepare_images_async
    from anyswe.spec import load_spec

    if artefact_source not in ("auto", "registry", "daemon"):
        fail(AnysweError(f"--artefact-source must be auto, registry or daemon, not {artefact_source!r}"))
    budget = _size(disk_budget) if disk_budget else None
    if (repo_mirror is not None) != build:
        fail(AnysweError("--build needs --repo-mirror DIR (the bare repositories to clone), and only it does"))
    try:
        plan_ = make_plan(load_spec(spec, set_ or ()))
        report_ = run_sync(
            prepare_images_async(
                plan_,
                jobs=jobs,
                artefact_jobs=artefact_jobs,
                artefact_source=artefact_source,  # type: ignore[arg-type]
                disk_budget=budget,
                retries=retries,
                dry_run=dry_run,
                build=build,
                repo_mirror=repo_mirror.resolve() if repo_mirror is not None else None,
            )
        )
    except AnysweError as exc:
        fail(exc)
    _print_prepared(report_, as_json)


def _print_prepared(report_: PrepareReport, as_json: bool) -> None:
    """The report: tables (or JSON lines and a last line of counts), failures and short disks on stderr."""
    if as_json:
        for row in report_.rows():
            typer.echo(json.dumps(row))
        typer.echo(json.dumps({"counts": report_.counts(), "reasons": report_.reasons(), "disk": report_.disk}))
    else:
        print_table(report_.disk, title="disk estimate")
        print_table(report_.rows(), title=f"images: {report_}")
        if reasons := report_.reasons():
            print_table([{"reason": k, "images": n} for k, n in reasons.items()], title="cannot be built here")
    for job in report_.failed:
        typer.secho(f"failed: {job.target or job.ref}: {job.error}", fg=typer.colors.RED, err=True)
    for row in report_.disk:
        if row.get("short"):
            typer.secho(
                f"not enough disk: {row['filesystem']} ({row['for']}) needs about "
                f"{row['needed_mb']:,} MB, {row['usable_mb']:,} MB usable",
                fg=typer.colors.RED,
                err=True,
            )
    if report_.failed or any(row.get("short") for row in report_.disk):
        raise typer.Exit(code=1)


def gold_check_cmd(
    spec: Annotated[Path, typer.Argument(help="Experiment spec (YAML).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The exclusion list to write (YAML).")] = Path(
        "exclusions.yaml"
    ),
    providers: Annotated[
        list[str] | None, typer.Option("--provider", "-p", help="Providers to check (default: the spec's).")
    ] = None,
    run_dir: Annotated[Path | None, typer.Option("--run-dir", help="Where the gold run goes.")] = None,
    passes: Annotated[
        int, typer.Option("--passes", min=1, help="Gold and empty-patch passes per instance and provider.")
    ] = 1,
    set_: SetOpt = None,
) -> None:
    """A gold census: run the gold patches and an empty patch ``--passes`` times on each provider, put each
    instance in a bucket (supported, flaky, broken, no-verdict) with each pass's evidence, and write an
    exclusion list of the flaky and broken ones, which a spec names with ``dataset.exclude_file``."""
    from anyswe.prepare import gold_check
    from anyswe.spec import load_spec

    try:
        found = gold_check(load_spec(spec, set_ or ()), providers=providers, run_dir=run_dir, out=out, passes=passes)
    except AnysweError as exc:
        fail(exc)
    print_table(found.rows(), title=f"gold census, {found.passes} pass(es) per provider ({found.run_dir})")
    for entry in found.exclusions.exclude:
        tests = "; ".join(f"{p}: {', '.join(t[:5]) or '-'}" for p, t in entry.failing.items())
        typer.echo(f"exclude {entry.instance_id}: {entry.reason} (failing: {tests})")
    typer.echo(f"wrote {out}: {len(found.exclusions.exclude)} instance(s) excluded")
    if found.unchecked:
        typer.secho(
            f"{len(found.unchecked)} task(s) ended in an infrastructure error and were not checked; run again",
            fg=typer.colors.YELLOW,
            err=True,
        )
        raise typer.Exit(code=1)
