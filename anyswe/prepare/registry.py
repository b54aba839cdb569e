"""What a registry says about an image before it is pulled: its layers' sizes and its config digest.

A reference that names its registry (``host[:port]/repo:tag``, a user's mirror, a registry on
localhost) is asked over the distribution API (v2) directly, with an anonymous bearer token when
the registry asks for one; a reference without a registry host is asked through the local image
store's CLI (sandbox/store.py: it knows its default registry). The config digest is what the store
reports as the pulled image's id, so an artefact built from a registry records the same source
digest as the stored image of the same reference.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)


@dataclass(frozen=True)
class Reference:
    """A parsed image reference: ``registry`` is None for the store's default registry."""

    registry: str | None
    repository: str
    tag: str

    @classmethod
    def parse(cls, ref: str) -> Reference:
        name, tag = ref, "latest"
        if "@" in name:
            name, tag = name.split("@", 1)
        else:
            last = name.rsplit("/", 1)[-1]
            if ":" in last:
                name, tag = name[: -len(last)] + last.split(":", 1)[0], last.split(":", 1)[1]
        first, _, rest = name.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            return cls(first, rest, tag)
        return cls(None, name, tag)

    @property
    def insecure(self) -> bool:
        """A registry on this machine's loopback speaks plain HTTP (docker's own rule for 127.0.0.0/8)."""
        host = (self.registry or "").rsplit(":", 1)[0]
        return host == "localhost" or bool(re.fullmatch(r"127(\.\d+){3}", host)) or host == "[::1]"


@dataclass(frozen=True)
class RemoteImage:
    """Compressed size of the layers (what a pull downloads) and the config digest (the image id)."""

    compressed_bytes: int
    config_digest: str | None


def _platform_manifest(index: dict[str, Any]) -> str | None:
    for m in index.get("manifests", []):
        platform = m.get("platform") or {}
        if platform.get("os") == "linux" and platform.get("architecture") == "amd64":
            return str(m["digest"])
    return None


async def _registry_get(ref: Reference, path: str, accept: str) -> dict[str, Any]:
    import aiohttp

    scheme = "http" if ref.insecure else "https"
    url = f"{scheme}://{ref.registry}/v2/{ref.repository}/{path}"
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        headers = {"Accept": accept}
        async with session.get(url, headers=headers) as resp:
            if resp.status == 401 and "bearer" in resp.headers.get("WWW-Authenticate", "").lower():
                challenge = dict(re.findall(r'(\w+)="([^"]*)"', resp.headers["WWW-Authenticate"]))
                params = {k: v for k, v in challenge.items() if k in ("service", "scope")}
                async with session.get(challenge["realm"], params=params) as tok:
                    tok.raise_for_status()
                    body = await tok.json()
                headers["Authorization"] = f"Bearer {body.get('token') or body.get('access_token')}"
            else:
                resp.raise_for_status()
                return dict(json.loads(await resp.read()))
        async with session.get(url, headers=headers) as resp:
            resp.raise_for_status()
            return dict(json.loads(await resp.read()))


async def _from_registry(ref: Reference) -> RemoteImage:
    manifest = await _registry_get(ref, f"manifests/{ref.tag}", _MANIFEST_TYPES)
    if "manifests" in manifest:  # a multi-platform index: the linux/amd64 entry
        digest = _platform_manifest(manifest)
        if digest is None:
            raise LookupError("no linux/amd64 image in the manifest list")
        manifest = await _registry_get(ref, f"manifests/{digest}", _MANIFEST_TYPES)
    return _sizes(manifest)


def _sizes(manifest: dict[str, Any]) -> RemoteImage:
    layers = manifest.get("layers") or []
    config = manifest.get("config") or {}
    return RemoteImage(sum(int(layer.get("size", 0)) for layer in layers), config.get("digest"))


async def remote_image(ref: str, *, store_cli: bool = True) -> RemoteImage:
    """Sizes and config digest of ``ref`` from its registry; :class:`LookupError` when it cannot tell."""
    parsed = Reference.parse(ref)
    try:
        if parsed.registry is not None:
            return await _from_registry(parsed)
        if store_cli:
            from anyswe.sandbox.store import manifest

            return _sizes(await manifest(ref))
    except LookupError:
        raise
    except Exception as exc:  # HTTP errors, refused connections, bad JSON: the registry cannot tell
        raise LookupError(f"{type(exc).__name__}: {exc}") from None
    raise LookupError("no registry host in the reference and no image store to ask the default registry")
