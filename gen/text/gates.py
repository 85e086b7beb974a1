"""Shared text gates: what every field an LLM wrote must pass before a generator keeps it.

A tiny model writes text that no reader would accept: the prompt's own machinery echoed back
(schema field names, template variables, few-shot markers, JSON, list numbers), text cut off in
a word or a clause, a goal without a verb after "To", loops. A *gate* is a named function
``(text, context) -> problem | None``; :class:`Gates` holds what the gates of one prompt compare
against (its messages and schema) and applies the gates of a field's *kind* in order, returning
the first :class:`Failure`. Generators count ``f"{stage}.gate.{name}"`` and regenerate (within
their attempts) before they give the gate's name as the reject reason; their own field checks
come after. :func:`gen.text.textaudit.audit_texts` runs the same gates over any bank's visible text.

The surface forms are checked (:mod:`gen.text.surface`) with spaCy's English tagger
(``en_core_web_sm`` 3.8.0, shipped inside a PyPI wheel and loaded from site-packages, never
downloaded), the language with py3langid's model (also inside its wheel). Both load once per
process, on first use.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Annotated, Any

from pydantic import AfterValidator

from gen.text.language import LANGUAGES, identify, is_clear
from gen.text.surface import Kind, _form
from gen.text.tagging import penn, pos_tags, tags, words
from gen.timing import CLOCK


@dataclass(frozen=True)
class Failure:
    """The first gate a text failed, and why (the detail names the offending part)."""

    gate: str
    detail: str

    def key(self, stage: str) -> str:
        """The manifest counter of this failure at ``stage``."""
        return count_key(stage, self.gate)


def count_key(stage: str, reason: str, action: str | None = None) -> str:
    """The manifest counter of a dropped text: ``<stage>.gate.<gate>`` for a shared gate,
    ``<stage>.<reason>`` for a generator's own check, then ``.<action>`` (dropped, regenerated…)."""
    base = f"{stage}.gate.{reason}" if reason in GATES else f"{stage}.{reason}"
    return f"{base}.{action}" if action else base


@dataclass(frozen=True)
class GateContext:
    """What a gate may look at besides the text."""

    kind: Kind = "prose"
    language: str = "en"
    """The run's language (ISO 639-1)."""
    raw: str | None = None
    """The model's own text before code normalised it (for the length cap)."""
    max_chars: int | None = None
    """The field's length cap in the schema: a text that reaches it stopped for length."""
    fields: frozenset[str] = frozenset()
    """The prompt's schema field names."""
    labels: frozenset[str] = frozenset()
    """Labels of the prompt's lines ("Topic", "Person"), lower-cased."""
    examples: frozenset[str] = frozenset()
    """The few-shot answers' strings, as :func:`key`\\ s."""
    prompt_grams: frozenset[tuple[str, ...]] = frozenset()
    """Word 6-grams of the prompt that an output must not copy."""


Gate = Callable[[str, GateContext], str | None]
GATES: dict[str, Gate] = {}
"""Every gate by name, in the order they run."""


def gate(name: str) -> Callable[[Gate], Gate]:
    def register(fn: Gate) -> Gate:
        GATES[name] = fn
        return fn

    return register


def key(text: str) -> str:
    """Comparison key: case, punctuation and spacing ignored."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())


_CLOSING = "\"')]\u00bb\u201d\u2019"


def final_mark(text: str) -> str:
    """A text's final mark: ``.``, ``?``, ``!`` or ``""`` (closing quotes and brackets skipped)."""
    end = text.rstrip().rstrip(_CLOSING).rstrip()
    return end[-1] if end and end[-1] in ".?!" else ""


def with_mark(text: str, mark: str) -> str:
    """``text`` ending with ``mark`` in place of its own final run of ``.?!`` (an ellipsis too). A
    text that ends in quotes or brackets keeps a mark it has inside them and gets ``mark`` after
    them when it has none (``C says "ok".``): every text of a set then ends with a mark."""
    text = text.rstrip()
    if not text:
        return text
    if text[-1] in _CLOSING:
        return text if final_mark(text) else text + mark
    return text.rstrip(".?!… ") + mark


