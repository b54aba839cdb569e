"""Grading on its own: one patch for one instance, in a fresh sandbox of the instance's image, to a Verdict.

This is the path a run's grading phase takes (``execute/task.py`` calls :func:`grade_in_sandbox`):
the harness the instance routes to, swebench's apply ladder, a fresh sandbox removed on every path,
and the image's provenance. :func:`grade` needs no spec, run directory or agent: re-grade a recorded
patch, check a prediction, or grade the same patch on two backends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from anyswe.errors import DatasetError
from anyswe.grading.ladder import empty_patch_verdict, grade_patch, grade_unpatched, record_mounts
from anyswe.sandbox import SandboxRequest

if TYPE_CHECKING:
    from anyswe.datasets import Dataset, Instance
    from anyswe.grading import Harness, Verdict
    from anyswe.images.resolve import ImageResolver
    from anyswe.sandbox import ProviderConfig, Sandbox, SandboxProvider


@contextlib.contextmanager
def stopped_on_failure(sandbox: Sandbox[Any], cleanup: Callable[[], None] | None = None) -> Iterator[None]:
    """On an error or a cancellation, remove the sandbox before going on (as ``async with`` would);
    on success the caller hands it to ``stop_later``."""
    try:
        yield
    except BaseException:
        # A synchronous context manager cannot await: the removal runs as its own task, which the
        # run's sweep waits for (and a cancellation cannot interrupt).
        sandbox.provider.stop_later(sandbox, cleanup)
        raise


async def grade_in_sandbox(
    provider: SandboxProvider[Any],
    image: str,
    instance: Instance,
    harness: Harness,
    patch: str,
    *,
    timeout: float,
    run_id: str = "",
    task_id: str = "",
    stop_in_background: bool = True,
    unpatched: bool = False,
    record: bool = True,
) -> Verdict:
    """Grade ``patch`` in a fresh sandbox of ``image``: nothing an agent did outside its patch reaches the tests.

    ``stop_in_background``: a run's tasks hand the sandbox's removal to the provider (the run's
    sweep waits for it); a caller of its own (``grade``) waits for the removal itself, since its
    event loop may end as soon as the verdict is in. ``record``: the tests' record (grading/testrecord),
    made on every run's path; off only to measure what it costs (bench/record_cost.py).
    """
    if not patch.strip() and not unpatched:
        return empty_patch_verdict(instance, harness)

    async def grading(sandbox: Sandbox[Any]) -> Verdict:
        if unpatched:
            return await grade_unpatched(sandbox, instance, harness, timeout=timeout)
        return await grade_patch(sandbox, instance, harness, patch, timeout=timeout)

    mounts = record_mounts(instance, harness) if record else ()  # the record of the tests: grading/testrecord
    request = SandboxRequest(image, run_id=run_id, task_id=task_id, phase="grading", mounts=mounts)
    grader = await provider.start(request)
    if not stop_in_background:
        async with grader:
            return await grading(grader)
    with stopped_on_failure(grader):
        verdict = await grading(grader)
    provider.stop_later(grader)  # the verdict is in; the runtime's teardown is off the caller's path
    return verdict


async def grade_async(
    instance: Instance | Mapping[str, Any] | str,
    patch: str,
    provider: str | ProviderConfig | SandboxProvider[Any] | None = None,
    *,
    dataset: str | Dataset | None = None,
    harness: str | None = None,
    image: str | None = None,
    timeout: float = 1800.0,
    images: ImageResolver | None = None,
    unpatched: bool = False,
) -> Verdict:
    """Grade ``patch`` (a unified diff against the image's starting point) for ``instance`` on ``provider``.

    ``instance``: a row (an :class:`~anyswe.datasets.Instance` or a mapping), or an instance id of
    ``dataset``. ``dataset`` (a name or a loaded one) gives the harness and where the images come
    from; without it a row is graded by the harness it routes to, in swebench's official image when
    swebench knows its repository. ``provider``: a type name (``docker``, ``apptainer``), a provider
    config, or a provider (whose concurrency bound is then shared); None: the reference backend.
    ``harness`` and ``image`` (an image reference template) override the dataset's. The verdict names
    the image and its digests. ``unpatched``: run the tests on the image as it is (``patch`` unused):
    what they say without a fix, as a gold census's empty pass asks.
    An infrastructure failure raises :class:`~anyswe.errors.InfraError`, as in a run (where it is masked).
    """
    from anyswe.grading import get_harness, harness_for
    from anyswe.images.resolve import ImageResolver, ImageSource
    from anyswe.sandbox import SandboxProvider, default_provider, get_provider

    provider = default_provider() if provider is None else provider

    ds, row = dataset_and_instance(instance, dataset)
    if isinstance(provider, SandboxProvider):
        prov: SandboxProvider[Any] = provider
    elif isinstance(provider, str):
        prov = get_provider(provider)
    else:
        prov = get_provider(provider.type, provider)
    if image is not None:
        prov = get_provider(prov.config.type, prov.config.model_copy(update={"image": image}))
    name = harness_for(row, spec_harness=harness, dataset_harness=ds.harness)
    resolver = images or ImageResolver()
    runnable = await resolver.image_for(prov, ImageSource.choose(ds, prov.config), row)
    provenance = await resolver.provenance(prov, runnable)
    harness_ = get_harness(name)
    verdict = await grade_in_sandbox(
        prov, runnable, row, harness_, patch, timeout=timeout, stop_in_background=False, unpatched=unpatched
    )
    verdict.image, verdict.harness = runnable, name
    verdict.image_digest, verdict.image_source_digest = provenance.digest, provenance.source_digest
    return verdict


def grade(
    instance: Instance | Mapping[str, Any] | str,
    patch: str,
    provider: str | ProviderConfig | SandboxProvider[Any] | None = None,
    **options: Any,
) -> Verdict:
    """:func:`grade_async` from synchronous code (a script, or a Jupyter cell whose loop is running)."""
    from anyswe._sync import run_sync

    return run_sync(grade_async(instance, patch, provider, **options))


def dataset_and_instance(
    instance: Instance | Mapping[str, Any] | str, dataset: str | Dataset | None, what: str = "grade"
) -> tuple[Dataset, Instance]:
    """The dataset (its harness and images) and the row: an id is looked up in the dataset (loaded
    if named); a row needs no loaded dataset, only its name's harness and image naming."""
    from anyswe.datasets import Instance, dataset_of, load_dataset

    if isinstance(instance, str):
        if dataset is None:
            raise DatasetError(f"{what}: instance {instance!r} is an id: give the dataset it belongs to (dataset=...)")
        ds = load_dataset(dataset) if isinstance(dataset, str) else dataset
        found = ds.by_id().get(instance)
        if found is None:
            raise DatasetError(f"{what}: dataset {ds.name!r} has no instance {instance!r}")
        return ds, found
    try:
        row = instance if isinstance(instance, Instance) else Instance.model_validate(dict(instance))
    except ValueError as exc:  # pydantic's ValidationError: the field that is wrong
        raise DatasetError(f"{what}: the instance row is not valid: {exc}") from None
    if isinstance(dataset, str):
        return dataset_of([row], dataset), row
    if dataset is None:  # a repository swebench knows runs in its official image; others need a provider image
        from anyswe.datasets import Dataset
        from anyswe.datasets.hub import SWEBENCH_IMAGE
        from anyswe.grading import swebench as sb

        template = SWEBENCH_IMAGE if sb.known_repo(row.repo) else None
        return Dataset(name="", instances=[row], harness="auto", image_template=template), row
    return dataset, row
