"""The gold census of every real tier: ``just census`` (or ``./dev census``).

For each tier's spec (Verified, Multilingual, Pro: the images built here offline from
``../shared/swebench/repos``) it builds what is missing (``anyswe prepare images --build``: docker
images and their SIFs), runs ``anyswe gold-check --passes 2`` on docker and apptainer into
``runs/census/<commit>/<tier>`` (resumable: run it again and it goes on where it stopped), then writes
the table of every instance's bucket per runtime, with its evidence, the command, date and commit,
into docs/real_images.md between its census markers.

Run it before resolving an issue that changes images, grading, a benchmark or a runtime, and give
the table's changes (``git diff docs/real_images.md``) in the closing note. CI does not run it: it
runs the gold-check command itself on the demo rows and on one real instance.

    uv run python scripts/census.py [--tier verified --tier pro] [--passes 2] [--check]

``--tier verified-all`` is the census at scale: every Verified row the dry run of ``prepare images
--build`` says is buildable here from the mirrors (96 with the shared ones), in chunks of ``--chunk``
instances, each built, checked and then removed again (its instance image and SIF; the env images,
which rows share, stay, and so does every image a fixed tier uses), so the machine's disk holds a
chunk at a time. It is resumable across sessions and commits (``runs/census/verified-all/chunk-NNN``;
each chunk says the commit it ran at) and writes its table into docs/verified.md. Hours on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MIRRORS = REPO.parent / "shared" / "swebench" / "repos"
DOC = REPO / "docs" / "real_images.md"
SCALE_DOC = REPO / "docs" / "verified.md"
BEGIN, END = "<!-- census:begin (scripts/census.py writes this part) -->", "<!-- census:end -->"
PROVIDERS = ("docker", "apptainer")
#: instance_id -> provider -> its line of the census's census.jsonl (bucket, why, each pass's verdicts, failing).
Census = dict[str, dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class Tier:
    name: str
    title: str
    spec: Path
    every_buildable_row: bool = False  #: the dataset's every row built here, in pruned chunks (not a fixed set)


TIERS = (
    Tier("verified", "Verified", REPO / "specs" / "real_images.yaml"),
    Tier("multilingual", "Multilingual", REPO / "specs" / "multilingual.yaml"),
    Tier("pro", "Pro", REPO / "specs" / "pro.yaml"),
)
SCALE = Tier("verified-all", "Verified", REPO / "specs" / "real_images.yaml", every_buildable_row=True)


def anyswe(*argv: str) -> int:
    """An ``anyswe`` command as a user runs it, its output passed through; its exit code."""
    print("$ anyswe " + " ".join(argv), flush=True)
    return subprocess.run([sys.executable, "-m", "anyswe", *argv], check=False).returncode


def commit() -> str:
    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True, check=False).stdout.strip()

    return git("rev-parse", "--short=7", "HEAD") + (
        "-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    )


def short(instance_id: str) -> str:
    """An instance's name in the table: Pro's long ids cut to the repository and the commit's first 8."""
    if instance_id.startswith("instance_"):
        repo, _, rest = instance_id.removeprefix("instance_").partition("-")
        return f"{repo.split('__')[-1]}-{rest[:8]}"
    return instance_id


def evidence_rows(census_jsonl: Path) -> Census:
    """instance_id -> provider -> its census line (bucket, why, each pass's gold and empty verdict, failing),
    with what its gold passes' rows say of the test run (``results.jsonl`` beside it: the flags raised,
    the tests' record compared or not)."""
    out: Census = {}
    for line in census_jsonl.read_text().splitlines():
        entry = json.loads(line)
        out.setdefault(entry["instance_id"], {})[entry["provider"]] = entry | {"flags": set(), "record": set()}
    results = census_jsonl.with_name("results.jsonl")
    for line in results.read_text().splitlines() if results.is_file() else []:
        row = json.loads(line)
        if (entry := out.get(row["instance_id"], {}).get(row["provider"])) is not None:
            entry["flags"].update(row.get("flags") or [])
            entry["record"].add(row.get("test_record") or "-")
    return out


def _passes(verdicts: list[str] | None) -> str:
    said = verdicts or []
    return f"{said.count('resolved')}/{len(said)}"


