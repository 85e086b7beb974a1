"""Check 17: the visible context states the answer (a digital state, a history, a scenario text
that holds the correct option's own words, where it should only hint at it)."""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from gen.generators.audit.registry import TELL_OPTIONS, CheckResult, check, judged, tell_finding
from gen.generators.audit.report import table, tells_table
from gen.generators.audit.stats import Tell, binom_greater, rounded
from gen.text.words import content_word_set, content_words

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData

KEY = "context_states"


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    out = [
        f"{s['items']} items with a visible context; an option is stated when the context holds at "
        "least "
        f"{s['containment']:.0%} of the words that set it apart from the item's other options.",
        "",
    ]
    return (
        out
        + table([{"question type": t, **v} for t, v in s["per_question_type"].items()])
        + tells_table(r)
    )


def option_words(text: str) -> set[str]:
    """An option's content words; an option that is a JSON object (WAGIBench's goal dicts) by its
    values, so its keys ("query_item") do not count."""
    if text[:1] == "{":
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            text = " ".join(
                str(v) for k, v in value.items() if k != "type" and isinstance(v, str | int | float)
            )
    return set(content_words(text))


def distinctive(options: list[str]) -> list[set[str]]:
    """Per option, its content words that no other option of the item has: what sets it apart
    (the words a template shares, "do a search for", drop out)."""
    words = [option_words(o) for o in options]
    return [
        w - set().union(*(x for j, x in enumerate(words) if j != i)) for i, w in enumerate(words)
    ]


def containment(options: list[str], context: set[str]) -> list[float]:
    """Per option, the share of its distinctive words the context holds (0 when it has none)."""
    return [len(d & context) / len(d) if d else 0.0 for d in distinctive(options)]


def context_of(fields: list[tuple[str, str]]) -> set[str]:
    """The content words of an item's visible fields (:meth:`AuditData.visible`, the question
    left out)."""
    return {w for _, v in fields for w in content_word_set(v)}


class _Row(NamedTuple):
    """What the tell reads of an item."""

    item_id: str
    answer: int | None


def cohens_h(p1: float, p2: float) -> float:
    """Cohen's h between two proportions (0.2 small, 0.5 medium, 0.8 large)."""
    return 2 * math.asin(math.sqrt(p1)) - 2 * math.asin(math.sqrt(p2))


@check(
    KEY,
    order=17,
    title="The context states the answer",
    finds="a visible context (digital state, history, scenario text) that holds the correct "
    "option's own words "
    "where it holds no distractor's",
    uses=("states_containment", "min_items_per_test", *TELL_OPTIONS),
    markdown=_markdown,
)
def context_states(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """For every item with a visible context besides its question: per option, the share of the
    words that set it apart from the item's other options (its distinctive content words) that the
    context holds; an option is *stated* at ``states_containment`` or more. Per question type, the
    tell is "the context states the answer and no distractor", against the rate expected if the
    stated option were any option at random (per item: 1/options when exactly one option is stated);
    the effect is the difference in points, judged by the audit's tell rules, with the mean
    containment of answers and distractors and Cohen's h between the answer's and a distractor's
    stated rate. A context should prompt its answer (name the thing it is about), not state it (hold
    its query, its message, its content)."""
    res = CheckResult(KEY)
    if data.scenarios is not None or data.bundles is not None or data.histories is not None:
        return CheckResult(
            KEY, "skipped", "not an MCQ bank (the context-states test needs options and a context)"
        )
    # per item its id, answer and options' containment (not the item: a million contexts)
    groups: dict[str, list[tuple[_Row, list[float]]]] = {}
    last: tuple[list[tuple[str, str]], set[str]] = ([], set())  # fields, their content words
    for i, it in data.mcq:  # in the bank's order: the items of a clip follow each other
        fields = [(path, v) for path, v in data.visible(i) if path != "question"]
        if fields != last[0]:
            last = (fields, context_of(fields))
        if not last[1]:
            continue
        kept = _Row(it.item_id, it.answer)
        groups.setdefault(it.question_type, []).append((kept, containment(it.options, last[1])))
    groups = {qtype: groups[qtype] for qtype in sorted(groups)}
    if not groups:
        return CheckResult(KEY, "skipped", "no item shows a visible context besides its question")
    per_type: dict[str, Any] = {}
    tells: list[tuple[Tell, list[str]]] = []
    t = cfg.states_containment
    for qtype, rows in groups.items():
        hits: list[str] = []
        chance: list[float] = []
        answer_share, distractor_share, answer_stated, distractor_stated = [], [], [], []
        for item, share in rows:
            a = item.answer
            assert a is not None
            stated = [s >= t for s in share]
            others = [s for j, s in enumerate(share) if j != a]
            answer_share.append(share[a])
            distractor_share += others
            answer_stated.append(stated[a])
            distractor_stated += [s >= t for s in others]
            chance.append((sum(stated) == 1) / len(share))
            if stated[a] and sum(stated) == 1:
                hits.append(item.item_id)
        n = len(rows)
        p0 = float(np.mean(chance))
        pa, pd = float(np.mean(answer_stated)), float(np.mean(distractor_stated))
        row: dict[str, Any] = {
            "items": n,
            "answer_stated": rounded(pa, 3),
            "distractor_stated": rounded(pd, 3),
            "answer_mean_containment": rounded(float(np.mean(answer_share)), 3),
            "distractor_mean_containment": rounded(float(np.mean(distractor_share)), 3),
            "states_answer_alone": rounded(len(hits) / n, 3),
            "chance": rounded(p0, 3),
            "effect_points": rounded(100 * (len(hits) / n - p0), 1),
            "cohens_h": rounded(cohens_h(pa, pd), 3),
        }
        if n >= cfg.min_items_per_test:
            tell = Tell(
                {"question_type": qtype, "tell": "the context states the answer alone"},
                len(hits),
                n,
                max(p0, 1e-9),
                binom_greater(len(hits), n, max(p0, 1e-9)),
            )
            tells.append((tell, hits))
        else:
            row["note"] = f"not tested: fewer than {cfg.min_items_per_test} items"
        per_type[qtype] = row
    judged([x for x, _ in tells], cfg)
    for tell, hits in tells:
        if tell.severity is None:
            continue
        q = tell.labels["question_type"]
        res.findings.append(
            tell_finding(
                KEY,
                "context_states_answer",
                tell,
                f"{q}: the visible context holds at least {t:.0%} of the answer's distinctive "
                "words and of no "
                f"distractor's in",
                items=hits,
                fields=["visible", "options[answer]"],
                numbers={
                    "question_type": q,
                    "cohens_h": per_type[q]["cohens_h"],
                    "answer_mean_containment": per_type[q]["answer_mean_containment"],
                    "distractor_mean_containment": per_type[q]["distractor_mean_containment"],
                },
            )
        )
    res.stats = {
        "items": sum(len(r) for r in groups.values()),
        "containment": t,
        "per_question_type": per_type,
        "tells": [x.row() for x, _ in tells],
    }
    return res
