"""The text check's exact shortcuts give what the slow way gives: a text's tokens read chunk by
chunk (``gen.text.tagging.words``), the repetition gate's pre-check (``could_repeat``), and the
languages cleared in a batch (``gen.text.language.warm_language``)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SHARED
from hypothesis import given, settings
from hypothesis import strategies as st


def _whole(text: str) -> list[str]:
    """The tokenizer over each whole part of ``text`` (what :func:`tagging.words` must give)."""
    from gen.text import tagging

    return [w for part in tagging._parts(text) for w in tagging._tokenize(part)]


def _pieces() -> Any:
    """Chunks a text is made of: words, marks, and the tokenizer's special cases, which its
    matcher finds across tokens (":)", "a.m.", "o'clock", "(:")."""
    from gen.text import tagging

    specials = sorted(r for r in tagging.tagger().tokenizer.rules if not r.isspace())
    marks = list(".,;:!?'’\"()[]-/<>=*_^")
    return st.one_of(
        st.sampled_from(specials),
        st.sampled_from(marks),
        st.sampled_from(["C", "the", "cup", "don't", "cannot", "gonna", "U.S.", "10km", "a.m"]),
        st.lists(st.sampled_from(specials + marks + ["m", "cup", "C"]), min_size=2, max_size=3).map(
            "".join
        ),
    )


def test_words_of_a_text_are_its_chunks_tokens_or_the_whole_texts() -> None:
    """A text's tokens are read chunk by chunk (each space-separated chunk tokenized once): they
    equal the tokenizer's over the whole text, whose special-case matcher may join tokens across
    a space ("a.m ." next to a special case), on texts made of the tokenizer's own special cases
    and marks and on EgoToM's released options."""
    import csv

    from gen.text import tagging

    @settings(max_examples=600, deadline=None, database=None)
    @given(st.lists(_pieces(), min_size=1, max_size=8))
    def same(pieces: list[str]) -> None:
        text = " ".join(pieces)
        assert tagging.words(text) == _whole(text), text

    same()
    for text in ("a.m . :) (: o'clock", "C picks the cup.", "", " C  picks\n", "x " * 5):
        assert tagging.words(text) == _whole(text)
    shared = SHARED / "data" / "egotom_paper"
    if not shared.is_dir():
        pytest.skip("shared EgoToM data absent")
    texts = {
        row[k]
        for path in sorted(shared.glob("egotom_*_shuffled.csv"))
        for row in csv.DictReader(path.open(encoding="utf-8"))
        for k in row
        if "choice" in k or k.startswith("gt_")
    }
    assert len(texts) > 1000
    tagging._CHUNK_TOKENS.clear()
    assert [tagging.words(t) for t in sorted(texts)] == [_whole(t) for t in sorted(texts)]


def test_could_repeat_counts_as_a_counter_of_the_word_tokens_does() -> None:
    """Its shortcut (fewer than two repeats: no word three times) and its per-token memo give a
    plain count's answer, case folded, marks, numbers and function words left out."""
    from collections import Counter

    from gen.text.gates import _WORD, FUNCTION_WORDS, could_repeat
    from gen.text.tagging import words

    def counted(text: str) -> bool:
        low = [w.lower() for w in words(text) if _WORD.fullmatch(w)]
        return max(Counter(w for w in low if w not in FUNCTION_WORDS).values(), default=0) >= 3

    texts = [
        "Cup cup CUP.",
        "The the the a a a and and and.",
        "C cuts, C rinses, C dries.",
        "10 10 10 x9 x9 x9",
        "cup, cup; bowl, bowl",
        "It's it's it is",
        "",
        "pan pan pot pot pot",
    ]
    for text in texts:
        could_repeat.cache_clear()
        assert could_repeat(text) == counted(text), text
    assert [could_repeat(t) for t in texts] == [True, False, True, True, False, True, False, True]


FOREIGN = [
    "Il fait beau aujourd'hui, on va au parc cet après-midi?",
    "Ich gehe heute in den Park und kaufe Brot für das Frühstück.",
    "Voy a la tienda a comprar pan y leche para la cena.",
    "Vado al mercato a comprare il pane e la frutta.",
    "Eu vou ao mercado comprar pão e leite hoje.",
    "Ik ga naar de winkel om brood te kopen.",
    "Я иду в магазин за хлебом и молоком.",
    "私は店にパンを買いに行きます。",
    "我要去商店买面包和牛奶。",
    "Jag går till affären och köper bröd.",
    "Idę do sklepu kupić chleb i mleko.",
    "C goes to la tienda para comprar pan.",
    "C opens the fridge und nimmt die Milch heraus.",
]
_WORDS = st.sampled_from(
    "C picks the cup and rinses bowl la tienda para comprar pan und nimmt die Milch "
    "il pane e frutta je vais au marché ik ga naar winkel".split()
)


def test_languages_cleared_in_a_batch_are_those_the_identifier_passes() -> None:
    """The batch that spares most texts the identifier (``warm_language``) clears only texts the
    identifier itself finds in no other language at the gate's confidence: English options,
    foreign sentences and mixtures of the two, near the threshold included; it clears most English
    options (else it would spare nothing) and no foreign sentence."""
    from gen.text import language as identifier
    from gen.text.gates import LANGUAGE_MIN_PROB

    def fires(text: str, language: str) -> bool:
        lang, prob = identifier.identify(text)
        return lang != language and prob >= LANGUAGE_MIN_PROB

    english = [
        f"C {v} the {n} {p} the {m}." if i % 2 else f"To {v} the {n} {p} the {m}."
        for i, (v, n, p, m) in enumerate(
            zip(
                "picks rinses dries wipes opens cuts stirs pours folds moves".split() * 3,
                "cup bowl plate knife lid pan towel board jar spoon".split() * 3,
                ["on", "in", "near", "under", "beside", "from"] * 5,
                "table sink shelf stove drawer counter fridge floor bag box".split() * 3,
                strict=False,
            )
        )
    ]
    for language in ("en", "fr"):
        texts = english + FOREIGN
        identifier._CLEAR.clear()
        identifier.warm_language(texts, language, LANGUAGE_MIN_PROB)
        cleared = [t for t in texts if identifier.is_clear(t, language, LANGUAGE_MIN_PROB)]
        assert not any(fires(t, language) for t in cleared)
        if language == "en":
            assert set(cleared) >= set(english) and not set(cleared) & set(FOREIGN[:-2])

    @settings(max_examples=300, deadline=None, database=None)
    @given(st.lists(st.lists(_WORDS, min_size=4, max_size=12).map(" ".join), min_size=1))
    def mixtures(texts: list[str]) -> None:
        identifier._CLEAR.clear()
        identifier.warm_language(texts, "en", LANGUAGE_MIN_PROB)
        for text in texts:
            if identifier.is_clear(text, "en", LANGUAGE_MIN_PROB):
                assert not fires(text, "en"), text

    mixtures()