def ngrams(text: str, n: int = 6) -> set[tuple[str, ...]]:
    words = key(text).split()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


# --------------------------------------------------------------------------- echoes of the prompt


# snake_case identifiers (not inside an e-mail address, a handle, a URL or a file name)
_IDENTIFIER = re.compile(r"(?<![\w@./#:-])[A-Za-z]+(?:_[A-Za-z0-9]+)+(?![\w@]|\.\w|/)")


@gate("schema_echo")
def schema_echo(text: str, ctx: GateContext) -> str | None:
    """A schema field name or any snake_case identifier ("next_actions_31"), or a field name
    used as a label ("title: …", ``"belief"``)."""
    m = _IDENTIFIER.search(text)
    if m:
        return f"identifier {m.group(0)!r}"
    for name in ctx.fields:
        if re.search(
            rf"(?:^|[\s,;.(\[{{\"'])[\"']?{re.escape(name)}[\"']?\s*[:=]", text, re.I
        ) or re.search(rf"\"{re.escape(name)}\"", text, re.I):
            return f"schema field {name!r} used as a label"
    return None


_TEMPLATE = re.compile(
    r"\{\{.*?\}\}|\{%.*?%\}|\{\s*[A-Za-z_][\w.]*\s*\}"  # jinja / format variables
    r"|\$\{\w+\}|<\s*[A-Za-z_][\w ]{0,30}>"  # ${var}, <name>
    # [NAME], [your name]
    r"|\[(?:[A-Z][A-Z_ ]{1,30}|[Yy]our [^\]]{1,30}|[Ii]nsert [^\]]{1,30}|[a-z]+(?:_[a-z]+)+)\]"
)


@gate("template_echo")
def template_echo(text: str, ctx: GateContext) -> str | None:
    """A template variable or placeholder: ``{{ x }}``, ``{person}``, ``<name>``, ``[NAME]``."""
    m = _TEMPLATE.search(text)
    return f"template variable {m.group(0)!r}" if m else None


_ROLE = re.compile(
    r"\[(?:user|assistant|system)\]|<\|[^|>]{1,30}\|>|</?s>|###\s*(?:instruction|response|input|output)"
    r"|(?:^|\n)\s*(?:user|assistant|system|human|ai|answer|output|response|example)\s*\d*\s*:",
    re.I,
)


@gate("fewshot_marker")
def fewshot_marker(text: str, ctx: GateContext) -> str | None:
    """A role or few-shot marker ("[assistant]", "Answer:", a chat-template token) or one of the
    prompt's own line labels ("Topic: …", "Person: …")."""
    m = _ROLE.search(text)
    if m:
        return f"marker {m.group(0).strip()!r}"
    for label in ctx.labels:
        if re.search(rf"(?:^|[.;,!?]\s+|\n)\W*{re.escape(label)}\s*:", text, re.I):
            return f"prompt label {label!r}"
    return None


_JSON = re.compile(r"[{}]|\"\s*:\s*[\"\[{\d]|\"\s*,\s*\"|\[\s*\"|\"\s*\]|\\[ntr\"\\/u]")


@gate("json_fragment")
def json_fragment(text: str, ctx: GateContext) -> str | None:
    """Pieces of JSON: braces, ``"key": …``, ``", "``, escaped characters."""
    m = _JSON.search(text)
    return f"JSON fragment {m.group(0)!r}" if m else None


_LEAD_NUMBER = re.compile(r"^\s*(?:\(?\d{1,2}[.)]|\(?[a-dA-D]\)|[a-d]\.|#\d+)\s+\S")
_ANSWER_NUMBER = re.compile(
    r"\b(?:answer|option|choice|sentence|item)\s*(?:\d{1,2}|[a-dA-D])\s*[:.)]", re.I
)


