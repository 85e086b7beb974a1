"""gen in a notebook: in-memory inputs to ``gen.run`` (rows, DataFrames, run folders), the
progress display in a Jupyter kernel, the HTML tables of a run folder and a bank, and
``gen.compare`` of two runs on one bank."""

from __future__ import annotations

import datetime as dt
import json
from html.parser import HTMLParser
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
    # merge's input= is a list of paths: a list there is that list, never a table of rows
    paths = [str(first.path), str(first.path)]
    assert in_memory_inputs("merge", {"input": paths}, tmp_path / "m") == ({"input": paths}, [])
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


# --------------------------------------------------------------------------- progress in Jupyter


class _Kernel:
    """A stand-in for ipykernel's shell: what a notebook's ``get_ipython()`` returns."""

    kernel = object()


class _Terminal:
    """IPython in a terminal: a shell without a kernel."""


class _Handle:
    def __init__(self, shown: list[str]) -> None:
        self.shown = shown

    def update(self, obj: Any) -> None:
        self.shown.append(obj.data)


@pytest.fixture
def notebook(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A simulated Jupyter kernel: IPython's shell has a kernel, and ``display`` records the HTML
    a notebook would show (the first display and each update of it)."""
    import IPython
    import IPython.display

    shown: list[str] = []

    def display(obj: Any, display_id: bool = False) -> _Handle:
        assert display_id is True  # an updating output, not one output per update
        shown.append(obj.data)
        return _Handle(shown)

    monkeypatch.setattr(IPython, "get_ipython", lambda: _Kernel())
    monkeypatch.setattr(IPython.display, "display", display)
    return shown


def test_a_notebook_is_detected_and_a_terminal_ipython_or_plain_python_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import IPython

    from gen.engine.progress import Progress, in_notebook

    monkeypatch.setattr(IPython, "get_ipython", lambda: _Kernel())
    assert in_notebook() and Progress("x", 3, "auto", 10.0).mode == "jupyter"
    monkeypatch.setattr(IPython, "get_ipython", lambda: _Terminal())
    assert not in_notebook()
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert not in_notebook() and Progress("x", 3, "auto", 10.0).mode == "plain"
    monkeypatch.delitem(__import__("sys").modules, "IPython")
    assert not in_notebook()


def test_a_run_in_a_notebook_draws_one_updating_html_bar(
    notebook: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from html.parser import HTMLParser

    from gen.engine.progress import Progress

    with Progress("<demo>", 3, "auto", 10.0) as progress:
        for done in (1, 2, 3):
            progress.update(done, done, 0)
    assert capsys.readouterr().out == ""  # no plain lines: the bar is the display
    assert len(notebook) >= 2  # the first draw, then at least the final update

    class Bars(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.bars: list[dict[str, str | None]] = []
            self.tags: list[str] = []
            self.text = ""

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            self.tags.append(tag)
            if tag == "progress":
                self.bars.append(dict(attrs))

        def handle_data(self, data: str) -> None:
            self.text += data

    last = Bars()
    last.feed(notebook[-1])
    assert last.bars == [{"value": "3", "max": "3", "style": "width:40%"}]
    assert (
        "demo" not in last.tags
        and "<demo>" in last.text
        and "3/3 accepted 3 rejected 0" in last.text
    )


# --------------------------------------------------------------------------- HTML tables


class _Html(HTMLParser):
    """The tags and the text of an HTML fragment, as a browser would parse it."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.cells: list[str] = []
        self.in_cell = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag in ("td", "th"):
            self.cells.append("")
            self.in_cell = True

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self.in_cell = False

    def handle_data(self, data: str) -> None:
        if self.in_cell:
            self.cells[-1] += data


HOSTILE = "<script>alert('x')</script> & <b>bold</b>"


def test_a_run_folder_shows_its_counts_funnel_and_first_records_escaped(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    rows = [{"item_id": f"i{k}", "question": HOSTILE if k == 1 else f"q{k}"} for k in range(7)]
    (out / "nocontext.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = {
        "generator": "nocontext",
        "records": {"file": "nocontext.jsonl", "kind": "mcq", "models": []},
        "counts": {
            "requested": 10,
            "accepted": 7,
            "rejected": 3,
            "rejects_by_reason": {"no_answer": 2, "<i>odd</i>": 1},
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest))
    page = _Html(gen.open(out)._repr_html_())
    # the caption's one <b> is the only markup beside the tables: none from the records
    assert "script" not in page.tags and "i" not in page.tags and page.tags.count("b") == 1
    cells = page.cells
    for fact in ("generator", "nocontext", "requested", "10", "accepted", "7", "rejected", "3"):
        assert fact in cells
    assert (
        cells[cells.index("no_answer") + 1] == "2" and cells[cells.index("<i>odd</i>") + 1] == "1"
    )
    assert HOSTILE in cells  # the record's text, shown as text
    assert "i4" in cells and "i5" not in cells  # the first five records


def test_a_damaged_folder_still_shows(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps({"generator": "nocontext"}))
    page = _Html(gen.open(out)._repr_html_())
    assert "nocontext" in page.cells and "table" in page.tags


def test_an_mcq_bank_shows_its_types_defects_and_items_escaped(tmp_path: Path) -> None:
    from gen.kinds.mcq import load_banks

    bank = leaky_bank(tmp_path / "items.jsonl")
    text = bank.read_text().replace("What is C's goal?", HOSTILE, 1)
    bank.write_text(text)
    (loaded,) = load_banks(bank)
    loaded.problems.append({"line": 3, "item_id": "item2", "field": "answer", "problem": "<x>"})
    page = _Html(loaded._repr_html_())
    assert "script" not in page.tags and "x" not in page.tags
    cells = page.cells
    assert cells[cells.index("items") + 1] == "12"
    assert cells[cells.index("items of type goal") + 1] == "4"
    assert cells[cells.index("<x>") + 1] == "1"
    assert HOSTILE in cells and "item4" in cells and "item5" not in cells


# --------------------------------------------------------------------------- gen.compare


def evaluated(tmp_path: Path, name: str, script: Any, bank: Any) -> Any:
    """An ``evaluate`` run of ``bank`` by a served model answering with ``script``."""
    with Loopback(script, delay=0) as srv:
        return gen.run(
            "evaluate",
            input=bank,
            out=tmp_path / name,
            llm=served(srv.url),
            cache_dir=None,
            progress="off",
        )


def test_compare_lines_two_evaluate_runs_up_item_by_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nocontext_runs import always_a
    from scipy.stats import binomtest

    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    bank = leaky_bank(tmp_path / "items.jsonl")
    rows = read_jsonl(bank)
    knows = evaluated(tmp_path, "knows", knows_giveaways, str(bank))
    first = evaluated(tmp_path, "first", always_a, pl.DataFrame(rows))
    cmp = gen.compare(knows, first.path)

    truth = {r["item_id"]: r for r in rows}
    a = {r["item_id"]: r["correct"] for r in read_jsonl(knows.records_path)}
    b = {r["item_id"]: r["correct"] for r in read_jsonl(first.records_path)}
    assert cmp.n == 12 and cmp.names == ("knows", "first")
    # always a) is right exactly where the answer is the first option
    assert b == {k: truth[k]["answer"] == 0 for k in truth}
    assert cmp.accuracy == (round(sum(a.values()) / 12, 4), round(sum(b.values()) / 12, 4))
    assert cmp.agreement == round(sum(a[k] == b[k] for k in a) / 12, 4)
    only_a = sum(a[k] and not b[k] for k in a)
    only_b = sum(b[k] and not a[k] for k in a)
    assert cmp.discordant == (only_a, only_b) and only_a + only_b > 0
    assert cmp.p_value == round(binomtest(only_a, only_a + only_b, 0.5).pvalue, 6)
    goal = [k for k in truth if truth[k]["question_type"] == "goal"]
    assert cmp.by_type["goal"] == {
        "n": len(goal),
        "knows": round(sum(a[k] for k in goal) / len(goal), 4),
        "first": round(sum(b[k] for k in goal) / len(goal), 4),
    }
    df = cmp.to_polars()
    assert df.height == 12 and dict(zip(df["item_id"], df["first_correct"], strict=True)) == b
    page = _Html(cmp._repr_html_())
    assert page.cells[page.cells.index("items matched") + 1] == "12"
    assert page.cells[page.cells.index("McNemar exact p") + 1] == str(cmp.p_value)
    assert "goal" in page.cells and "belief" in page.cells

    # a run of other items: not one bank, and the message says how many matched
    other = evaluated(tmp_path, "other", always_a, rows[:10] + [{**rows[10], "item_id": "new"}])
    with pytest.raises(GenError) as e:
        gen.compare(knows, other)
    assert str(e.value) == (
        "compare: the runs are not of one bank: 10 items matched, 2 only in a (e.g. item10), "
        "1 only in b (e.g. new)"
    )


def test_compare_refuses_records_without_a_right_or_wrong_answer(tmp_path: Path) -> None:
    out = tmp_path / "personas"
    out.mkdir()
    (out / "personas.jsonl").write_text('{"persona_id": "p", "bio": "x"}\n')
    (out / "manifest.json").write_text(
        json.dumps(
            {"generator": "personas", "records": {"file": "personas.jsonl", "kind": "personas"}}
        )
    )
    with pytest.raises(InputError, match="says no per-item right or wrong answer"):
        gen.compare(out, out)