def table(tiers: list[tuple[Tier, Census]]) -> str:
    """The census as markdown: one row per instance, its bucket and passes on each runtime; what is not
    supported with its failing tests and why."""
    lines = [
        "| tier | instance | "
        + " | ".join(PROVIDERS)
        + " | gold resolved | resolved without the fix | tests' record | flags on gold | why, failing tests |",
        "|---|---|" + "---|" * len(PROVIDERS) + "---|---|---|---|---|",
    ]
    for tier, found in tiers:
        for iid, per in sorted(found.items()):
            buckets = [str(per.get(p, {}).get("bucket", "not run")) for p in PROVIDERS]
            gold = " / ".join(_passes(per.get(p, {}).get("gold")) for p in PROVIDERS)
            empty = " / ".join(_passes(per.get(p, {}).get("empty")) for p in PROVIDERS)
            notes = []
            for p in PROVIDERS:
                entry = per.get(p, {})
                if entry.get("bucket") in (None, "supported"):
                    continue
                failing: list[str] = entry.get("failing") or []
                errors = [v for v in (*entry.get("gold", []), *entry.get("empty", [])) if v.startswith("error")]
                # One line per table row: an error's message may hold newlines (the command, its exit code).
                said = " ".join((entry.get("why") or "; ".join(dict.fromkeys(errors))).split())
                tests = ", ".join(f"`{t}`" for t in failing[:4])
                tests += f" and {len(failing) - 4} more" if len(failing) > 4 else ""
                notes.append(f"{p}: {said}" + (f" ({tests})" if tests else ""))
            record = ", ".join(sorted(set().union(*(per.get(p, {}).get("record", set()) for p in PROVIDERS)))) or "-"
            flags = ", ".join(sorted(set().union(*(per.get(p, {}).get("flags", set()) for p in PROVIDERS)))) or "-"
            lines.append(
                f"| {tier.title} | {short(iid)} | "
                + " | ".join(buckets)
                + f" | {gold} | {empty} | {record} | {flags} | {'; '.join(notes) or '-'} |"
            )
    return "\n".join(lines)


def summary(tiers: list[tuple[Tier, Census]]) -> str:
    parts = []
    for tier, found in tiers:
        for p in PROVIDERS:
            buckets = [str(per.get(p, {}).get("bucket", "not run")) for per in found.values()]
            counts = ", ".join(f"{buckets.count(b)} {b}" for b in dict.fromkeys(buckets))
            parts.append(f"{tier.title} on {p}: {counts}")
    return "; ".join(parts)


def write_doc(text: str, doc: Path = DOC) -> None:
    """Put ``text`` between the census markers of ``doc`` (the rest of the file as it is)."""
    current = doc.read_text()
    if BEGIN not in current or END not in current:
        raise SystemExit(f"{doc}: no census markers ({BEGIN} ... {END}) to write the table between")
    head, _, rest = current.partition(BEGIN)
    _, _, tail = rest.partition(END)
    doc.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


# -- the census at scale -----------------------------------------------------------------------------


def buildable_rows(tier: Tier) -> list[str]:
    """The rows of ``tier``'s dataset that ``prepare images --build --dry-run`` says can be built here, or are."""
    argv = [sys.executable, "-m", "anyswe", "prepare", "images", str(tier.spec), "--set", "dataset.instance_ids=[]"]
    argv += ["--set", "matrix.providers=[docker]", "--build", "--repo-mirror", str(MIRRORS), "--dry-run", "--json"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout  # exit 1: the disk for all 500
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    ids = [r["instance_id"] for r in rows if r.get("status") in ("buildable", "present") and r.get("phase") == "image"]
    if not ids:
        raise SystemExit(f"census: the dry run of {tier.spec} found no buildable row:\n{out[-2000:]}")
    return ids


def fixed_tier_ids() -> set[str]:
    """The instances the fixed tiers (and so CI) use: their images are never pruned."""
    from anyswe.plan import make_plan
    from anyswe.spec import load_spec

    return {i.instance_id for t in TIERS for i in make_plan(load_spec(t.spec)).instances}


def prune(ids: list[str], keep: set[str]) -> None:
    """Remove each instance's image and its SIF (not its env image: rows share those), unless in ``keep``."""
    from anyswe.grading import swebench as sb
    from anyswe.sandbox.sif import cached_sif

    for iid in ids:
        if iid in keep:
            continue
        image = sb.official_image(iid)
        found = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Id}}", image], capture_output=True, text=True, check=False
        )
        if found.returncode == 0:
            sif = cached_sif(found.stdout.strip())
            for path in (sif, sif.with_name(sif.name + ".json")):
                path.unlink(missing_ok=True)
            subprocess.run(["docker", "rmi", "-f", image], capture_output=True, check=False)


def chunk_done(run_dir: Path, ids: list[str]) -> bool:
    census = run_dir / "run" / "census.jsonl"
    if not census.is_file():
        return False
    seen = {(e["instance_id"], e["provider"]) for e in map(json.loads, census.read_text().splitlines())}
    return all((i, p) in seen for i in ids for p in PROVIDERS)


