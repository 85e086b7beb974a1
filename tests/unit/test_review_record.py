"""``review`` of a kind that is not MCQ-shaped (a lab's plugin kind, declared in this file and
put in the kinds registry): the generic ``record`` layout shows its fields as the kind declares
them, its privileged fields behind the reveal, everything escaped; the generic rubric rates it
(or the one the kind ships), and labels save through the web app."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from gen import kinds
from gen.errors import InputError
from gen.formats.labels import read_label_file
from gen.generators.review import ReviewConfig, plan
from gen.generators.review.items import load_items, render
from gen.generators.review.server import TOKEN_HEADER, Session, make_app


class FieldNote(BaseModel):
    """A lab's own record: what an annotator noted at a place (no question, no options)."""

    note_id: str
    """The note's id in its run."""
    place: str
    """Where the note was taken."""
    text: str
    """What the annotator wrote."""
    objects: list[dict[str, Any]]
    """The objects the note names, each ``{name, count}``."""
    verified_by: str
    """PRIVILEGED: who checked the note against the footage."""


NOTE = kinds.Kind(
    name="field_note",
    record=FieldNote,
    files=("field_notes.jsonl",),
    help="field_note (a test plugin): an annotator's note of a place.",
)
NOTES = [
    {
        "note_id": "n-1",
        "place": "the kitchen",
        "text": "Two mugs by the kettle <script>alert('x')</script> & a spoon.",
        "objects": [{"name": "mug", "count": 2}, {"name": "spoon", "count": 1}],
        "verified_by": "rater-7",
    },
    {
        "note_id": "n-2",
        "place": "the hallway",
        "text": "Keys in the bowl.",
        "objects": [{"name": "keys", "count": 1}],
        "verified_by": "rater-9",
    },
]


@pytest.fixture()
def field_note(monkeypatch: pytest.MonkeyPatch) -> kinds.Kind:
    """The kind registered as a plugin's entry point would register it."""
    monkeypatch.setattr(kinds, "_KINDS", {**kinds._load(), NOTE.name: NOTE})
    return NOTE


def notes_folder(folder: Path, records: list[dict[str, Any]] = NOTES) -> Path:
    folder.mkdir(parents=True)
    (folder / "field_notes.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records), encoding="utf-8"
    )
    return folder


def sides(page: str) -> tuple[str, str]:
    """The candidate's side and the privileged side of an item's HTML (the findings apart)."""
    at = page.index('<section class="privileged">')
    return page[:at], page[at : page.index('<section class="findings')]


def test_a_kind_declares_the_record_layout_by_default() -> None:
    assert NOTE.view == "record"
    assert kinds.MCQKind(name="quiz").view == "mcq"
    assert kinds.require("digital").view == "digital"
    assert kinds.require("scenarios").view == "scenarios"
    assert all(kinds.require(k).view == "mcq" for k in ("tom", "distractors", "mcq"))


def test_review_fields_follow_the_record_model(field_note: kinds.Kind) -> None:
    fields = field_note.review_fields({**NOTES[0], "extra": None})
    assert [f.key for f in fields] == [*FieldNote.model_fields, "extra"]
    by_key = {f.key: f for f in fields}
    assert by_key["place"].doc == "Where the note was taken." and by_key["place"].label == "place"
    assert by_key["note_id"].label == "note id"
    # a nested value as indented JSON, a missing description empty, null as JSON
    assert json.loads(by_key["objects"].value) == NOTES[0]["objects"]
    assert by_key["objects"].value.startswith('[\n  {\n    "name": "mug"')
    assert (by_key["extra"].value, by_key["extra"].doc) == ("null", "")
    assert [f.key for f in fields if f.privileged] == ["verified_by"]
    # a kind that names its privileged fields overrides the descriptions
    named = kinds.Kind(name="field_note", record=FieldNote, privileged=("place",))
    assert [f.key for f in named.review_fields(NOTES[0]) if f.privileged] == ["place"]


def test_a_plugin_kind_is_reviewed_field_by_field_with_its_privileged_side_apart(
    field_note: kinds.Kind, tmp_path: Path
) -> None:
    folder = notes_folder(tmp_path / "run")
    items, files = load_items(folder)
    assert files == [folder / "field_notes.jsonl"]
    assert [(it.kind, it.layout, it.record_id) for it in items] == [
        ("field_note", "record", None),
        ("field_note", "record", None),
    ]
    assert [it.item_id for it in items] == [field_note.item_id(r) for r in NOTES]  # the bank's
    seen, hidden = sides(render(items[1]))
    # every field but the privileged one, in the model's order, with its description
    assert [html.unescape(x) for x in _headings(seen)] == ["note id", "place", "text", "objects"]
    assert '<h3 title="Where the note was taken.">place</h3>' in seen
    assert '<pre class="field">the hallway</pre>' in seen
    assert "rater-9" not in seen and "verified by" not in seen
    assert "<h4" in hidden and ">verified by</h4>" in hidden and ">rater-9</pre>" in hidden
    assert "PRIVILEGED: who checked the note against the footage." in hidden


