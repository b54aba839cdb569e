"""Docker sandboxes through python-on-whales.

Lifecycle (run, inspect, remove, list) goes through python-on-whales' typed API; ``docker exec``
runs from the same client's argv prefix in an asyncio subprocess, because an exec needs separate
stdout/stderr bytes, stdin and a timeout, which python-on-whales' blocking ``execute`` does not give.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from anyswe import _proc
from anyswe.errors import ImageNotFound, RuntimeNotAvailable, SandboxStartError
from anyswe.sandbox.base import (
    LABEL_MANAGED,
    ProviderConfig,
    Sandbox,
    SandboxProvider,
    SandboxRequest,
)

if TYPE_CHECKING:
    from python_on_whales import DockerClient


class DockerConfig(ProviderConfig):
    """Settings of the docker provider (the ``providers.<name>`` block of a spec with ``type: docker``)."""

    type: Literal["docker"] = "docker"
    cpus: float | None = Field(default=None, gt=0, description="CPU limit per sandbox (docker --cpus).")
    memory: str | None = Field(default=None, description="Memory limit per sandbox, e.g. '4g'.")
    network: str = Field(default="bridge", description="Network mode: bridge, none, host or a network.")
    pids_limit: int | None = Field(default=None, gt=0)


def _client() -> DockerClient:
    from python_on_whales import DockerClient

    return DockerClient()


class DockerSandbox(Sandbox):
    provider_name = "docker"

    def _exec_argv(
        self, argv: list[str], *, env_file: Path | None, workdir: str | None, user: str | None, stdin: bool
    ) -> list[str]:
        assert isinstance(self.provider, DockerProvider)
        cmd = [*self.provider.docker_cmd, "exec"]
        if stdin:
            cmd.append("--interactive")
        if env_file is not None:
            cmd += ["--env-file", str(env_file)]
        if workdir:
            cmd += ["--workdir", workdir]
        if user:
            cmd += ["--user", user]
        return [*cmd, self.name, *argv]

    def _is_runtime_failure(self, result: _proc.ProcResult) -> bool:
        # `docker exec` itself exits 125 (daemon error), 126/127 only when the *command* cannot run;
        # a vanished container reports on stderr with 1.
        err = result.stderr.decode("utf-8", errors="replace")
        return result.exit_code == 125 or (
            result.exit_code == 1 and ("No such container" in err or "is not running" in err)
        )

    async def _teardown(self) -> None:
        assert isinstance(self.provider, DockerProvider)
        await self.provider.remove(self.name)


class DockerProvider(SandboxProvider):
    """Starts one container per sandbox: ``--init``, pre-assigned name, anyswe labels, limits."""

    name = "docker"
    sandbox_class: ClassVar[type[DockerSandbox]] = DockerSandbox
    config: DockerConfig

    def __init__(self, config: DockerConfig | None = None) -> None:
        super().__init__(config or DockerConfig())
        self._docker = _client()

    @property
    def docker_cmd(self) -> list[str]:
        return list(self._docker.client_config.docker_cmd)

    async def check(self) -> None:
        r = await _proc.run([*self.docker_cmd, "version", "--format", "{{.Server.Version}}"], timeout=30)
        if r.exit_code != 0 or r.timed_out:
            raise RuntimeNotAvailable(
                "docker does not answer (run scripts/provision.sh docker)",
                argv=r.argv,
                exit_code=r.exit_code,
                stdout=r.stdout,
                stderr=r.stderr,
            )

    async def image_exists(self, image: str) -> bool:
        return await asyncio.to_thread(self._docker.image.exists, image)

    async def remove(self, name: str) -> None:
        from python_on_whales.exceptions import NoSuchContainer

        with contextlib.suppress(NoSuchContainer):
            await asyncio.to_thread(self._docker.container.remove, name, force=True, volumes=True)

    async def _start(self, request: SandboxRequest) -> Sandbox:
        from python_on_whales.exceptions import DockerException

        if not await self.image_exists(request.image):
            raise ImageNotFound(
                f"docker image {request.image!r} is not available locally; anyswe never pulls "
                "implicitly (build it with `anyswe images build` or `docker pull` it yourself)"
            )
        cfg = self.config
        try:
            container = await asyncio.to_thread(
                self._docker.run,
                request.image,
                # `sleep infinity` as the entrypoint keeps the container up whatever the image's CMD.
                ["infinity"],
                entrypoint="sleep",
                detach=True,
                name=request.name,
                labels=request.labels(),
                init=True,
                pull="never",
                cpus=cfg.cpus,
                memory=cfg.memory,
                networks=[cfg.network],
                pids_limit=cfg.pids_limit,
            )
            if not getattr(container, "id", None):
                raise SandboxStartError(f"`docker run -d` returned no container id for {request.name}")
        except DockerException as exc:
            await asyncio.shield(self.remove(request.name))
            raise SandboxStartError(
                f"docker could not start a sandbox from {request.image!r}",
                argv=exc.docker_command,
                exit_code=exc.return_code,
                stdout=exc.stdout,
                stderr=exc.stderr,
            ) from exc
        except Exception as exc:
            # e.g. an empty reply from `docker run -d`, which python-on-whales cannot parse.
            await asyncio.shield(self.remove(request.name))
            raise SandboxStartError(f"docker could not start {request.name}: {exc!r}") from exc
        except BaseException:
            # A half-started container is found by its pre-assigned name and removed.
            await asyncio.shield(self.remove(request.name))
            raise
        return self.sandbox_class(request, self)

    async def sandboxes(self) -> dict[str, dict[str, str] | None]:
        """Every anyswe container on this host, running or not, with its labels."""

        def _list() -> dict[str, dict[str, str] | None]:
            containers = self._docker.container.list(all=True, filters=[("label", f"{LABEL_MANAGED}=1")])
            return {c.name: dict(c.config.labels or {}) for c in containers}

        return await asyncio.to_thread(_list)
