from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def runtimes(docker_image: str, sif_image: str) -> None:
    """Both runtimes and the base image (and its SIF) are available."""