def _headings(page: str) -> list[str]:
    import re

    return re.findall(r"<h3[^>]*>([^<]*)</h3>", page)


def test_a_script_in_a_record_field_is_text(field_note: kinds.Kind, tmp_path: Path) -> None:
    items, _ = load_items(notes_folder(tmp_path / "run"))
    page = render(items[0])
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; a spoon." in page


def test_labels_of_a_record_kind_save_on_the_generic_rubric(
    field_note: kinds.Kind, tmp_path: Path
) -> None:
    from starlette.testclient import TestClient

    folder = notes_folder(tmp_path / "run")
    data = plan(ReviewConfig(input=str(folder), reviewer="alice", cache_dir=None)).data
    rubric = data.rubrics["field_note"]
    assert list(data.rubrics) == ["field_note"] and rubric.name == "record-generic"
    assert [f.key for f in rubric.fields] == ["correct", "well_formed", "consistent", "usable"]
    session = Session(folder, data.items, "alice", data.rubrics)
    client = TestClient(make_app(session), base_url="http://127.0.0.1")
    auth = {TOKEN_HEADER: session.token}
    listed = client.get("/api/items", headers=auth).json()
    assert [it["kind"] for it in listed["items"]] == ["field_note", "field_note"]
    assert listed["rubrics"]["field_note"]["name"] == "record-generic"
    page = client.get("/api/item/0", headers=auth).json()["html"]
    assert "the kitchen" in sides(page)[0] and "rater-7" in sides(page)[1]
    item_id = data.items[0].item_id
    ok = client.post(
        "/api/label",
        json={"item_id": item_id, "scores": {"correct": 3, "usable": 2}, "decision": "accept"},
        headers=auth,
    )
    assert ok.status_code == 200, ok.text
    bad = client.post(
        "/api/label", json={"item_id": item_id, "scores": {"inferable": 1}}, headers=auth
    )
    assert bad.status_code == 400 and "not a field of rubric record-generic" in bad.text
    (label,) = read_label_file(folder / "reviews" / "alice.jsonl")
    assert (label.item_id, label.rubric, label.scores, label.decision) == (
        item_id,
        "record-generic",
        {"correct": 3, "usable": 2},
        "accept",
    )


def test_a_kind_rates_its_records_with_the_rubric_it_ships(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    own = tmp_path / "pkg" / "review.yaml"
    own.parent.mkdir()
    own.write_text(
        "name: notes\nkinds: [field_note]\nfields:\n"
        "  - {key: place_right, question: 'Is the place right?', labels: ['no', 'yes']}\n",
        encoding="utf-8",
    )
    kind = kinds.Kind(name="field_note", record=FieldNote, files=NOTE.files, rubric=own)
    monkeypatch.setattr(kinds, "_KINDS", {**kinds._load(), kind.name: kind})
    folder = notes_folder(tmp_path / "run")
    data = plan(ReviewConfig(input=str(folder), reviewer="alice", cache_dir=None)).data
    assert data.rubrics["field_note"].name == "notes"
    # rubric= listing "record" rates every kind in the record layout
    given = tmp_path / "mine.yaml"
    given.write_text(
        "name: mine\nkinds: [record]\nfields:\n"
        "  - {key: ok, question: 'Fine?', labels: ['no', 'yes']}\n",
        encoding="utf-8",
    )
    cfg = ReviewConfig(input=str(folder), reviewer="alice", rubric=str(given), cache_dir=None)
    assert plan(cfg).data.rubrics["field_note"].name == "mine"
    # a kind's rubric that rates other kinds is refused, naming the file
    own.write_text(own.read_text().replace("[field_note]", "[mcq]"), encoding="utf-8")
    with pytest.raises(InputError, match=r"review\.yaml, the rubric of kind field_note"):
        plan(ReviewConfig(input=str(folder), reviewer="alice", cache_dir=None))


def test_a_bank_of_a_record_kind_is_reviewed_by_version(
    field_note: kinds.Kind, tmp_path: Path
) -> None:
    """``bank add`` takes the plugin kind's records (the audit is the stand-in of
    tests/bank_runs.py), and the bank's version is reviewed in the record layout."""
    from bank_runs import REGISTRY, Bank, standin_audit

    real = standin_audit()
    try:
        bank = Bank(tmp_path)
        assert bank.add(notes_folder(tmp_path / "run"))[0].accepted == 2
    finally:
        if real is not None:
            REGISTRY["audit"] = real
    data = plan(ReviewConfig(input=str(bank.root), reviewer="alice", cache_dir=None)).data
    assert [f.name for f in data.files] == ["MANIFEST.lock.json", "field_note.parquet"]
    assert [(it.kind, it.layout) for it in data.items] == [("field_note", "record")] * 2
    assert {it.item_id for it in data.items} == {field_note.item_id(r) for r in NOTES}
    shown = [sides(render(it)) for it in data.items]
    assert any("Keys in the bowl." in seen for seen, _ in shown)
    assert all("rater-" not in seen and "rater-" in hidden for seen, hidden in shown)
    assert data.rubrics["field_note"].name == "record-generic"
