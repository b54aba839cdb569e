"""Property-based checks of what reads users' files and handles patches: whatever the bytes, the
answer is a result or a clear anyswe error (naming the file), never a traceback or lost work."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anyswe.agents.replay import ReplayAgent, ReplayConfig
from anyswe.datasets import load_dataset
from anyswe.errors import AgentError, DatasetError, SpecError
from anyswe.grading.ladder import END_MARKER, split_end_marker
from anyswe.results.schema import TaskResult
from anyswe.spec import load_spec

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

GOOD_SPEC = b"""\
name: t
dataset: {name: demo, limit: 2}
agents:
  gold: {type: gold}
providers:
  docker: {type: docker, memory: 2g}
matrix: {agents: [gold]}
"""

ROW = {
    "instance_id": "a__b-1",
    "repo": "a/b",
    "base_commit": "0" * 40,
    "problem_statement": "fix it",
    "patch": "diff --git a/x b/x\n",
    "test_patch": "",
    "FAIL_TO_PASS": ["t::a"],
    "PASS_TO_PASS": [],
    "version": "1.0",
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _file(data: bytes, suffix: str) -> Path:
    path = Path(tempfile.mkdtemp()) / f"input{suffix}"
    path.write_bytes(data)
    return path


def _spliced(base: bytes, junk: bytes, at: int) -> bytes:
    at = at % (len(base) + 1)
    return base[:at] + junk + base[at:]


@SETTINGS
@given(junk=st.binary(max_size=40), at=st.integers(min_value=0))
def test_spec_with_any_bytes_spliced_in_loads_or_names_the_file(junk: bytes, at: int) -> None:
    path = _file(_spliced(GOOD_SPEC, junk, at), ".yaml")
    try:
        load_spec(path)
    except SpecError as exc:
        assert str(path) in str(exc)


@SETTINGS
@given(data=st.binary(max_size=300))
def test_spec_of_arbitrary_bytes(data: bytes) -> None:
    path = _file(data, ".yaml")
    try:
        load_spec(path)
    except SpecError as exc:
        assert str(path) in str(exc)


@SETTINGS
@given(
    rows=st.lists(st.one_of(json_values, st.just(ROW), st.builds(lambda v: {**ROW, "FAIL_TO_PASS": v}, json_values))),
    suffix=st.sampled_from([".jsonl", ".json"]),
    junk=st.binary(max_size=8),
    at=st.integers(min_value=0),
)
def test_dataset_file_loads_or_names_the_file(rows: list[Any], suffix: str, junk: bytes, at: int) -> None:
    text = json.dumps(rows) if suffix == ".json" else "\n".join(json.dumps(r) for r in rows)
    path = _file(_spliced(text.encode(), junk, at), suffix)
    try:
        dataset = load_dataset(path=path)
    except DatasetError as exc:
        assert str(path) in str(exc)
    else:
        assert all(i.instance_id for i in dataset.instances)


@SETTINGS
@given(
    rows=st.lists(
        st.one_of(json_values, st.fixed_dictionaries({"instance_id": st.text(), "model_patch": st.text()})),
        max_size=5,
    ),
    junk=st.binary(max_size=8),
    at=st.integers(min_value=0),
)
def test_predictions_file_loads_or_names_the_file(rows: list[Any], junk: bytes, at: int) -> None:
    path = _file(_spliced("\n".join(json.dumps(r) for r in rows).encode(), junk, at), ".jsonl")
    agent = ReplayAgent(ReplayConfig(predictions=path))
    try:
        agent.check(["a__b-1"])
    except AgentError as exc:
        assert str(path) in str(exc)
    else:
        assert set(agent.patches) <= {"a__b-1"}


@SETTINGS
@given(output=st.text(), code=st.integers(min_value=0, max_value=255))
def test_end_marker_is_found_and_removed_exactly(output: str, code: int) -> None:
    # What the eval wrapper prints: the script's output, a newline, the marker and the exit status.
    assert split_end_marker(f"{output}\n{END_MARKER} {code}\n") == (output, True)
    if f"\n{END_MARKER} " not in output:
        assert split_end_marker(output) == (output, False)


@SETTINGS
@given(patch=st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_any_patch_text_round_trips_through_a_result_row_or_is_refused_cleanly(patch: str) -> None:
    """Patches are text from agents: anything they hold (lone surrogates included) is stored or refused
    with a ValueError/UnicodeError, which the driver records as the task's own error."""
    row = TaskResult.model_validate(
        {"key": "k", "cell": "c", "agent": "a", "provider": "p", "provider_type": "docker", "instance_id": "i"}
        | {"repo": "r", "sample": 0, "attempt": 1, "spec": "s", "run_id": "x", "model_patch": patch}
    )
    try:
        line = row.to_json_line()
    except (ValueError, UnicodeError):
        return
    assert TaskResult.model_validate_json(line).model_patch == patch


