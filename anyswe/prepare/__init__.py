"""Getting ready for a real run: the dataset as a validated file, the images pulled or built, the SIFs
built, and the instances whose gold patch does not resolve excluded on every backend alike.

``prepare_dataset`` and ``prepare_images`` back ``anyswe prepare dataset`` / ``anyswe prepare images``;
``gold_check`` backs ``anyswe gold-check``. Each works in Jupyter too (sync wrappers over async).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyswe.prepare.dataset import PreparedDataset, prepare_dataset

if TYPE_CHECKING:
    from anyswe.prepare.gold import GoldCheck
    from anyswe.prepare.images import PrepareReport
    from anyswe.spec import Spec


def prepare_images(spec: Spec, **options: Any) -> PrepareReport:
    """Pull/build every image ``spec``'s plan needs and build its SIFs (options as ``prepare_images_async``)."""
    from anyswe._sync import run_sync
    from anyswe.plan import make_plan
    from anyswe.prepare.images import prepare_images_async

    return run_sync(prepare_images_async(make_plan(spec), **options))


def gold_check(
    spec: Spec,
    *,
    providers: list[str] | None = None,
    run_dir: Path | None = None,
    out: Path | None = None,
    passes: int = 1,
) -> GoldCheck:
    """The gold census of ``spec``'s instances per provider (``passes`` gold and empty-patch passes each);
    write the exclusion list to ``out``."""
    from anyswe._sync import run_sync
    from anyswe.prepare.gold import gold_check_async

    found = run_sync(gold_check_async(spec, providers=providers, run_dir=run_dir, passes=passes))
    if out is not None:
        found.exclusions.write(out)
    return found


__all__ = ["PreparedDataset", "gold_check", "prepare_dataset", "prepare_images"]
