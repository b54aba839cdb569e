"""Which image each (instance, provider) runs: a spec template, the dataset's own, or a local build.

For apptainer, a SIF path template wins; otherwise the docker image is converted to a SIF and
cached by its image id. Each artefact is made once per process even when many tasks ask at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe.config import base_image
from anyswe.datasets import format_image
from anyswe.images.build import build_docker_image, ensure_sif
from anyswe.spec import ApptainerProviderSpec

if TYPE_CHECKING:
    from anyswe.datasets import Instance
    from anyswe.plan import Plan


class ImageResolver:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self._futures: dict[tuple[str, str], asyncio.Future[str]] = {}

    async def _memo(self, key: tuple[str, str], make: Callable[[], Coroutine[Any, Any, str]]) -> str:
        fut = self._futures.get(key)
        if fut is None or (fut.done() and fut.exception() is not None):
            fut = asyncio.ensure_future(make())
            self._futures[key] = fut
        # shield: one waiter being cancelled must not cancel the build the others wait for.
        return await asyncio.shield(fut)

    async def docker_image(self, instance: Instance, provider: str) -> str:
        spec = self.plan.spec.providers[provider]
        if spec.image:
            return format_image(spec.image, instance)
        ds = self.plan.dataset
        build = ds.build_context
        if build is not None:
            # Memoised per instance: the build context is written once, then built once.
            return await self._memo(("docker", instance.instance_id), lambda: self._build(build, instance))
        return ds.docker_image(instance)

    async def _build(self, build: Callable[[str, str], tuple[Path, str]], instance: Instance) -> str:
        dockerfile, tag = build(instance.instance_id, base_image())
        return await build_docker_image(dockerfile, tag)

    async def image_for(self, instance: Instance, provider: str) -> str:
        spec = self.plan.spec.providers[provider]
        if isinstance(spec, ApptainerProviderSpec):
            if spec.sif:
                return format_image(spec.sif, instance)
            docker = await self.docker_image(instance, provider)
            return await self._memo(("sif", docker), lambda: self._sif(docker, spec.binary))
        return await self.docker_image(instance, provider)

    async def _sif(self, docker: str, binary: str) -> str:
        return str(await ensure_sif(docker, apptainer=binary))
