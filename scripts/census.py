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
BEGIN, END = "<!-- census:begin (scripts/census.py writes this part) -->", "<!-- census:end -->"
PROVIDERS = ("docker", "apptainer")
#: instance_id -> provider -> its line of the census's census.jsonl (bucket, why, each pass's verdicts, failing).
Census = dict[str, dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class Tier:
    name: str
    title: str
    spec: Path


TIERS = (
    Tier("verified", "Verified", REPO / "specs" / "real_images.yaml"),
    Tier("multilingual", "Multilingual", REPO / "specs" / "multilingual.yaml"),
    Tier("pro", "Pro", REPO / "specs" / "pro.yaml"),
)


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
                said = entry.get("why") or "; ".join(errors)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tier", action="append", choices=[t.name for t in TIERS], help="Only these tiers (repeatable)."
    )
    parser.add_argument("--passes", type=int, default=2, help="Gold and empty passes per instance and runtime.")
    parser.add_argument("--runs", type=Path, default=REPO / "runs" / "census", help="Where the census runs go.")
    parser.add_argument("--no-doc", action="store_true", help="Print the table; leave docs/real_images.md as it is.")
    args = parser.parse_args(argv)
    tiers = [t for t in TIERS if not args.tier or t.name in args.tier]
    at = commit()
    failed: list[str] = []
    done: list[tuple[Tier, Census]] = []
    for tier in tiers:
        run_dir = args.runs / at / tier.name
        if anyswe("prepare", "images", str(tier.spec), "--build", "--repo-mirror", str(MIRRORS)) != 0:
            failed.append(f"{tier.name}: prepare images failed")
            continue
        rc = anyswe(
            "gold-check", str(tier.spec), "--passes", str(args.passes), "--run-dir", str(run_dir),
            "-o", str(run_dir / "exclusions.yaml"),
        )  # fmt: skip
        if rc != 0:
            failed.append(f"{tier.name}: gold-check exited {rc} (a pass without a verdict: run again to resume)")
        if (run_dir / "census.jsonl").is_file():
            done.append((tier, evidence_rows(run_dir / "census.jsonl")))
    command = "just census" + "".join(f" --tier {t.name}" for t in tiers if args.tier)
    text = "\n".join(
        [
            f"`{command}` ({args.passes} gold and {args.passes} empty passes per instance and runtime), "
            f"{datetime.date.today().isoformat()}, commit {at}: {summary(done)}.",
            "",
            table(done),
        ]
    )
    print(text)
    if not args.no_doc and done and not args.tier:
        write_doc(text)
        print(f"wrote {DOC.relative_to(REPO)}")
    for line in failed:
        print(f"census: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
