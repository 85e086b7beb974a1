"""Prompt files: role markers, StrictUndefined, exact rendering, hashes for the manifest."""

from __future__ import annotations

import hashlib
from pathlib import Path

import jinja2
import pytest
from conftest import persona_facts

from gen.errors import ConfigError
from gen.paths import PROMPTS
from gen.templates import Prompts, split_messages

BIO = "personas/bio.jinja"


def test_split_messages_on_role_markers() -> None:
    text = "[system]\nBe brief.\n[user]\nShow me.\n[assistant]\nLike this.\n[user]\nNow you.\n"
    assert split_messages(text) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Show me."},
        {"role": "assistant", "content": "Like this."},
        {"role": "user", "content": "Now you."},
    ]


def test_split_messages_text_before_a_marker_is_user() -> None:
    assert split_messages("Hello there.\n[system]\nSys.") == [
        {"role": "user", "content": "Hello there."},
        {"role": "system", "content": "Sys."},
    ]
    assert split_messages("Just a question.") == [{"role": "user", "content": "Just a question."}]
    assert split_messages("   \n") == []


def test_split_messages_markers_only_on_their_own_line() -> None:
    text = "[user]\nWrite [user] and [system] inline.\n  [assistant]\nnot a marker either"
    assert split_messages(text) == [
        {
            "role": "user",
            "content": "Write [user] and [system] inline.\n  [assistant]\nnot a marker either",
        },
    ]
    # unknown roles are plain text
    assert split_messages("[tool]\nx") == [{"role": "user", "content": "[tool]\nx"}]


def test_split_messages_keeps_inner_newlines() -> None:
    msgs = split_messages("[user]\nline one\n\nline two\n")
    assert msgs == [{"role": "user", "content": "line one\n\nline two"}]


def test_bio_prompt_renders_exactly() -> None:
    messages = Prompts().render(BIO, p=persona_facts(), pronoun="he")
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == (
        "You write short, factual third-person profiles of people for a dataset. "
        "Use only the facts given. Reply with JSON."
    )
    assert messages[1]["content"] == (
        "Facts about the person:\n"
        "- Name: Jonas Becker\n"
        "- Age: 34\n"
        '- Gender: male (refer to them as "he")\n'
        "- Nationality: German\n"
        "- Lives in: Berlin, Germany\n"
        "- Occupation: Software engineer at Müller GmbH\n"
        "- Interests: hiking, chess, jazz\n"
        "- Languages: German, English\n"
        "\n"
        "Write a bio of two or three sentences about Jonas: daily life, work or studies, and what "
        'he enjoys. Start with "Jonas". Do not add a different age, city or nationality.'
    )


def test_bio_prompt_student_shows_school_not_employer() -> None:
    facts = persona_facts(
        status="student",
        occupation="law student",
        employer=None,
        school="University of Berlin",
        age=20,
    )
    user = Prompts().render(BIO, p=facts, pronoun="they")[1]["content"]
    assert "- Occupation: law student at University of Berlin\n" in user
    assert "Müller" not in user
    assert '(refer to them as "they")' in user and "what they enjoys" in user


def test_missing_variable_fails_loudly() -> None:
    with pytest.raises(jinja2.UndefinedError, match="pronoun"):
        Prompts().render(BIO, p=persona_facts())
    with pytest.raises(jinja2.UndefinedError):
        Prompts().render(BIO, pronoun="he")


def test_missing_attribute_fails_loudly(tmp_path: Path) -> None:
    (tmp_path / "t.jinja").write_text("[user]\n{{ p.nickname }}\n")
    with pytest.raises(jinja2.UndefinedError, match="nickname"):
        Prompts(tmp_path).render("t.jinja", p=persona_facts())


def test_used_records_sha256() -> None:
    prompts = Prompts()
    assert prompts.used == {}
    prompts.render(BIO, p=persona_facts(), pronoun="he")
    expected = hashlib.sha256((PROMPTS / BIO).read_bytes()).hexdigest()
    assert prompts.used == {BIO: expected}
    assert prompts.hash(BIO) == expected


def test_used_tracks_included_partials(tmp_path: Path) -> None:
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "rules.jinja").write_text("Be exact.\n")
    # trim_blocks eats the newline after the include tag, so a blank line follows it
    (tmp_path / "main.jinja").write_text(
        '[system]\n{% include "parts/rules.jinja" %}\n\n[user]\n{{ q }}\n'
    )
    prompts = Prompts(tmp_path)
    msgs = prompts.render("main.jinja", q="Why?")
    assert msgs == [{"role": "system", "content": "Be exact."}, {"role": "user", "content": "Why?"}]
    assert set(prompts.used) == {"main.jinja", "parts/rules.jinja"}
    assert prompts.used["parts/rules.jinja"] == hashlib.sha256(b"Be exact.\n").hexdigest()


def test_hash_follows_file_content(tmp_path: Path) -> None:
    (tmp_path / "t.jinja").write_text("[user]\nv1\n")
    prompts = Prompts(tmp_path)
    first = prompts.hash("t.jinja")
    (tmp_path / "t.jinja").write_text("[user]\nv2\n")
    assert prompts.hash("t.jinja") != first
    assert prompts.used["t.jinja"] == hashlib.sha256(b"[user]\nv2\n").hexdigest()


def test_missing_template_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.jinja"):
        Prompts(tmp_path).render("nope.jinja")


def test_every_shipped_prompt_names_its_inputs() -> None:
    """STYLE 3: each template starts with a comment naming its inputs."""
    templates = sorted(PROMPTS.rglob("*.jinja"))
    assert templates
    for path in templates:
        first = path.read_text(encoding="utf-8").lstrip()
        assert first.startswith("{#"), path
        assert "input" in first.split("#}", 1)[0].lower(), path