@gate("numbering")
def numbering(text: str, ctx: GateContext) -> str | None:
    """List numbering left in the text: a leading "1." or "b)" (except in prose, where a
    numbered list is content), "Answer 2:", or (in a goal, belief or action) a bare number as an
    item of a list of words ("tasks, 2, and …"; elsewhere it is an age or a house number)."""
    if ctx.kind not in ("prose", "sentence") and _LEAD_NUMBER.match(text):
        return f"leading list marker {text.strip()[:4]!r}"
    m = _ANSWER_NUMBER.search(text)
    if m:
        return f"answer numbering {m.group(0)!r}"
    if ctx.kind not in _FORMS:  # elsewhere: "Ana, 34, is a nurse", "Strada Serafina, 1, Rome"
        return None
    items = [re.sub(r"^(?:and|or)\s+", "", x.strip(" .;:!?"), flags=re.I) for x in text.split(",")]
    for i, item in enumerate(items):
        if re.fullmatch(r"\d{1,2}[.)]?", item):
            near = [items[j] for j in (i - 1, i + 1) if 0 <= j < len(items)]
            if any(re.search(r"[A-Za-z]{2}", x) and not re.search(r"\d", x) for x in near):
                return f"bare list number {item!r} among words"
    return None


_FORM_PREFIX = re.compile(r"^(?:to|c believes that|c believes|c)\s+")


@gate("example_echo")
def example_echo(text: str, ctx: GateContext) -> str | None:
    """A few-shot answer copied (as a whole, also without its "To"/"C" form prefix)."""
    if not ctx.examples:  # (the audit's: no prompt is known)
        return None
    k = key(text)
    if k and (k in ctx.examples or _FORM_PREFIX.sub("", k) in ctx.examples):
        return "copies a few-shot answer"
    return None


@gate("prompt_echo")
def prompt_echo(text: str, ctx: GateContext) -> str | None:
    """Six words in a row copied from the prompt's own text."""
    if not ctx.prompt_grams:
        return None
    common = ngrams(text) & ctx.prompt_grams
    return f"copies the prompt: {' '.join(min(common))!r}" if common else None


# --------------------------------------------------------------------------- truncation


_PAIRS = (("(", ")"), ("[", "]"), ("{", "}"), ("\u201c", "\u201d"))
_CLOSERS = ".!?\u2026)\"'\u2019\u201d]"
# a clause cannot end on an article, a conjunction or a possessive; a statement not on "to" either
# (a message may: "Happy to.")
_OPEN_END = {"a", "an", "the", "and", "or", "but", "nor", "my", "your", "our", "their"}
_FORMS = {"goal", "belief", "action", "phrase"}
_STATEMENTS = _FORMS | {"sentence"}


@gate("truncated_text")
def truncated_text(text: str, ctx: GateContext) -> str | None:
    """Text cut off: it reached the field's length cap, has unbalanced brackets or quotes, ends
    on a one-letter fragment (not a number's unit, nor Ego4D's anonymous "x"/"y"/"z") or inside a
    clause ("… and the"), or (sentences) has no final stop."""
    raw = ctx.raw if ctx.raw is not None else text
    if ctx.max_chars is not None and len(raw) >= ctx.max_chars:
        return f"reached the field's {ctx.max_chars}-character cap (stopped for length)"
    for a, b in _PAIRS:
        if text.count(a) != text.count(b):
            return f"unbalanced {a}{b}"
    if text.count('"') % 2:
        return 'unbalanced "'
    words = re.findall(r"[^\W_]+(?:'[^\W\d_]+)?", text)
    if not words:
        return None
    last = words[-1]
    question = text.rstrip().endswith("?")
    if (
        len(last) == 1
        and last.islower()
        and last not in "xyz"
        and not (len(words) > 1 and words[-2].isdigit())
        and not re.search(r"(?:\b[^\W\d_]\.){2,}\W*$", text)
    ):  # not "a.s.", "p.m."
        return f"ends in the fragment {last!r}"
    if not question and len(words) > 1 and not (len(last) == 1 and last.isupper()):
        low = last.lower()
        if (
            low in _OPEN_END
            or (low == "to" and ctx.kind in _STATEMENTS)
            or (low == "her" and _tag_of_last(text) == "PRP$")
        ):
            return f"ends inside a clause ({last!r})"
    if ctx.kind == "sentence" and not text.rstrip().endswith(tuple(_CLOSERS)):
        return "no final punctuation"
    return None


