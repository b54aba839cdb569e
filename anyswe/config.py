"""Host-side locations and defaults, each overridable by an environment variable."""

from __future__ import annotations

import os
from pathlib import Path

#: The image task images are built on. Users with a registry may point this at a pulled image.
DEFAULT_BASE_IMAGE = "anyswe/base:bookworm"


def base_image() -> str:
    return os.environ.get("ANYSWE_BASE_IMAGE", DEFAULT_BASE_IMAGE)


def cache_dir() -> Path:
    """Where SIFs and build contexts are cached (``ANYSWE_CACHE``, else ``~/.cache/anyswe``)."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "anyswe"
    path = Path(os.environ.get("ANYSWE_CACHE", default))
    path.mkdir(parents=True, exist_ok=True)
    return path
