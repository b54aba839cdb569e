"""Which image a task runs: a reference in the local image store (a template, or a local build), then
what the provider makes of it.

The driver decides where an instance's image comes from (:class:`ImageSource`, part of the unit of
work); the node that runs the task resolves it and asks its provider for the runnable image (the
stored reference itself, or an artefact of the provider's own, made from it). Each artefact is
made once per worker even when many tasks ask at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from anyswe.config import base_image
from anyswe.datasets import format_image, image_builder, image_fields
from anyswe.errors import DatasetError
from anyswe.sandbox.store import build_image

if TYPE_CHECKING:
    from anyswe.datasets import Dataset, Instance
    from anyswe.sandbox import ProviderConfig, SandboxProvider
    from anyswe.sandbox.provider import Provenance


@dataclass(frozen=True)
class ImageSource:
    """Where an instance's image comes from: a reference template, or a dataset's own build."""

    template: str | None = None
    #: A dataset (by name) that builds its task images locally.
    build_dataset: str | None = None
    #: The reference itself, the template filled in for one instance (:meth:`of`).
    ref: str | None = None

    @classmethod
    def choose(cls, dataset: Dataset, provider: ProviderConfig) -> ImageSource:
        """The provider's ``image`` template wins, then the dataset's own build, then its template."""
        if provider.image:
            return cls(template=provider.image)
        if dataset.builds_images:
            return cls(build_dataset=dataset.name)
        return cls(template=dataset.image_template)

    def of(self, instance: Instance) -> ImageSource:
        """This source for one instance: a template filled in (a build stays the node's to make)."""
        if self.template is None:
            return self
        return ImageSource(ref=format_image(self.template, instance))


class ImageResolver:
    """Per worker: memoised image builds and runnable images (one build per artefact at a time)."""

    def __init__(self) -> None:
        self._futures: dict[tuple[str, ...], asyncio.Future[str]] = {}
        self._provenance: dict[tuple[str, ...], asyncio.Future[Provenance]] = {}

    async def _memo(self, key: tuple[str, ...], make: Callable[[], Coroutine[Any, Any, str]]) -> str:
        fut = self._futures.get(key)
        if fut is None or (fut.done() and fut.exception() is not None):
            fut = asyncio.ensure_future(make())
            self._futures[key] = fut
        # shield: one waiter being cancelled must not cancel the build the others wait for.
        return await asyncio.shield(fut)

    async def stored_image(self, source: ImageSource, instance: Instance) -> str:
        if source.ref is not None:
            return source.ref
        if source.template is not None:
            return format_image(source.template, instance)
        if source.build_dataset is not None:
            build = image_builder(source.build_dataset)

            async def make() -> str:
                dockerfile, tag = build(instance.instance_id, base_image())
                return await build_image(dockerfile, tag)

            return await self._memo(("stored", source.build_dataset, instance.instance_id), make)
        raise DatasetError(f"no image for {instance.instance_id}: set the provider's `image` template")

    async def provenance(self, provider: SandboxProvider[Any], image: str) -> Provenance:
        """``image``'s digests, asked once per worker (hashing a SIF of gigabytes takes seconds)."""

        async def make() -> Provenance:
            from anyswe.sandbox.provider import Provenance

            try:
                return await provider.image_provenance(image)
            except Exception:  # provenance is a record, never a reason for a task to fail
                return Provenance()

        key = ("provenance", provider.name, image)
        fut = self._provenance.get(key)
        if fut is None or (fut.done() and fut.exception() is not None):
            fut = asyncio.ensure_future(make())
            self._provenance[key] = fut
        return await asyncio.shield(fut)

    async def image_for(self, provider: SandboxProvider[Any], source: ImageSource, instance: Instance) -> str:
        """What ``provider`` runs for ``instance``."""

        async def stored() -> str:
            return await self.stored_image(source, instance)

        key = (provider.name, repr(provider.config.model_dump(mode="json")), repr(source), instance.instance_id)
        return await self._memo(key, lambda: provider.runnable_image(stored, image_fields(instance)))