def _tag_of_last(text: str) -> str:
    toks = [t for t in penn(text) if re.search(r"\w", t[0])]
    return toks[-1][1] if toks else ""


# --------------------------------------------------------------------------- surface form
# (the tagger's reading of a form is gen.text.surface)


@gate("surface_form")
def surface_form(text: str, ctx: GateContext) -> str | None:
    """The field's required form, read by the POS tagger: a goal is "To <verb> …", an action
    "C <verb> …", a belief "C believes (that) <clause with a verb>", a list item a verb phrase,
    a sentence has a verb."""
    return _form(text, ctx.kind)


# --------------------------------------------------------------------------- repetition, language


_CONTENT = {"NOUN", "PROPN", "VERB", "ADJ", "ADV"}


@gate("repetition")
def repetition(text: str, ctx: GateContext) -> str | None:
    """Degenerate repetition: a word four times in a row, a 4-word run said twice, few distinct
    words, or one content word (by its part of speech) three times in a short text."""
    words = key(text).split()
    for i in range(len(words) - 3):
        if len(set(words[i : i + 4])) == 1:
            return f"{words[i]!r} four times in a row"
    seen: set[tuple[str, ...]] = set()
    for i in range(len(words) - 3):
        g = tuple(words[i : i + 4])
        if g in seen:
            return f"{' '.join(g)!r} twice"
        seen.add(g)
    if len(words) >= 8 and len(set(words)) < len(words) / 2:
        return f"{len(set(words))} distinct of {len(words)} words"
    if len(words) <= CONTENT_WORDS_WITHIN and could_repeat(text):
        toks = pos_tags(text)
        counts = Counter(w.lower() for w, _, pos in toks if is_content(w, pos))
        word, n = counts.most_common(1)[0] if counts else ("", 0)
        verbs = sum(
            t[2] == "VERB" and t[0].lower() != word for t in toks
        )  # other verbs than the word
        if n >= 3 and n > verbs + 1:
            return f"{word!r} {n} times with {verbs} other verb(s)"
    return None


@lru_cache(maxsize=1 << 14)
def could_repeat(text: str) -> bool:
    """Whether some word-like token of ``text`` comes three times (by the tokenizer alone): the
    content-word rule counts a subset of these tokens, so without one it cannot fire and the text
    need not be tagged (kept for the last texts asked: the audit asks before tagging and again in
    the gate)."""
    counted = [k for k in map(_counted, words(text)) if k is not None]
    # a word three times is two repeats at least; most texts have fewer, and skip the count
    return len(counted) - len(set(counted)) >= 2 and max(Counter(counted).values()) >= 3


_COUNTED: dict[str, str | None] = {}


def _counted(token: str) -> str | None:
    """A token as :func:`could_repeat` counts it (lowered), or None when it is not a word or is
    one of :data:`FUNCTION_WORDS`; found once per distinct token (a bank's tokens repeat)."""
    got = _COUNTED.get(token, "")  # "": not seen yet (no token is empty)
    if got == "":
        if len(_COUNTED) >= 1 << 17:
            _COUNTED.clear()
        low = token.lower()
        got = _COUNTED[token] = (
            low if _WORD.fullmatch(token) and low not in FUNCTION_WORDS else None
        )
    return got


def content_lemmas(text: str) -> set[str]:
    """Lower-case lemmas of the content words of ``text`` (nouns, proper nouns, verbs, adjectives,
    adverbs, by the tagger): ``C hands the towel`` and ``C's hand towels`` share ``hand``,
    ``towel``."""
    return {lemma.lower() for w, _, pos, lemma in tags(text) if is_content(w, pos)}


