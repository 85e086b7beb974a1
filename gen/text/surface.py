"""The surface forms of EgoToM's options, read by spaCy's English POS tagger
(:func:`gen.text.tagging.tags`): a goal is "To <verb> …", an action "C <verb> …", a belief "C
believes (that) <clause with a verb>", a list item a verb phrase, a sentence has a verb. The
``surface_form`` gate (:mod:`gen.text.gates`) applies :func:`_form`; :func:`infinitive` gives a
gerund-led phrase's base form."""

from __future__ import annotations

import re
from typing import Literal

from gen.text.tagging import Tail, penn, tags

Kind = Literal["name", "title", "prose", "sentence", "goal", "belief", "action", "phrase"]
"""What a field holds, which decides its gates:

- ``name``: a proper name or label (a place, an address, an artist, an album, a song): no
  language or form gate, names come in every language;
- ``title``: a short free text (an event, note or video title, a search query, a topic);
- ``prose``: free text of one or more sentences (a message, a note's content);
- ``sentence``: prose that must read as complete sentences (a persona bio): a verb and a final stop;
- ``goal`` "To <verb> …", ``belief`` "C believes (that) <clause>", ``action`` "C <verb> …"
  (EgoToM's option forms), ``phrase`` one bare action "<verb> …" (an item of a list of actions).
"""

_VERB = {"VB", "VBZ", "VBD", "VBP", "MD"}
_FINITE = {"VBZ", "VBD", "VBP", "MD"}
_ADVERB = {"RB", "RBR", "RBS"}
# The tagger sees a narration's "C" as a noun it does not know; a pronoun subject in a few
# carrier sentences gives it the context it was trained on. A verb in any of them is a verb:
# the positives (a determiner, "to", a preposition after "C") are verbs in none.
_ACTION_FRAMES = ("He {}", "Then he {}", "I watch as he {}")
_GOAL_FRAMES = ("He wants to {}", "To {}", "I need to {}")
_BELIEF_FRAMES = ("He believes that {}", "{}")


HEAD_TOKENS = {"goal": 3, "action": 3, "phrase": 3, "belief": 4}
"""Tags after a frame's own that the form's test reads when the text is well formed: a verb in
the first three, a belief's clause verb among the first four. Only a head of the carrier sentence
that holds them is tagged (:class:`gen.text.tagging.Tail`); a test that reads further (an adverb
first, a late verb) has the whole sentence tagged."""


def _tail(frame: str, rest: str, kind: str) -> Tail:
    """Penn tags of ``rest`` inside ``frame`` (the frame's own tokens dropped), exactly."""
    pre = frame.split("{}")[0]
    return Tail(frame.format(rest), len(penn(pre.strip())) if pre.strip() else 0, HEAD_TOKENS[kind])


def carrier(text: str, kind: str) -> tuple[str, int] | None:
    """The first carrier sentence the form's test of ``text`` reads, and the tags it reads of it
    (frame's own and :data:`HEAD_TOKENS`), for tagging many at once
    (:func:`gen.text.tagging.warm_heads`); None for a kind without a form or a text without its
    prefix."""
    frames = {
        "goal": (_GOAL_FRAMES[0], r"^To\s+(\S.*)$"),
        "action": (_ACTION_FRAMES[0], r"^C\s+(\S.*)$"),
        "phrase": (_ACTION_FRAMES[0], r"^(\S.*)$"),
        "belief": (_BELIEF_FRAMES[0], r"^C believes(?:\s+that)?\s+(\S.*)$"),
    }
    if kind not in frames:
        return None
    frame, prefix = frames[kind]
    m = re.match(prefix, text.strip().rstrip(".!").strip())
    if not m:
        return None
    pre = frame.split("{}")[0].strip()
    return frame.format(m.group(1)), len(penn(pre)) + HEAD_TOKENS[kind]


def _starts_with_verb(toks: Tail, ok: set[str]) -> bool:
    i = 0
    while toks.tag(i) in _ADVERB:
        i += 1
    first = toks.tag(i)
    if first is None:
        return False
    if first in ok:
        return True
    # "season and marinate the meat": a coordinated verb makes the first one a verb too
    return toks.tag(i + 1) == "CC" and toks.tag(i + 2) in ok


def _has_clause(toks: Tail) -> bool:
    """A subject then a verb: a finite verb (or a base form that is not after "to") after the
    first token."""
    k = 1
    while (t := toks.tag(k)) is not None:
        if t in _FINITE or (t == "VB" and toks.tag(k - 1) != "TO"):
            return True
        k += 1
    return False


def _form(text: str, kind: Kind) -> str | None:
    body = text.strip().rstrip(".!").strip()
    if kind == "goal":
        m = re.match(r"^To\s+(\S.*)$", body)
        if not m:
            return "a goal starts with 'To <verb>'"
        if not any(
            _starts_with_verb(_tail(f, m.group(1), kind), {"VB", "VBP"}) for f in _GOAL_FRAMES
        ):
            return f"no verb after 'To': {_shown(m.group(1))}"
        return None
    if kind in ("action", "phrase"):
        if kind == "action":
            m = re.match(r"^C\s+(\S.*)$", body)
            if not m:
                return "an action starts with 'C <verb>'"
            rest = m.group(1)
        else:
            rest = body
        if not any(_starts_with_verb(_tail(f, rest, kind), _VERB) for f in _ACTION_FRAMES):
            return (
                f"no verb after 'C': {_shown(rest)}"
                if kind == "action"
                else f"no verb first: {_shown(rest)}"
            )
        return None
    if kind == "belief":
        m = re.match(r"^C believes(?:\s+that)?\s+(\S.*)$", body)
        if not m:
            return "a belief starts with 'C believes that <clause>'"
        if not any(_has_clause(_tail(f, m.group(1), kind)) for f in _BELIEF_FRAMES):
            return f"no clause after 'C believes that': {_shown(m.group(1))}"
        return None
    if kind == "sentence" and not _has_clause(Tail.of(penn(body))):
        return "no verb"
    return None


def infinitive(phrase: str) -> str | None:
    """``washing the dishes`` -> ``wash the dishes`` (a phrase led by a gerund, in base form);
    None when the phrase does not start with one."""
    toks = list(tags(f"He is {phrase}"))[len(tags("He is")) :]  # the lemma too
    if not toks or toks[0][1] != "VBG" or not toks[0][3]:
        return None
    word = phrase.split(maxsplit=1)
    return " ".join([toks[0][3].lower(), *word[1:]])


def _shown(rest: str) -> str:
    return " ".join(f"{w}/{t}" for w, t in penn(rest)[:4])
