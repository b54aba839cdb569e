"""Sandboxes: one async interface, providers registered by name (``docker``, ``apptainer``).

Example::

    provider = get_provider("docker")
    async with provider.sandbox("anyswe/base:bookworm") as sb:
        r = await sb.exec("echo hi", timeout=10)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from anyswe.errors import SpecError
from anyswe.sandbox.base import ExecResult, ProviderConfig, Sandbox, SandboxProvider, SandboxRequest

__all__ = [
    "ExecResult",
    "ProviderConfig",
    "Sandbox",
    "SandboxProvider",
    "SandboxRequest",
    "gc",
    "get_provider",
    "provider_config_class",
    "provider_names",
    "register_provider",
]

# name -> (config class loader, provider class loader); loaders keep runtime imports lazy.
_REGISTRY: dict[str, tuple[Callable[[], type[ProviderConfig]], Callable[[], type[SandboxProvider]]]] = {}


def register_provider(
    name: str,
    config_class: Callable[[], type[ProviderConfig]],
    provider_class: Callable[[], type[SandboxProvider]],
) -> None:
    """Register a sandbox provider under ``name`` (loaders are called on first use)."""
    _REGISTRY[name] = (config_class, provider_class)


def provider_names() -> list[str]:
    return sorted(_REGISTRY)


def _entry(name: str) -> tuple[Callable[[], type[ProviderConfig]], Callable[[], type[SandboxProvider]]]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise SpecError(f"unknown sandbox provider {name!r}; known: {', '.join(provider_names())}") from None


def provider_config_class(name: str) -> type[ProviderConfig]:
    return _entry(name)[0]()


def get_provider(name: str, config: ProviderConfig | dict[str, Any] | None = None) -> SandboxProvider:
    """A new provider of type ``name``; its concurrency bound is shared by all sandboxes it starts."""
    config_loader, provider_loader = _entry(name)
    if config is None or isinstance(config, dict):
        config = config_loader().model_validate(config or {})
    return provider_loader()(config)


def _docker_config() -> type[ProviderConfig]:
    from anyswe.sandbox.docker import DockerConfig

    return DockerConfig


def _docker_provider() -> type[SandboxProvider]:
    from anyswe.sandbox.docker import DockerProvider

    return DockerProvider


def _apptainer_config() -> type[ProviderConfig]:
    from anyswe.sandbox.apptainer import ApptainerConfig

    return ApptainerConfig


def _apptainer_provider() -> type[SandboxProvider]:
    from anyswe.sandbox.apptainer import ApptainerProvider

    return ApptainerProvider


register_provider("docker", _docker_config, _docker_provider)
register_provider("apptainer", _apptainer_config, _apptainer_provider)


async def gc(
    providers: list[str] | None = None, *, session: str | None = None, include_live: bool = False
) -> dict[str, list[str]]:
    """Remove leftover anyswe containers, instances and overlays; returns what was removed.

    A sandbox whose owning process still runs on this host is not a leftover and is kept (unless
    ``include_live``): gc is safe to run beside a live experiment. ``session`` limits it to the
    sandboxes of one ``ANYSWE_SESSION``. A provider whose runtime is missing is skipped.
    """
    from anyswe.errors import RuntimeNotAvailable
    from anyswe.sandbox.base import LABEL_OWNER, LABEL_SESSION, owner_alive

    removed: dict[str, list[str]] = {}
    for name in providers or provider_names():
        provider = get_provider(name)
        try:
            await provider.check()
        except RuntimeNotAvailable:
            continue
        gone = []
        for item, labels in (await provider.sandboxes()).items():
            labels = labels or {}
            if session is not None and labels.get(LABEL_SESSION) != session:
                continue
            if not include_live and owner_alive(labels.get(LABEL_OWNER)):
                continue
            await provider.remove(item)
            gone.append(item)
        removed[name] = gone
    return removed