def is_content(word: str, pos: str) -> bool:
    """A content word by the tagger (noun, proper noun, verb, adjective, adverb) that is a word:
    letters first, no digits alone, no punctuation, not an article or a conjunction
    (:data:`FUNCTION_WORDS`)."""
    return (
        pos in _CONTENT and _WORD.fullmatch(word) is not None and word.lower() not in FUNCTION_WORDS
    )


FUNCTION_WORDS = frozenset({"the", "a", "an", "and", "or", "nor", "of"})
"""Words that are never content words, whatever the tagger makes of them: articles, the
coordinating conjunctions that cannot be adverbs, "of". "The" comes three times in two thirds of
EgoToM-shaped options ("C picks the cup, rinses the bowl, and dries the plate."); without it they
need not be tagged whole for the content-word rule (the costliest part of auditing a large bank)."""


_WORD = re.compile(r"[^\W\d_][\w'-]*")


CONTENT_WORDS_WITHIN = 30
"""The content-word rule looks at texts of at most this many words. It fires when a word comes
three times or more and more often than there are other verbs, plus one: "To tie shoes, not with
shoes but with shoes." (3 times, 1 verb) but not EgoToM's "C peels the carrot, cuts the carrot, and
puts the carrot in the bowl." (each verb has its object)."""


def _known_language(code: str) -> str:
    if code not in LANGUAGES:
        raise ValueError(
            f"language {code!r} is not one the identifier chooses among ({', '.join(LANGUAGES)})"
        )
    return code


Language = Annotated[str, AfterValidator(_known_language)]
"""A config field's type for the run's language (an ISO 639-1 code of :data:`LANGUAGES`)."""
LANGUAGE_MIN_WORDS = 4
LANGUAGE_MIN_PROB = 0.9


@gate("language")
def language(text: str, ctx: GateContext) -> str | None:
    """The text is confidently in another language than the run's (texts of fewer than
    ``LANGUAGE_MIN_WORDS`` words are not judged)."""
    if ctx.kind == "name" or len(re.findall(r"[^\W\d_]{2,}", text)) < LANGUAGE_MIN_WORDS:
        return None
    if is_clear(text, ctx.language, LANGUAGE_MIN_PROB):  # found so in a batch (the audit's)
        return None
    lang, prob = identify(text)
    if lang != ctx.language and prob >= LANGUAGE_MIN_PROB:
        return f"reads as {lang} (p={prob:.2f}), not {ctx.language}"
    return None


_WEB = re.compile(
    r"(?i)\b(?:https?://|www\.)\S*|[^\W_]+(?:\.[^\W\d_]+)*\.(?:com|org|net|edu|gov|io|co|html?|php)\b"
    r"|[\w.+-]+@[\w-]+\.[\w.]+"
)
_WEB_HINT = re.compile(r"(?i)https?://|www\.|@|\.(?:com|org|net|edu|gov|io|co|html?|php)\b")
"""What every match of :data:`_WEB` holds (a scheme, "www.", an "@" or a dot and a domain ending):
a text without it is not searched (the search tries its middle part at every letter; 12 µs a
text against 1.7 over a bank's options)."""


@gate("web_fragment")
def web_fragment(text: str, ctx: GateContext) -> str | None:
    """A web address or a piece of one ("www.", "http", "family.com", an e-mail) in an option
    about what C does, wants or believes: web text the small model continued into, never part of
    a physical goal or action (only the option forms are gated: a message or a note may hold
    one)."""
    m = _WEB.search(text) if _WEB_HINT.search(text) else None
    return f"holds the web-address fragment {m.group(0)!r}" if m else None


# --------------------------------------------------------------------------- kinds and the runner


