"""The seal check runs once per image whose repository is sealed, and in every sandbox otherwise."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from anyswe.execute.seal import Seal, SealedImages
from anyswe.execute.task import _image_key
from anyswe.sandbox.request import Mount, SandboxRequest


class Checks:
    """A seal check that answers ``finding`` after a moment, counting its runs."""

    def __init__(self, finding: str = "sealed", fail: int = 0) -> None:
        self.finding, self.fail, self.runs = finding, fail, 0

    async def __call__(self) -> Seal:
        self.runs += 1
        await asyncio.sleep(0.01)
        if self.runs <= self.fail:
            raise RuntimeError("exec failed")
        return Seal(self.finding, head=f"head-{self.runs}")


def findings(seals: list[Seal]) -> list[str]:
    return [s.finding for s in seals]


def test_a_sealed_image_is_checked_once_even_by_sandboxes_starting_together() -> None:
    seals, check = SealedImages(), Checks("sealed")

    async def go() -> list[Seal]:
        return await asyncio.gather(*(seals.check("img", check) for _ in range(6)))

    found = asyncio.run(go())
    # Every sandbox gets the one check's finding: HEAD (the starting point) is a fact of the image.
    assert findings(found) == ["sealed"] * 6 and {s.head for s in found} == {"head-1"}
    assert check.runs == 1
    # Another event loop (the next run_sync in Jupyter) still knows it.
    assert asyncio.run(seals.check("img", check)).head == "head-1" and check.runs == 1


def test_an_unsealed_image_is_checked_and_cleaned_in_every_sandbox() -> None:
    seals, check = SealedImages(), Checks("cleaned")

    async def go() -> list[Seal]:
        first = await asyncio.gather(*(seals.check("img", check) for _ in range(4)))
        return [*first, await seals.check("img", check)]

    assert findings(asyncio.run(go())) == ["cleaned"] * 5
    assert check.runs == 5


def test_no_key_means_no_memory_and_a_failed_check_lets_each_sandbox_check_for_itself() -> None:
    seals = SealedImages()
    check = Checks("sealed")
    for _ in range(3):
        assert asyncio.run(seals.check(None, check)).finding == "sealed"
    assert check.runs == 3

    failing = Checks("sealed", fail=1)

    async def go() -> list[object]:
        return await asyncio.gather(*(seals.check("other", failing) for _ in range(3)), return_exceptions=True)

    found = asyncio.run(go())
    # A failed check says nothing about the image: it is never taken as sealed, and the waiters run
    # their own checks (at once, not one after another), as does every later sandbox.
    assert isinstance(found[0], RuntimeError) and findings(found[1:]) == ["sealed", "sealed"]  # type: ignore[arg-type]
    assert failing.runs == 3
    assert asyncio.run(seals.check("other", failing)).finding == "sealed" and failing.runs == 4


def test_sandboxes_starting_together_in_a_later_event_loop_share_one_check() -> None:
    """Jupyter runs each run_sync in a new loop: the locks of the first one are not used there."""
    seals, check = SealedImages(), Checks("sealed")

    async def together(key: str) -> list[Seal]:
        return await asyncio.gather(*(seals.check(key, check) for _ in range(3)))

    assert findings(asyncio.run(together("a"))) == ["sealed"] * 3 and check.runs == 1
    assert findings(asyncio.run(together("b"))) == ["sealed"] * 3 and check.runs == 2


class _Sandbox:
    """What ``_image_key`` reads of a sandbox: its request (mounts) and what it was started from."""

    def __init__(self, identity: object, *targets: str) -> None:
        self.image_identity = identity
        self.request = SandboxRequest("img", mounts=tuple(Mount("/tmp", t) for t in targets))


@pytest.mark.parametrize(
    ("targets", "remembered"),
    [
        ((), True),
        (("/.anyswe/bundle", "/.anyswe/state"), True),
        (("/testbedx",), True),
        (("/testbed",), False),
        (("/testbed/src/",), False),
        (("/",), False),
    ],
)
def test_the_key_is_what_the_sandbox_runs_unless_a_mount_reaches_the_repository(
    targets: tuple[str, ...], remembered: bool
) -> None:
    key = _image_key(_Sandbox(("docker", "sha256:abc"), *targets), "/testbed", "base")  # type: ignore[arg-type]
    assert (key is not None) is remembered
    assert _image_key(_Sandbox(None), "/testbed", "base") is None  # type: ignore[arg-type]
    other = _image_key(_Sandbox(("docker", "sha256:def")), "/testbed", "base")  # type: ignore[arg-type]
    assert not remembered or other != key


def test_a_sealed_finding_outlives_the_process_in_the_store(tmp_path: Path) -> None:
    """With a store, a later worker (a later run) takes a sealed image's finding without checking;
    a cleaned one, another image or a torn file is checked again."""
    key = (("docker", "sha256:aaaa"), "/testbed", "base")
    first, check = SealedImages(tmp_path), Checks("sealed")
    found = asyncio.run(first.check(key, check))
    assert check.runs == 1 and len(list(tmp_path.glob("*.json"))) == 1
    sealed = Seal("sealed", head="h", commits=("c1 setup",), files=("setup.cfg",), files_truncated=False)
    (next(tmp_path.glob("*.json"))).write_text(
        json.dumps({"key": repr(key), **dataclasses.asdict(sealed)})
    )  # what the first worker wrote, with lists where the tuples were
    later = Checks("sealed")
    assert asyncio.run(SealedImages(tmp_path).check(key, later)) == sealed and later.runs == 0
    assert found.head == "head-1"
    # Another image is another key; a cleaned repository is never stored.
    other, cleaned = Checks("sealed"), Checks("cleaned")
    asyncio.run(SealedImages(tmp_path).check((("docker", "sha256:bbbb"), "/testbed", "base"), other))
    asyncio.run(SealedImages(tmp_path).check(("c",), cleaned))
    assert other.runs == 1 and cleaned.runs == 1 and len(list(tmp_path.glob("*.json"))) == 2
    again = Checks("cleaned")
    asyncio.run(SealedImages(tmp_path).check(("c",), again))
    assert again.runs == 1
    # A torn file is no finding: checked again, and written whole.
    for path in tmp_path.glob("*.json"):
        path.write_text('{"key": ')
    torn = Checks("sealed")
    assert asyncio.run(SealedImages(tmp_path).check(key, torn)).head == "head-1" and torn.runs == 1
    # No store: memory only.
    assert SealedImages().store is None
