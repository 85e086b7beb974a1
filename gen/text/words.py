"""Content words: the words of a text that name something (what the digital goals' cue checks and
the audit's context-states check compare)."""

from __future__ import annotations

import re

STOPWORDS = frozenset(
    """a an the of to at in on for and or but my me i i'm i'll you your we our us it its this that
these those with from by as is are was were be been am do did does done have has had will would
can could should get go going how what when where which who whom why up out off into over about
next time some any all more most very just than then there here their them they he she his her
him not no yes if so too again still tonight today tomorrow yesterday now please new good great
nice ok okay sure really""".split()
)
"""Words that name nothing: articles, pronouns, auxiliaries, question words, and the time words
and fillers any goal or message may use."""

_WORD = re.compile(r"[a-z0-9][a-z0-9'-]*")


def content_words(text: str) -> list[str]:
    """The words of ``text`` that name something: lowercased, stopwords and bare numbers left
    out."""
    return [w for w in _WORD.findall(text.casefold()) if w not in STOPWORDS and not w.isdigit()]


def content_word_set(text: str) -> set[str]:
    """The distinct :func:`content_words` of ``text`` (each word tested once: a long context
    repeats its words)."""
    return {
        w for w in set(_WORD.findall(text.casefold())) if w not in STOPWORDS and not w.isdigit()
    }
