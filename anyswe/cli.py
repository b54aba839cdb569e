"""The ``anyswe`` command line: a thin layer over the Python API."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Annotated

import typer

from anyswe.errors import AnysweError

app = typer.Typer(
    name="anyswe",
    help="Run agents x models x sandbox providers over SWE-bench-style tasks and compare the results.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _fail(exc: AnysweError) -> None:
    typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code=2)


@app.command()
def smoke(
    providers: Annotated[list[str] | None, typer.Option("--provider", "-p", help="Provider(s) to try.")] = None,
) -> None:
    """Start a sandbox on each provider and run a command in it."""
    from anyswe.config import base_image
    from anyswe.images import ensure_sif
    from anyswe.sandbox import get_provider

    async def one(name: str) -> str:
        provider = get_provider(name)
        await provider.check()
        image = base_image() if name == "docker" else str(await ensure_sif(base_image()))
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
        for name in providers or ["docker", "apptainer"]:
            typer.echo(asyncio.run(one(name)))
    except AnysweError as exc:
        _fail(exc)


@app.command()
def gc() -> None:
    """Find and remove every leftover anyswe container, apptainer instance and overlay."""
    from anyswe.sandbox import gc as sandbox_gc

    removed = asyncio.run(sandbox_gc())
    total = 0
    for provider, names in removed.items():
        for name in names:
            typer.echo(f"removed {provider} {name}")
        total += len(names)
    typer.echo(f"{total} leftover sandbox(es) removed")


def main() -> None:
    try:
        app()
    except AnysweError as exc:  # pragma: no cover - typer re-raises only outside commands
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(2)