_ECHO = (
    "schema_echo",
    "template_echo",
    "fewshot_marker",
    "json_fragment",
    "numbering",
    "example_echo",
    "prompt_echo",
)
KIND_GATES: dict[str, tuple[str, ...]] = {
    "name": (*_ECHO, "truncated_text", "repetition"),
    "title": (*_ECHO, "truncated_text", "repetition", "language"),
    "prose": (*_ECHO, "truncated_text", "repetition", "language"),
    "sentence": (*_ECHO, "truncated_text", "surface_form", "repetition", "language"),
    **{
        k: (*_ECHO, "truncated_text", "web_fragment", "surface_form", "repetition", "language")
        for k in ("goal", "belief", "action", "phrase")
    },
}
"""The gates of each kind, in the order they run (the first failure is reported)."""


def run_gates(text: str, ctx: GateContext) -> Failure | None:
    """The first gate of ``ctx.kind`` that ``text`` fails; None when it passes (blank text is left
    to the generator's own empty-text check)."""
    if not text.strip():
        return None
    with CLOCK.timed("checks"):
        for name in KIND_GATES[ctx.kind]:
            detail = GATES[name](text, ctx)
            if detail is not None:
                return Failure(name, detail)
    return None


class Gates:
    """The gates of one prompt: what its outputs must not echo (the schema's field names, the
    prompt's labels, its few-shot answers and its own text) and the run's language."""

    def __init__(
        self,
        messages: Sequence[dict[str, str]] = (),
        schema: Any = None,
        *,
        language: str = "en",
        prompt_text: str | None = None,
        keep_out: Iterable[str] = (),
        examples: Iterable[str] | None = None,
    ):
        """
        Args:
            messages: the chat messages of the call.
            schema: the pydantic model (or JSON schema) the model filled.
            language: the run's language.
            prompt_text: the text whose 6-grams an output must not copy (default: the last message).
            keep_out: texts an output may copy (the cue it must carry, the facts it must state).
            examples: few-shot answer strings (default: every string of the assistant turns' JSON).
        """
        _known_language(language)
        if prompt_text is None:
            prompt_text = messages[-1]["content"] if messages else ""
        grams = ngrams(prompt_text)
        for text in keep_out:
            grams -= ngrams(text)
        if examples is None:
            found: set[str] = set()
            for m in messages:
                if m["role"] == "assistant":
                    try:
                        _strings(json.loads(m["content"]), found)
                    except json.JSONDecodeError:
                        continue
            examples = {key(x) for x in found if len(x) > 3}
        self.context = GateContext(
            language=language,
            fields=frozenset(schema_fields(schema)) if schema is not None else frozenset(),
            labels=frozenset(prompt_labels(messages)),
            examples=frozenset(examples),
            prompt_grams=frozenset(grams),
        )

    def check(
        self, text: str, kind: Kind, *, raw: str | None = None, max_chars: int | None = None
    ) -> Failure | None:
        """The first gate of ``kind`` that ``text`` fails (``raw``: the model's text before
        normalisation; ``max_chars``: the field's cap)."""
        return run_gates(text, replace(self.context, kind=kind, raw=raw, max_chars=max_chars))


def _strings(obj: Any, out: set[str]) -> None:
    if isinstance(obj, str):
        out.add(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _strings(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _strings(v, out)


def schema_fields(schema: Any) -> set[str]:
    """Every property name of a pydantic model's (or a JSON schema's) nested objects."""
    if hasattr(schema, "model_json_schema"):
        schema = schema.model_json_schema()
    names: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                names.update(props)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(schema)
    return names


_LABEL = re.compile(r"^\s*(?:[-*]\s*|\d{1,2}\.\s*)?([A-Z][A-Za-z' ]{1,30}?)\s*:\s")


def prompt_labels(messages: Sequence[dict[str, str]]) -> set[str]:
    """Labels of the prompt's lines ("Topic: …", "- Name: …"), lower-cased."""
    out: set[str] = set()
    for m in messages:
        if m["role"] == "assistant":
            continue
        for line in m["content"].splitlines():
            hit = _LABEL.match(line)
            if hit:
                out.add(hit.group(1).strip().lower())
    return out
