"""``anyswe serve`` on the command line (the server itself is anyswe/serve.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from anyswe.errors import AnysweError, SpecError, first_problem
from anyswe.serve import ServeConfig, serve


def config_of(path: Path | None, overrides: list[str]) -> ServeConfig:
    """The server's config: a YAML file of :class:`ServeConfig` fields, then ``--set a.b=c`` overrides."""
    from anyswe._overrides import apply_override, parse_override
    from anyswe._yaml import read_yaml

    data: Any = read_yaml(path) if path is not None else {}
    if not isinstance(data, dict):
        raise SpecError(f"{path}: the serve config must be a mapping of fields")
    # Each field not in the file is the default, so `--set agent.step_limit=20` sets it on the default agent.
    data = ServeConfig().model_dump() | data
    for text in overrides:
        keys, value = parse_override(text)
        apply_override(data, keys, value, text)
    where = f"{path}: " if path is not None else ""
    try:
        config = ServeConfig.model_validate(data)
    except ValidationError as exc:
        raise SpecError(f"{where}{first_problem(exc)}") from None
    # Every block a request may name is checked now, by its own class: a bad one is the config's
    # error at start-up, not a 400 for whichever request first names it.
    from anyswe.execute.blocks import check_block

    for kind, field in (("agent", "agents"), ("provider", "providers"), ("model", "models")):
        for name, block in config.choices(kind).items():
            try:
                check_block(kind, block)
            except SpecError as exc:
                place = kind if name == "default" else f"{field}.{name}"
                raise SpecError(f"{where}{place}: {str(exc).removeprefix('rollout: ')}") from None
    config.allowed_datasets()  # an unknown dataset name: a DatasetError naming it
    return config


def register(app: typer.Typer) -> None:
    """Add ``anyswe serve`` to the command line."""

    def serve_cmd(
        config: Annotated[
            Path | None, typer.Option("--config", "-c", help="A YAML file of the server's config.")
        ] = None,
        set_: Annotated[
            list[str] | None, typer.Option("--set", help="Override a config field: agent.type=gold, model.base_url=...")
        ] = None,
        host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="Port to listen on (0: a free one, printed).")] = 8000,
        token_file: Annotated[
            Path | None,
            typer.Option(
                "--token-file",
                help="A file holding the bearer token /run requires; without it the server makes one "
                "and prints the file it wrote it to.",
            ),
        ] = None,
    ) -> None:
        """Serve rollouts over HTTP: NeMo Gym's anyswe_agent /run contract, plus GET /health."""
        from anyswe.cli import fail

        try:
            serve(config_of(config, set_ or []), host, port, token_file)
        except AnysweError as exc:
            fail(exc)

    app.command("serve")(serve_cmd)
