"""Sandboxes: one async interface; providers by name (``docker``, ``apptainer``) or as ``module:Class``.

Example::

    provider = get_provider("docker")
    async with provider.sandbox("anyswe/base:bookworm") as sb:
        r = await sb.exec("echo hi", timeout=10)
"""

from __future__ import annotations

import contextlib
from typing import Any

from anyswe.errors import AnysweError
from anyswe.registry import Registry
from anyswe.sandbox.base import Sandbox
from anyswe.sandbox.labels import gc
from anyswe.sandbox.provider import SandboxProvider
from anyswe.sandbox.request import ExecResult, Gateway, Mount, NetworkPolicy, ProviderConfig, SandboxRequest, neutral

__all__ = [
    "PROVIDERS",
    "ExecResult",
    "Gateway",
    "Mount",
    "NetworkPolicy",
    "ProviderConfig",
    "Sandbox",
    "SandboxProvider",
    "SandboxRequest",
    "collect_files",
    "default_provider",
    "gc",
    "get_provider",
    "neutral",
    "provider_class",
    "provider_names",
    "provider_rank",
    "register_provider",
]

PROVIDERS: Registry[SandboxProvider[Any]] = Registry("sandbox provider", SandboxProvider, group="anyswe.providers")
PROVIDERS.register("docker", "anyswe.sandbox.docker:DockerProvider")
PROVIDERS.register("apptainer", "anyswe.sandbox.apptainer:ApptainerProvider")


def register_provider(name: str, target: str | type[SandboxProvider[Any]]) -> None:
    """Register a provider class (or ``"module:Class"``, imported on first use) under ``name``."""
    PROVIDERS.register(name, target)


def provider_names() -> list[str]:
    return PROVIDERS.names()


def collect_files() -> list[str]:
    """Remove what killed runs left on this host outside any sandbox: each runtime's own files (an
    interrupted SIF build) and anyswe's scratch directories; the paths removed."""
    from anyswe.sandbox.labels import collect_scratch

    removed = []
    for name in PROVIDERS.names():
        with contextlib.suppress(AnysweError):  # a broken plugin has nothing of its own to collect
            removed += provider_class(name).leftover_files()
    return removed + collect_scratch()


def default_provider() -> str:
    """The reference backend: the first provider registered (what a call that names none runs on)."""
    return PROVIDERS.names()[0]


def provider_class(name: str) -> type[SandboxProvider[Any]]:
    """The provider class of a spec's ``type``: a registered name or a dotted path ``module:Class``."""
    return PROVIDERS.load(name)


def provider_rank(name: str | None) -> int:
    """Registration order (docker first): comparisons list the reference backend first."""
    names = PROVIDERS.names()
    return names.index(name) if name in names else len(names)


def get_provider(name: str, config: ProviderConfig | dict[str, Any] | None = None) -> SandboxProvider[Any]:
    """A new provider of type ``name``; its concurrency bound is shared by all sandboxes it starts."""
    cls = provider_class(name)
    if not isinstance(config, ProviderConfig):
        config = cls.config_class.model_validate({"type": name, **(config or {})})
    return cls(config)
