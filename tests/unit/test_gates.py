"""The shared text gates (gen.text.gates): each gate on planted positives (the issue's real failures
of the embedded model among them) and on clean text, the runner and the audit function; false
alarms measured on EgoToM's released options (skipped without ../shared). The tagger they read:
test_tagging.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gen.schemas.tom import AnalysisDraft, WrongGoalsDraft
from gen.templates import Prompts
from gen.text.gates import (
    _WEB,
    _WEB_HINT,
    GATES,
    KIND_GATES,
    Gates,
    count_key,
    final_mark,
    schema_fields,
    with_mark,
)
from gen.text.surface import infinitive
from gen.text.textaudit import AuditText, audit_texts, bank_texts

EGOTOM = Path(__file__).resolve().parents[3] / "shared" / "data" / "egotom_paper"


def fails(text: str, kind: str, gates: Gates | None = None, **kw) -> str | None:
    failure = (gates or Gates()).check(text, kind, **kw)  # type: ignore[arg-type]
    return failure.gate if failure else None


@pytest.mark.parametrize(
    ("text", "mark", "out"),
    [
        ("C opens the door", ".", "C opens the door."),
        ("C opens the door!?", "?", "C opens the door?"),
        ("C sits\u2026", ".", "C sits."),
        ("C sits...", "!", "C sits!"),
        ('C says "ok"', ".", 'C says "ok".'),  # bare inside quotes: the mark goes after them
        ('C says "ok!"', ".", 'C says "ok!"'),  # the quote's own mark stays
        ("C waves (at Ann)", "?", "C waves (at Ann)?"),
        ("", ".", ""),
    ],
)
def test_with_mark_leaves_no_text_of_a_set_without_a_mark(text: str, mark: str, out: str) -> None:
    assert with_mark(text, mark) == out
    assert not text or final_mark(out)  # ends_bare can never tell an option from the others


# ------------------------------------------------------------------------ the issue's seven options


@pytest.mark.parametrize(
    ("text", "kind", "gate"),
    [
        (
            "C to choose your own goals and tasks, 2, next_actions_31, and next_actions_32.",
            "action",
            "schema_echo",
        ),
        (
            "C picks up the exercise mat and lifts the exercise mat in the air, p.",
            "action",
            "truncated_text",
        ),
        ("C to choose the one you want to do and puts it down.", "action", "surface_form"),
        ("To the laundry detergent was used to clean the pot.", "goal", "surface_form"),
        ("To tie shoes, not with shoes but with shoes.", "goal", "repetition"),
        ("C believes the mat on the floor.", "belief", "surface_form"),
        ("C believes that cleaning the pot.", "belief", "surface_form"),
    ],
)
def test_the_issues_failures_are_refused(text: str, kind: str, gate: str) -> None:
    assert fails(text, kind) == gate


def test_schema_field_names_and_identifiers() -> None:
    g = Gates(schema=AnalysisDraft)
    assert {"transition_line", "future_goal", "next_actions", "belief"} <= g.context.fields
    assert fails("C picks up next_actions and the mat.", "action", g) == "schema_echo"
    assert fails("C believes that belief: the pot is hot.", "belief", g) == "schema_echo"
    assert fails('C believes that "belief" the pot is hot.', "belief", g) == "schema_echo"
    # an e-mail address, a handle or a file name is not machinery; a field's word in prose is fine
    for ok in (
        "Mail john_doe@example.com the invoice",
        "Follow @green_garden for tips",
        "Send report_final.pdf today",
        "Her belief in the plan is strong",
    ):
        assert fails(ok, "prose", g) is None, ok
    assert schema_fields(WrongGoalsDraft) == {"wrong_goals"}


@pytest.mark.parametrize(
    "text",
    [
        "Dinner with {name}",
        "Call {{ person }} back",
        "Lunch with <name>",
        "Meet [NAME] at noon",
        "Send [your address] to the shop",
        "Ask ${friend} today",
    ],
)
def test_template_variables(text: str) -> None:
    assert fails(text, "title") == "template_echo"


@pytest.mark.parametrize(
    "text",
    [
        "[assistant] Buy milk",
        "Answer: buy milk and eggs",
        "assistant: see you soon",
        "see you <|eot|>",
        "### Response the plan",
    ],
)
def test_fewshot_markers(text: str) -> None:
    assert fails(text, "prose") == "fewshot_marker"


def test_prompt_labels_are_markers_of_that_prompt() -> None:
    messages = [
        {"role": "user", "content": "Person: Ana, 34, nurse in Lisbon.\n1. Topic: a recipe."}
    ]
    g = Gates(messages)
    assert {"person", "topic"} <= g.context.labels
    assert fails("Topic: lemon cake for Sunday", "prose", g) == "fewshot_marker"
    assert fails("Bake the cake. Person: Ana", "prose", g) == "fewshot_marker"
    assert fails("Topic: lemon cake for Sunday", "prose") is None  # no prompt, no labels
    assert fails("Buy lemons for the cake topic", "prose", g) is None


@pytest.mark.parametrize(
    "text",
    [
        '{"title": "Dinner"',
        'Dinner", "location": "home',
        "Dinner}",
        r"Line one\nline two",
        '["eggs", "milk"]',
    ],
)
def test_json_fragments(text: str) -> None:
    assert fails(text, "prose") in (
        "json_fragment",
        "truncated_text",
    ) and "json_fragment" in _all_failures(text, "prose")


def _all_failures(text: str, kind: str) -> set[str]:
    from dataclasses import replace

    ctx = Gates().context
    return {
        name for name in KIND_GATES[kind] if GATES[name](text, replace(ctx, kind=kind)) is not None
    }


def test_numbering() -> None:
    assert fails("1. Groceries for the week", "title") == "numbering"
    assert fails("b) Groceries for the week", "title") == "numbering"
    assert fails("Option B: buy the blue one", "prose") == "numbering"
    assert fails("C picks up the tasks, 2, and the mat.", "action") == "numbering"
    # a numbered list is content in prose; house numbers in addresses; counts among numbers
    assert fails("1. eggs 2. milk 3. bread", "prose") is None
    assert fails("Strada Serafina, 1, Rome, Italy", "name") is None
    assert fails("Mitchell Higgins, 61, is a museum conservator in London.", "sentence") is None
    assert fails("Read chapters 3, 4, 5 tonight", "prose") is None
    assert fails("Table for 4, 7 pm at Luigi's", "prose") is None


def test_few_shot_answer_and_prompt_copies() -> None:
    messages = Prompts().render(
        "tom/goals.jinja", lines=["1. 00m:01s | #C C opens the fridge."], goal="To cook."
    )
    g = Gates(messages, WrongGoalsDraft)
    assert (
        fails("To throw away the wilted plant.", "goal", g) == "example_echo"
    )  # the one-shot's wrong goal
    assert (
        fails("To make the actual goal hard to pick out.", "goal", g) == "prompt_echo"
    )  # the instructions
    assert fails("To clean the kitchen table.", "goal", g) is None
    kept = Gates(messages, WrongGoalsDraft, keep_out=["make the actual goal hard to pick out"])
    assert fails("To make the actual goal hard to pick out.", "goal", kept) is None


# --------------------------------------------------------------------------- truncation


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Pick up the dry cleaning and the", "prose"),
        ("C wants the pot to", "action"),
        ("C picks up the mat and puts it on the", "action"),
        ("Dinner with (Maria", "title"),
        ('She said "see you', "prose"),
        ("Bring the cake and", "title"),
        ("Meet at the café for a", "prose"),
        ("Ana is a nurse in Lisbon who loves hiking and", "sentence"),
        (
            "Ana is a nurse in Lisbon who loves hiking",
            "sentence",
        ),  # a sentence needs its final stop
    ],
)
def test_truncated_text(text: str, kind: str) -> None:
    assert fails(text, kind) == "truncated_text"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Flour 200 g", "prose"),
        ("Novotná Kučera a.s.", "name"),
        ("Meet at 5 p.m.", "prose"),
        ("C believes that the drink helps talk with lady x.", "belief"),
        ("Want to?", "prose"),
        ("Sure, happy to.", "prose"),
        ("C picks up a plumb bob and consults with A.", "action"),
        ("Plan B", "title"),
        ("Vitamin D", "title"),
        ("Arturo Martín", "name"),
        ("Hilayda Erdoğan", "name"),
        ("Ana is a nurse in Lisbon.", "sentence"),
    ],
)
def test_not_truncated(text: str, kind: str) -> None:
    assert fails(text, kind) is None


def test_length_cap_means_stopped_for_length() -> None:
    raw = "x" * 20 + " wash the dishes and dry them on the rack by the window now"
    assert len(raw) < 100
    assert fails("To wash the dishes.", "goal", raw=raw[:64], max_chars=64) == "truncated_text"
    assert fails("To wash the dishes.", "goal", raw="wash the dishes", max_chars=64) is None


# --------------------------------------------------------------------------- surface form


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("To a new project.", "goal"),
        ("Washing the dishes.", "goal"),
        ("C the mat on the floor.", "action"),
        ("C mat.", "action"),
        ("C believes that the mat to clean.", "belief"),
        ("the soup is ready", "belief"),
        ("the pot on the stove", "phrase"),
        ("Ana and her old friends in Lisbon.", "sentence"),
    ],
)
def test_surface_form_refuses(text: str, kind: str) -> None:
    assert fails(text, kind) == "surface_form"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("To thoroughly clean and dry the pan.", "goal"),
        ("To season and marinate meat for grilling.", "goal"),
        ("To water the plants.", "goal"),
        ("C sands the board, wipes it, and paints it.", "action"),
        ("C waters the plants.", "action"),
        ("C believes the pot is hot.", "belief"),
        ("C believes that there is no more flour.", "belief"),
        ("turns off the stove", "phrase"),
        ("Ana works as a nurse in Lisbon.", "sentence"),
    ],
)
def test_surface_form_accepts(text: str, kind: str) -> None:
    assert fails(text, kind) is None


def test_infinitive_of_a_gerund_goal() -> None:
    assert infinitive("Washing the dishes") == "wash the dishes"
    assert infinitive("Making bread") == "make bread"
    assert infinitive("wash the dishes") is None


# --------------------------------------------------------------------------- repetition, language


@pytest.mark.parametrize(
    "text",
    [
        "no, no, no, no, no",
        "walk the dog walk the dog walk the dog",
        "cook the soup in the pot and cook the soup in the pot",
        "To fix, fix and fix, fix the bike.",
        "go see go see go see go see",
    ],
)
def test_repetition(text: str) -> None:
    assert fails(text, "prose") == "repetition"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        (
            "To make a new dish for the family.com.",
            "goal",
        ),  # accepted by tom on the fixture before this gate
        ("C opens www.recipes for the soup.", "action"),
        ("C believes that the recipe is on https://food.example/soup.", "belief"),
        ("C writes to anna@mail.org about the plant.", "action"),
    ],
)
def test_web_fragments_in_option_forms(text: str, kind: str) -> None:
    assert fails(text, kind) == "web_fragment"


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("C picks the 2.5 kg bag of rice.", "action"),
        (
            "To read a message from amazon.com.",
            "prose",
        ),  # not an option form: a message may hold one
        ("C puts the lid on the pot. C stirs.", "action"),
    ],
)
def test_no_web_fragment(text: str, kind: str) -> None:
    assert fails(text, kind) != "web_fragment"


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from(["www", "http", "https", "://", ".", "@", "com", "Co", "HTML", "io", "php"])
        | st.text(alphabet="aZ9_.-+@/: é", max_size=6),
        max_size=8,
    ).map("".join)
)
def test_the_web_hint_holds_every_web_match(text: str) -> None:
    """The gate searches only texts its hint finds: every web-address match holds it."""
    assert _WEB.search(text) is None or _WEB_HINT.search(text) is not None, text


def test_repetition_allows_an_object_per_verb() -> None:
    assert (
        fails("C peels the carrot, cuts the carrot, and puts the carrot in the bowl.", "action")
        is None
    )
    assert fails("C lifts the plants, moves the plants, touches the plants.", "action") is None


def test_language() -> None:
    assert fails("Il fait beau aujourd'hui, on va au parc cet après-midi?", "prose") == "language"
    assert fails("Reunión con el equipo de ventas mañana por la tarde", "title") == "language"
    assert fails("Reunión con equipo", "title") is None  # too short to judge
    assert fails("La Vie en Rose en concert", "name") is None  # names come in every language
    assert fails("Dinner with Maria at Café de Flore tonight", "prose") is None
    assert (
        fails(
            "Il fait beau aujourd'hui, on va au parc cet après-midi?", "prose", Gates(language="fr")
        )
        is None
    )
    with pytest.raises(ValueError, match="language"):
        Gates(language="tlh")
    from gen.generators.digital import DigitalConfig
    from gen.generators.personas import PersonasConfig
    from gen.generators.tom import TomConfig

    for config in (TomConfig, DigitalConfig, PersonasConfig):  # a bad language fails at config time
        with pytest.raises(ValueError, match="language 'tlh' is not one"):
            config(input="x", language="tlh")


# --------------------------------------------------------------------------- the runner


def test_runner_reports_the_first_failure_and_counts_by_name() -> None:
    failure = Gates().check("To the {goal} and", "goal")
    assert (
        failure is not None and failure.gate == "template_echo"
    )  # template before truncation and form
    assert failure.key("counterfactual_goals") == "counterfactual_goals.gate.template_echo"
    assert count_key("Notes", "repetition", "dropped") == "Notes.gate.repetition.dropped"
    assert count_key("Notes", "placeholder_text", "dropped") == "Notes.placeholder_text.dropped"
    assert Gates().check("   ", "prose") is None  # blank text is the generator's empty-text check
    assert list(KIND_GATES["name"]) == [
        g for g in GATES if g in KIND_GATES["name"]
    ]  # registry order


# -------------------------------------------------------------------------- audits and false alarms


def test_audit_texts_counts_per_gate_with_examples() -> None:
    texts = [
        AuditText(
            "q1", "options[0]", "To the laundry detergent was used to clean the pot.", "goal"
        ),
        AuditText("q1", "options[1]", "To clean the pot.", "goal"),
        AuditText("q2", "options[0]", "C to choose your own goals, next_actions_31.", "action"),
        AuditText("q2", "options[1]", "C picks up the mat in the air, p.", "action"),
        AuditText("q3", "options[0]", "C believes the mat on the floor.", "belief"),
        AuditText("q3", "question", "What will C most likely do next?", "prose"),
    ]
    report = audit_texts(texts, examples_per_gate=1)
    assert (report.checked, report.failed) == (6, 4)
    assert report.by_gate == {"schema_echo": 1, "surface_form": 2, "truncated_text": 1}
    assert report.examples["surface_form"] == [
        {
            "item_id": "q1",
            "field": "options[0]",
            "detail": report.examples["surface_form"][0]["detail"],
            "text": "To the laundry detergent was used to clean the pot.",
        }
    ]
    assert report.as_dict()["by_gate"] == report.by_gate


def test_bank_texts_reads_forms_from_question_types() -> None:
    from gen.schemas.mcq import MCQ

    items = [
        MCQ(
            item_id="a",
            question_type="goal",
            question="What is C's future goal?",
            options=["To cook.", "To the pot."],
            answer=0,
            line=0,
        ),
        MCQ(
            item_id="b",
            question_type="similar",
            question="Which goal?",
            options=["Buy milk", "Call mum"],
            answer=1,
            line=1,
        ),
    ]
    texts = bank_texts(items)
    assert [(t.item_id, t.field, t.kind) for t in texts] == [
        ("a", "question", "prose"),
        ("a", "options[0]", "goal"),
        ("a", "options[1]", "goal"),
        ("b", "question", "prose"),
        ("b", "options[0]", "prose"),
        ("b", "options[1]", "prose"),
    ]
    assert audit_texts(texts).by_gate == {"surface_form": 1}


@pytest.mark.skipif(not EGOTOM.is_dir(), reason="../shared/data/egotom_paper is absent")
def test_egotom_released_options_false_alarms_at_most_one_percent() -> None:
    """EgoToM's 706 released questions: every distinct option through the gates of its form.
    Measured 2026-11-23: 3 of 2,493 distinct options fail the surface-form gate (0.12 %: two
    goals the tagger reads as nouns, "To inventory kitchen supplies.", and "C kneels, …"), and
    18 fail any gate (0.72 %; 14 of them repeat a 4-word object phrase, "the piece of mango")."""
    from gen.kinds.mcq import load_banks

    items = [it for bank in load_banks(EGOTOM) for it in bank.items]
    texts = list({(t.text, t.kind): t for t in bank_texts(items) if t.field != "question"}.values())
    report = audit_texts(texts, examples_per_gate=50)
    assert report.checked > 2400
    assert report.by_gate.get("surface_form", 0) / report.checked <= 0.01, report.examples.get(
        "surface_form"
    )
    assert report.failed / report.checked <= 0.01, report.by_gate
    for gate in (
        "schema_echo",
        "template_echo",
        "fewshot_marker",
        "json_fragment",
        "numbering",
        "language",
        "web_fragment",
    ):
        assert gate not in report.by_gate, report.examples[gate]


def test_audit_texts_never_runs_the_attribute_ruler_over_a_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The audit tags forms' frames and texts whose words come three times with the tagger alone
    (the POS the repetition gate reads comes per word and tag), never with the whole pipeline
    (attribute ruler and lemmatizer over every text); the findings stay."""
    from gen.text import tagging

    whole: list[str] = []
    remember = tagging._remember
    monkeypatch.setattr(
        tagging, "_remember", lambda text, docs: whole.append(text) or remember(text, docs)
    )
    texts = [
        AuditText("i1", "options[0]", "C rinses a plate in the sink.", "action"),
        AuditText("i1", "options[1]", "C the cup on a table.", "action"),
        AuditText("i2", "options[0]", "To cook soup with carrots.", "goal"),
        AuditText(
            "i3", "options[0]", "C cuts the carrot, cuts the carrot, cuts the carrot.", "action"
        ),
    ]
    report = audit_texts(texts)
    assert report.by_gate == {"repetition": 1, "surface_form": 1}
    assert [f[1:] for f in report.failures] == [("i1", "options[1]"), ("i3", "options[0]")]
    assert whole == []


