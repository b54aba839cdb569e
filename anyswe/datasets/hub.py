"""The benchmarks whose rows live on the Hugging Face hub: the SWE-bench family and R2E-Gym.

Their rows come from a file (``path:``) or the local hub cache (``anyswe prepare dataset`` fills
it); their images are the official ones, pulled or built offline (``anyswe prepare images``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from anyswe.datasets.registry import Benchmark

if TYPE_CHECKING:
    from anyswe.datasets.instance import Instance

#: swebench's instance image naming; ``{instance_id_docker}`` is the id with "__" -> "_1776_", lowercased.
SWEBENCH_IMAGE = "swebench/sweb.eval.x86_64.{instance_id_docker}:latest"


class SWEbenchFamily(Benchmark):
    """The benchmarks swebench grades: its specs, scripts and parsers; its image names."""

    harness: ClassVar[str] = "swebench"
    image_template: ClassVar[str | None] = SWEBENCH_IMAGE
    # What an instance image adds when built: the repository and its installed package (its env image is shared).
    instance_build_bytes: ClassVar[int] = 1 << 30

    async def build_instance(self, instance: Instance, repo_mirror: Path) -> str:
        # swebench 4.1.0's own chain for the repository's language (images/swebench_build.py, multilingual_build.py).
        from anyswe.images.multilingual_build import build_swebench_image

        return (await build_swebench_image(instance, repo_mirror)).summary

    def unbuildable(self, instance: Instance, repo_mirror: Path) -> tuple[str, str] | None:
        from anyswe.errors import ImageBuildError
        from anyswe.images.multilingual_build import offline_chain
        from anyswe.images.swebench_build import find_mirror
        from anyswe.images.swebench_env import unbuildable

        try:
            chain = offline_chain(instance)
        except ImageBuildError as exc:
            return "language", str(exc)
        if chain == "py":
            return unbuildable(instance, repo_mirror)
        try:
            find_mirror(repo_mirror, instance.repo)
        except ImageBuildError as exc:
            return "mirror", str(exc)
        return None


class SWEbenchVerified(SWEbenchFamily):
    name: ClassVar[str] = "swe-bench-verified"
    hub_names: ClassVar[tuple[str, ...]] = ("princeton-nlp/SWE-bench_Verified", "SWE-bench/SWE-bench_Verified")
    aliases: ClassVar[tuple[str, ...]] = ("verified",)


class SWEbenchLite(SWEbenchFamily):
    name: ClassVar[str] = "swe-bench-lite"
    hub_names: ClassVar[tuple[str, ...]] = ("princeton-nlp/SWE-bench_Lite", "SWE-bench/SWE-bench_Lite")
    aliases: ClassVar[tuple[str, ...]] = ("lite",)


class SWEbenchFull(SWEbenchFamily):
    name: ClassVar[str] = "swe-bench"
    hub_names: ClassVar[tuple[str, ...]] = ("princeton-nlp/SWE-bench", "SWE-bench/SWE-bench")
    aliases: ClassVar[tuple[str, ...]] = ("full",)


class SWEbenchMultimodal(SWEbenchFamily):
    name: ClassVar[str] = "swe-bench-multimodal"
    hub_names: ClassVar[tuple[str, ...]] = ("princeton-nlp/SWE-bench_Multimodal", "SWE-bench/SWE-bench_Multimodal")
    aliases: ClassVar[tuple[str, ...]] = ("multimodal",)
    default_split: ClassVar[str] = "dev"


class R2EGym(Benchmark):
    name: ClassVar[str] = "r2e-gym"
    hub_names: ClassVar[tuple[str, ...]] = ("R2E-Gym/R2E-Gym-Lite", "R2E-Gym/R2E-Gym-Subset", "R2E-Gym/R2E-Gym-V1")
    aliases: ClassVar[tuple[str, ...]] = ("r2e",)
    harness: ClassVar[str] = "r2e"
    # Each R2E-Gym row names its own image.
    image_template: ClassVar[str | None] = "{docker_image}"
    default_split: ClassVar[str] = "train"