#: JSON as agents send it to the gateway: integers of any size, floats out to the infinities and NaN
#: (the standard library writes them), any text (lone surrogates included), nested.
_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


@SETTINGS
@given(value=_JSON_VALUES, ascii_only=st.booleans())
def test_the_gateways_fast_json_reads_every_body_as_the_standard_library_does(value: Any, ascii_only: bool) -> None:
    """orjson reads the gateway's bodies; what it would read differently (an integer past 64 bits, as a
    float) or refuses (NaN, a lone surrogate) goes to the standard library: the same value either way."""
    from anyswe.gateway._json import loads

    raw = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        expected = json.loads(raw)
    except ValueError:  # a raw lone surrogate, not UTF-8: refused by both, as a ValueError
        try:
            loads(raw)
        except ValueError:
            return
        raise AssertionError("accepted a body the standard library refuses") from None
    # json.dumps compares NaN and the types of numbers (1 == 1.0 == True would hide a float read).
    assert json.dumps(loads(raw), sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert repr(loads(raw)) == repr(expected)


_CHAT_MESSAGES = st.lists(
    st.one_of(
        st.builds(lambda t, r: {"role": r, "content": t}, st.text(max_size=20), st.sampled_from(["user", "system"])),
        st.builds(
            lambda a, i: {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": i, "type": "function", "function": {"name": "bash", "arguments": a}}],
            },
            st.sampled_from(['{"command": "ls"}', '{"command": "ls -a"}', "not json", "[1]", ""]),
            st.sampled_from(["c1", "c2"]),
        ),
        st.builds(
            lambda t, i: {"role": "tool", "tool_call_id": i, "content": t}, st.text(max_size=20), st.text(max_size=3)
        ),
    ),
    max_size=8,
)


@SETTINGS
@given(first=_CHAT_MESSAGES, more=_CHAT_MESSAGES, cut=st.integers(min_value=0, max_value=8), edit=st.booleans())
def test_a_chat_history_read_on_from_the_last_call_is_read_as_a_whole(
    first: list[Any], more: list[Any], cut: int, edit: bool
) -> None:
    """The gateway reads only a continued chat history's new messages, reusing the previous call's; the
    result is the whole reading's whatever the next call sends: the history continued, cut short, or
    with an earlier message changed (compaction, a retry)."""
    from anyswe.gateway.wire import read_request

    before = read_request("openai-chat", {"model": "m", "messages": first})
    history = [*first[:cut], *more]
    if edit and history:
        history[0] = {**history[0], "content": "rewritten"}
    body = {"model": "m", "messages": json.loads(json.dumps(history))}  # a new body, as each call's is
    again = read_request("openai-chat", body, known=(first, before.messages))
    assert again.messages == read_request("openai-chat", body).messages


def test_a_mapping_in_the_matrix_is_named_not_a_type_error(tmp_path: Path) -> None:
    """Found by the splice property above (`: []` spliced into a matrix name): a mapping where a name
    goes raised TypeError (unhashable) instead of a SpecError naming the file and the line."""
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: x\ndataset: {name: demo}\nagents: {g: {type: gold}}\nmatrix:\n  agents: [{g: []}]\n")
    with pytest.raises(SpecError, match=rf"{spec}:5:.*matrix\.agents\.0"):
        load_spec(spec)