# -------------------------------------------------------------------------- the audit at scale


def test_articles_and_conjunctions_never_make_a_text_repeat() -> None:
    """ "The" three times is every other EgoToM-shaped option: such a text is not tagged whole for
    the content-word rule; a noun three times still is, and still fails."""
    from gen.text.gates import could_repeat, is_content

    assert not could_repeat("C picks the cup on the table, pours the bowl, and wipes the lid.")
    assert not could_repeat("C takes a cup and a plate and a bowl or a spoon of the tray.")
    assert could_repeat("C peels the carrot, cuts the carrot, and puts the carrot in the bowl.")
    assert not is_content("The", "NOUN") and is_content("carrot", "NOUN")
    assert fails("To tie shoes, not with shoes but with shoes.", "goal") == "repetition"


def test_the_audit_gates_each_distinct_text_once_in_any_number_of_workers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bank repeats its question on every item: it is gated once; a pool of workers gives the
    same report, in the bank's order."""
    from gen.text import textaudit

    seen: list[str] = []
    verdicts = textaudit._verdicts
    monkeypatch.setattr(
        textaudit,
        "_verdicts",
        lambda texts, language: seen.extend(t for t, _ in texts) or verdicts(texts, language),
    )
    monkeypatch.setattr(textaudit, "AUDIT_CHUNK", 3)
    texts = [
        x
        for i in range(4)
        for x in (
            AuditText(f"q{i}", "question", "What will C most likely do next?", "prose"),
            AuditText(f"q{i}", "options[0]", "C rinses a plate in the sink.", "action"),
            AuditText(f"q{i}", "options[1]", f"C the cup on table {i}.", "action"),
        )
    ]
    one = audit_texts(texts, examples_per_gate=10)
    assert sorted(seen) == sorted({t.text for t in texts})
    monkeypatch.setattr(textaudit, "_verdicts", verdicts)  # the pool sends it by name
    two = audit_texts(texts, examples_per_gate=10, workers=2)
    assert two == one and one.checked == 12
    assert [f[1:] for f in one.failures] == [(f"q{i}", "options[1]") for i in range(4)]


def test_the_pool_gets_each_head_from_one_worker() -> None:
    """Texts whose surface-form gate reads the same head go to the same worker (its head cache
    serves them all); texts spread over the workers; none is lost or doubled."""
    from gen.text.surface import carrier
    from gen.text.tagging import head_read
    from gen.text.textaudit import _by_head

    verbs = ["assemble", "wash", "fold", "carry", "open", "move"]
    things = ["the box", "the red cup", "a towel", "the lid of the jar"]
    texts = [
        (f"To {v} {t} and the mop in the cupboard {place}.", "goal")
        for v in verbs
        for t in things
        for place in ("now", "later", "by the sink on the left")
    ] + [("What will C most likely do next?", "prose")]
    parts = _by_head(texts, 3)
    assert sorted(t for p in parts for t in p) == sorted(texts)
    assert sum(1 for p in parts if p) >= 2
    where: dict[str, int] = {}
    for k, part in enumerate(parts):
        for text, kind in part:
            c = carrier(text, kind)
            if c is not None:
                assert where.setdefault(head_read(*c), k) == k
    assert len(where) < len(texts) - 1  # heads are shared: the test compares something