def run_scale(
    tier: Tier, runs: Path, passes: int, chunk: int, keep_images: bool
) -> tuple[Census, list[str], list[str]]:
    """Every buildable row, ``chunk`` at a time: built, checked, pruned. (census, commits it ran at, failures)."""
    ids, keep = buildable_rows(tier), fixed_tier_ids()
    found: Census = {}
    commits: list[str] = []
    failed: list[str] = []
    for n in range(0, len(ids), chunk):
        part, run_dir = ids[n : n + chunk], runs / tier.name / f"chunk-{n // chunk:03d}"
        sets = ["--set", f"dataset.instance_ids=[{', '.join(part)}]"]
        if not chunk_done(run_dir, part):
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "commit").write_text(commit())
            if anyswe("prepare", "images", str(tier.spec), *sets, "--build", "--repo-mirror", str(MIRRORS)) != 0:
                failed.append(f"{tier.name} chunk {n // chunk}: prepare images failed")
            rc = anyswe(
                "gold-check", str(tier.spec), *sets, "--passes", str(passes), "--run-dir", str(run_dir / "run"),
                "-o", str(run_dir / "exclusions.yaml"),
            )  # fmt: skip
            if rc != 0:
                failed.append(f"{tier.name} chunk {n // chunk}: gold-check exited {rc} (run again to resume)")
            elif not keep_images:
                prune(part, keep)
        if (run_dir / "run" / "census.jsonl").is_file():
            found |= evidence_rows(run_dir / "run" / "census.jsonl")
            commits.append((run_dir / "commit").read_text().strip())
    return found, sorted(set(commits)), failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tier", action="append", choices=[t.name for t in (*TIERS, SCALE)], help="Only these tiers (repeatable)."
    )
    parser.add_argument("--passes", type=int, default=2, help="Gold and empty passes per instance and runtime.")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "census", help="Where the census runs go.")
    parser.add_argument("--no-doc", action="store_true", help="Print the table; leave the docs as they are.")
    parser.add_argument("--chunk", type=int, default=4, help="verified-all: instances built and checked at a time.")
    parser.add_argument("--keep-images", action="store_true", help="verified-all: keep each chunk's images.")
    args = parser.parse_args(argv)
    if args.tier and SCALE.name in args.tier:
        found, commits, failed = run_scale(SCALE, args.runs, args.passes, args.chunk, args.keep_images)
        done = [(SCALE, found)] if found else []
        command, at, doc = "just census --tier verified-all", ", ".join(commits), SCALE_DOC
    else:
        tiers = [t for t in TIERS if not args.tier or t.name in args.tier]
        at = commit()
        done, failed = run_fixed(tiers, args.runs / at, args.passes)
        command, doc = "just census" + "".join(f" --tier {t.name}" for t in tiers if args.tier), DOC
    text = "\n".join(
        [
            f"`{command}` ({args.passes} gold and {args.passes} empty passes per instance and runtime), "
            f"{datetime.date.today().isoformat()}, commit {at}: {summary(done)}.",
            "",
            table(done),
        ]
    )
    print(text)
    if not args.no_doc and done and (not args.tier or doc is SCALE_DOC):
        write_doc(text, doc)
        print(f"wrote {doc.relative_to(REPO)}")
    for line in failed:
        print(f"census: {line}", file=sys.stderr)
    return 1 if failed else 0


def run_fixed(tiers: list[Tier], runs: Path, passes: int) -> tuple[list[tuple[Tier, Census]], list[str]]:
    """Each fixed tier built and checked into ``runs/<tier>``: its census, and what failed."""
    failed: list[str] = []
    done: list[tuple[Tier, Census]] = []
    for tier in tiers:
        run_dir = runs / tier.name
        if anyswe("prepare", "images", str(tier.spec), "--build", "--repo-mirror", str(MIRRORS)) != 0:
            failed.append(f"{tier.name}: prepare images failed")
            continue
        rc = anyswe(
            "gold-check", str(tier.spec), "--passes", str(passes), "--run-dir", str(run_dir),
            "-o", str(run_dir / "exclusions.yaml"),
        )  # fmt: skip
        if rc != 0:
            failed.append(f"{tier.name}: gold-check exited {rc} (a pass without a verdict: run again to resume)")
        if (run_dir / "census.jsonl").is_file():
            done.append((tier, evidence_rows(run_dir / "census.jsonl")))
    return done, failed


if __name__ == "__main__":
    raise SystemExit(main())
