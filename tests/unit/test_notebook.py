"""gen in a notebook: in-memory inputs to ``gen.run`` (rows, DataFrames, run folders), the
progress display in a Jupyter kernel, the HTML tables of a run folder and a bank, and
``gen.compare`` of two runs on one bank."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import read_jsonl
from loopback import Loopback
from nocontext_runs import knows_giveaways, leaky_bank

import gen
from gen.engine.api import in_memory_inputs
from gen.errors import GenError, InputError

# --------------------------------------------------------------------------- in-memory inputs


def served(url: str) -> dict[str, Any]:
    return {"backend": "openai", "base_url": url, "model": "loopback", "max_retries": 0}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    with Loopback(knows_giveaways, delay=0) as srv:
        yield srv


def test_nocontext_on_a_polars_frame_gives_the_records_of_the_same_rows_as_a_file(
    tmp_path: Path, server: Any
) -> None:
    bank = leaky_bank(tmp_path / "items.jsonl")
    rows = read_jsonl(bank)
    common = {"llm": served(server.url), "cache_dir": None, "progress": "off"}
    from_file = gen.run("nocontext", input=str(bank), out=tmp_path / "file", **common)
    from_frame = gen.run("nocontext", input=pl.DataFrame(rows), out=tmp_path / "frame", **common)
    from_list = gen.run("nocontext", input=rows, out=tmp_path / "list", **common)

    written = tmp_path / "frame" / "inputs" / "input.jsonl"
    assert read_jsonl(written) == pl.DataFrame(rows).to_dicts()

    def without_source(folder: Any) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in r.items() if k != "source"} for r in read_jsonl(folder.records_path)
        ]

    assert len(from_file) == 12
    assert without_source(from_frame) == without_source(from_file)
    assert without_source(from_list) == without_source(from_file)
    assert {r["source"] for r in read_jsonl(from_frame.records_path)} == {str(written)}
    # the manifest names the file the rows became and hashes it twice: as an input, as an output
    m = from_frame.manifest
    assert m.config["input"] == str(written)
    assert m.inputs[str(written)] == m.outputs["inputs/input.jsonl"]
    # a rerun into the same folder (a resume) reads the same bytes and writes the same records
    again = gen.run("nocontext", input=pl.DataFrame(rows), out=tmp_path / "frame", **common)
    assert again.records_path.read_bytes() == from_frame.records_path.read_bytes()
    assert again.manifest.inputs == m.inputs


def test_a_run_folder_is_read_as_its_path(tmp_path: Path, server: Any) -> None:
    common = {"llm": served(server.url), "cache_dir": None, "progress": "off"}
    first = gen.run(
        "nocontext", input=str(leaky_bank(tmp_path / "items.jsonl")), out=tmp_path / "a", **common
    )
    options, written = in_memory_inputs(
        "merge", {"input": [first, str(first.path)]}, tmp_path / "m"
    )
    assert options == {"input": [str(first.path)] * 2} and written == []
    options, written = in_memory_inputs("digital", {"persona_file": first, "n": 3}, tmp_path / "d")
    assert options == {"persona_file": str(first.path), "n": 3} and written == []


def test_pandas_rows_become_json_with_missing_values_null(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {"goal_id": ["a", "b"], "group": ["g", "g"], "text": ["x", "y"], "n": [1, None]}
    )
    options, written = in_memory_inputs("distractors", {"input": frame}, tmp_path)
    assert read_jsonl(written[0]) == [
        {"goal_id": "a", "group": "g", "text": "x", "n": 1.0},
        {"goal_id": "b", "group": "g", "text": "y", "n": None},
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "no rows (an empty table)"),
        (pl.DataFrame(), "no rows (an empty table)"),
        ([{"a": 1}, "b"], "row 2: expected a mapping (a dict), got str"),
        ([{"a": {"b": [1, float("nan")]}}], "row 1: a.b[1]: nan is not a JSON number"),
        ([{"a": object()}], "row 1: a: a object is not JSON data"),
        ([{"a": {1: "x"}}], "row 1: a: a key 1 is not a string"),
        ([{"a": "\ud800"}], "row 1: a: holds a lone UTF-16 surrogate"),
        (pl.DataFrame({"x": [1.0, float("inf")]}), "row 2: x: inf is not a JSON number"),
    ],
    ids=["empty", "empty_frame", "not_a_dict", "nan", "object", "int_key", "surrogate", "inf"],
)
def test_a_bad_in_memory_input_is_one_line_and_leaves_nothing(
    tmp_path: Path, value: Any, message: str
) -> None:
    out = tmp_path / "run"
    with pytest.raises(InputError) as e:
        gen.run("nocontext", input=value, out=out, cache_dir=None, progress="off")
    text = str(e.value)
    assert "\n" not in text and text.startswith("input= (in memory, for ") and message in text
    assert isinstance(e.value, GenError) and not out.exists()


def test_a_bad_row_is_named_by_its_line_in_the_file_it_became(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(GenError) as e:
        gen.run("nocontext", input=[{"item_id": "x"}], out=out, cache_dir=None, progress="off")
    assert str(out / "inputs" / "input.jsonl") + ":1" in str(e.value) and not out.exists()


def test_dates_become_iso_text_and_a_table_only_goes_where_a_path_does(tmp_path: Path) -> None:
    rows = [{"at": dt.date(2026, 1, 2), "when": dt.datetime(2026, 1, 2, 3, 4, 5)}]
    options, written = in_memory_inputs("digital", {"cue_file": rows, "n": 2}, tmp_path)
    assert json.loads(written[0].read_text()) == {"at": "2026-01-02", "when": "2026-01-02T03:04:05"}
    # a list of model dicts is nocontext's models=, not a table; llm= is no path either
    models = [{"backend": "openai", "base_url": "http://x/v1", "model": "m"}]
    options, written = in_memory_inputs(
        "nocontext", {"models": models, "llm": models[0]}, tmp_path / "n"
    )
    assert options == {"models": models, "llm": models[0]} and written == []
