"""Check 18: every option against the visible context. Does the context name it, how often, where
first, and how alike is it to the context and to the question? The answer alone named, or alone
unnamed, is a per-item tell; a classifier on these features is tested against chance."""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from gen.generators.audit.checks.shortcut import (  # check 7's classifier, reused as it is
    Features,
    _fit_logit,
    _standardised,
    cv_hits,
    folds_for,
    one_blas_thread,
    sampled,
)
from gen.generators.audit.registry import (
    TELL_OPTIONS,
    CheckResult,
    check,
    finding,
    judged,
    tell_finding,
)
from gen.generators.audit.report import per_type_table, tells_table
from gen.generators.audit.stats import Tell, binom_greater, rounded
from gen.generators.audit.text import Lemmas, sentence_words

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData

KEY = "context_options"

SCENARIO_CONTEXT = ("context_image", "turn_1_image", "turn_1_user", "turn_2_image", "turn_2_user")
"""What a context-tracking scenario's candidate sees before it answers Turn 2, in order (the
benchmark's schema: the camera descriptions and the user's turns; the repair prompts come only
after a miss)."""
SCENARIO_OPTIONS = {"current": "current_answers", "prior": "prior_answers"}
"""A scenario's two referents, each as its gold list: the answer is the one ``target_context``
names (clarify and abstain scenarios have no referent to pick)."""

WINDOW = 24
"""Content words in a window of the context: a sentence or a line, cut into windows of this many
words (half overlapping) when it runs longer, so that an option's words spread over a long
unpunctuated text do not count as naming it."""

LEXICAL = (
    "named",
    "log_mentions",
    "first_named",
    "best_window_share",
    "context_share",
    "question_share",
    "only_named",
    "only_unnamed",
)
"""The classifier's features of an option, lexical (always)."""
EMBEDDED = ("context_cosine", "question_cosine")
"""…and by embedding cosine, when the audit's embeddings are on."""


@dataclass
class View:
    """One item seen as options against a context: per option its names (an MCQ option is one
    name; a scenario's referent every phrase of its gold list), the answer's index, the context's
    texts in the order shown, and the question."""

    item_id: str
    question_type: str
    group: str
    options: list[list[str]]
    answer: int
    context: list[str]
    question: str
    bank: str | None = None


class Kept:
    """What the check keeps of each item once its options are seen, in typed buffers (a million
    items' views and feature lists were gigabytes): its id, type, group, answer and number of
    options, and per option whether the context names it, where it first does (NaN: never) and its
    features as float32, item after item."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.groups: list[str] = []
        self.types: list[str] = []
        self.answer = array("i")
        self.k = array("i")
        self.named = array("b")
        self.first = array("d")
        self.feats = array("f")

    def add(self, v: View, feats: list[list[float]], ov: list[OptionView]) -> None:
        if self.groups and self.groups[-1] == v.group:  # a clip's items share one string
            self.groups.append(self.groups[-1])
        else:
            self.groups.append(v.group)
        self.ids.append(v.item_id)
        self.types.append(sys.intern(v.question_type))
        self.answer.append(v.answer)
        self.k.append(len(ov))
        self.named.extend(o.named for o in ov)
        self.first.extend(math.nan if o.first is None else o.first for o in ov)
        for f in feats:
            self.feats.extend(f)

    def starts(self) -> np.ndarray:
        """Where each item's options start among all items' options (and where they end)."""
        return np.concatenate(([0], np.cumsum(np.frombuffer(self.k, dtype=np.int32))))

    def rates(self, idx: list[int]) -> tuple[list[bool], list[bool], list[float], list[float]]:
        """Over the items ``idx``: the answer named, each distractor named, where the answer and
        where each distractor is first named (those named), in item order."""
        starts = self.starts()
        answer_named, distractor_named, first_a, first_d = [], [], [], []
        for r in idx:
            a, named = self.answer[r], self.named[starts[r] : starts[r + 1]]
            at = self.first[starts[r] : starts[r + 1]]
            answer_named.append(bool(named[a]))
            distractor_named += [bool(x) for j, x in enumerate(named) if j != a]
            if not math.isnan(at[a]):
                first_a.append(at[a])
            first_d += [x for j, x in enumerate(at) if j != a and not math.isnan(x)]
        return answer_named, distractor_named, first_a, first_d


def views(data: AuditData) -> Iterator[View]:
    """Every item with options, a known answer and a visible context besides its question and
    options, whatever bank it came from (see the module docstring and the audit's page)."""
    if data.scenarios is not None:
        for row in data.scenarios:
            gold = row.get("gold")
            target = row.get("target_context")
            if not isinstance(gold, dict) or target not in SCENARIO_OPTIONS:
                continue
            lists = [gold.get(SCENARIO_OPTIONS[k]) for k in SCENARIO_OPTIONS]
            names = [[p for p in x if isinstance(p, str) and p.strip()] for x in lists if x]
            context = [row[k] for k in SCENARIO_CONTEXT if isinstance(row.get(k), str)]
            if len(names) != 2 or not all(names) or not any(c.strip() for c in context):
                continue
            question = row.get("turn_2_user")
            yield View(
                str(row["scenario_id"]),
                str(target),
                str(row.get("pair_id") or row["scenario_id"]),
                names,
                list(SCENARIO_OPTIONS).index(str(target)),
                context,
                question if isinstance(question, str) else "",
            )
        return
    for i, it in data.mcq:
        shown = {it.question.strip(), *(o.strip() for o in it.options)}
        context = [v for v in it.visible.values() if v.strip() and v.strip() not in shown]
        if not context:
            continue
        assert it.answer is not None
        yield View(
            it.item_id,
            it.question_type,
            it.group or it.item_id,
            [[o] for o in it.options],
            it.answer,
            context,
            it.question,
            data.bank_name(i),
        )


Window = tuple[int, int, set[str]]
"""A window of the context: where it starts and stops (in content words) and its lemmas."""


def windows(lemmas: Lemmas, texts: list[str]) -> tuple[list[Window], int]:
    """The context's windows and its length in content words."""
    out: list[Window] = []
    at = 0
    step = WINDOW // 2
    for text in texts:
        for lem in lemmas.contents_of(sentence_words(text)):
            n = len(lem)
            if n <= WINDOW:
                if n:
                    out.append((at, at + n, set(lem)))
            else:
                out += [
                    (at + s, at + min(s + WINDOW, n), set(lem[s : s + WINDOW]))
                    for s in range(0, n - WINDOW + step, step)
                ]
            at += n
    return out, at


class WindowIndex:
    """Per lemma of a context, the windows that hold it (in order), found when an option first
    asks for it (a context has hundreds of lemmas, its options a few dozen)."""

    def __init__(self, wins: list[Window]) -> None:
        self.wins = wins
        self.lemmas: set[str] = set().union(*(w for _, _, w in wins))
        """Every lemma of the context."""
        self._at: dict[str, list[int]] = {}

    def __contains__(self, lemma: object) -> bool:
        return lemma in self.lemmas

    def __getitem__(self, lemma: str) -> list[int]:
        got = self._at.get(lemma)
        if got is None:
            got = self._at[lemma] = [r for r, (_, _, w) in enumerate(self.wins) if lemma in w]
        return got


def window_index(wins: list[Window]) -> WindowIndex:
    """Per lemma of a context, the windows that hold it (in order)."""
    return WindowIndex(wins)


def names_of(lemmas: Lemmas, options: list[list[str]]) -> list[list[set[str]]]:
    """Per option, per name, the lemmas that set it apart: its content lemmas that no other option
    has (a template's shared words drop out). A name with none of its own is no evidence for its
    option ("with the grain" where both referents work along the grain), unless it is the
    option's only name ("table" beside "novels table"): then all its lemmas."""
    full = [[set(lemmas.content(n)) for n in names] for names in options]
    flat = [set().union(*f) if f else set() for f in full]
    out = []
    for j, f in enumerate(full):
        others = set().union(*(x for k, x in enumerate(flat) if k != j))
        out.append([(s - others) or (s if len(f) == 1 else set()) for s in f])
    return out


@dataclass
class OptionView:
    """What the context shows of one option."""

    named: bool
    mentions: int
    first: float | None
    """Where the context first names it, as a share of the context's content words (0: at once)."""
    best: float
    """The largest share of its distinctive lemmas one window holds."""
    context_share: float
    question_share: float


def option_views(
    lemmas: Lemmas,
    v: View,
    share: float,
    common: frozenset[str] = frozenset(),
    context: tuple[list[Window], int] | None = None,
    where: WindowIndex | None = None,
) -> tuple[list[OptionView], list[Window]]:
    """Per option, what the context shows of it (``share``: the part of its distinctive lemmas one
    window must hold to name it; ``common``: lemmas every question of the item's type holds, which
    say nothing about this item's question; ``context`` and ``where``: :func:`windows` of
    ``v.context`` and their :func:`window_index`, when the caller has them)."""
    wins, length = context if context is not None else windows(lemmas, v.context)
    if where is None:
        where = window_index(wins)
    context_words = where.lemmas
    question = set(lemmas.content(v.question)) - common
    out = []
    for names, full in zip(
        names_of(lemmas, v.options),
        [[set(lemmas.content(n)) for n in o] for o in v.options],
        strict=True,
    ):
        # per window, the largest share of a name's lemmas it holds (counted by lemma, not by
        # window: a context has dozens of windows, a name a few lemmas)
        got = np.zeros(len(wins))
        for n in names:
            if n:
                at = [r for lemma in n if lemma in where for r in where[lemma]]
                held = np.bincount(np.array(at, dtype=np.int64), minlength=len(wins))
                np.maximum(got, held / len(n), out=got)
        best = max(0.0, float(got.max())) if len(wins) else 0.0
        hits: list[int] = []
        end = -1
        for r in np.nonzero(got >= share - 1e-9)[0].tolist():
            start, stop, _ = wins[r]
            if start >= end:  # overlapping windows count once
                hits.append(start)
                end = stop
        words = set().union(*full) if full else set()
        out.append(
            OptionView(
                bool(hits),
                len(hits),
                hits[0] / max(1, length) if hits else None,
                best,
                len(words & context_words) / len(words) if words else 0.0,
                len(words & question) / len(words) if words else 0.0,
            )
        )
    return out, wins


def tell_of(ov: list[OptionView], answer: int) -> str | None:
    """``answer_only_named`` / ``answer_only_unnamed``: the answer is the one option the context
    names, or the one it does not; else None."""
    named = [o.named for o in ov]
    if sum(named) == 1 and named[answer]:
        return "answer_only_named"
    if sum(named) == len(named) - 1 and not named[answer]:
        return "answer_only_unnamed"
    return None


def has_odd_one(ov: list[OptionView]) -> bool:
    """Whether one option stands apart: the only one named, or the only one not named (the
    answer or not)."""
    n = sum(o.named for o in ov)
    return n == 1 or (len(ov) > 2 and n == len(ov) - 1)


def lexical_features(ov: list[OptionView]) -> list[list[float]]:
    """Per option, the :data:`LEXICAL` features."""
    k, n = len(ov), sum(o.named for o in ov)
    return [
        [
            float(o.named),
            math.log1p(o.mentions),
            1.0 if o.first is None else o.first,
            o.best,
            o.context_share,
            o.question_share,
            float(o.named and n == 1),
            float(not o.named and n == k - 1),
        ]
        for o in ov
    ]


EMBED_BLOCK = 512
"""Items whose options, contexts and questions are embedded at once."""


def _cosines(data: AuditData, rows: list[tuple[View, list[list[float]]]]) -> None:
    """Append to each option's features its embedding cosine to its item's context and to its
    question, each minus its mean cosine to the contexts (questions) of the other items of its type
    in its block:
    what the option shares with its own context, not what it shares with any (a long option is
    close to every text; a question every item repeats says nothing about the item)."""
    assert data.embed is not None
    for s in range(0, len(rows), EMBED_BLOCK):
        block = rows[s : s + EMBED_BLOCK]
        ctx = ["\n".join(v.context) for v, _ in block]
        texts = sorted(
            {*ctx, *(v.question for v, _ in block)}
            | {"; ".join(o) for v, _ in block for o in v.options}
        )
        vecs = np.asarray(data.embed(texts), dtype=np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True) + 1e-9
        at = {t: j for j, t in enumerate(texts)}
        C = vecs[[at[c] for c in ctx]]
        Q = vecs[[at[v.question] for v, _ in block]]
        types = np.array([v.question_type for v, _ in block])
        sums = {t: (C[types == t].sum(axis=0), Q[types == t].sum(axis=0)) for t in set(types)}
        counts = {t: int((types == t).sum()) for t in sums}
        for r, (v, feats) in enumerate(block):
            m, (sc, sq) = counts[v.question_type], sums[v.question_type]
            others_c = (sc - C[r]) / (m - 1) if m > 1 else np.zeros_like(C[r])
            others_q = (sq - Q[r]) / (m - 1) if m > 1 else np.zeros_like(Q[r])
            for f, o in zip(feats, v.options, strict=True):
                e = vecs[at["; ".join(o)]]
                f += [float(e @ C[r] - e @ others_c), float(e @ Q[r] - e @ others_q)]


def _keep(
    data: AuditData, pending: list[tuple[View, list[list[float]], list[OptionView]]], kept: Kept
) -> None:
    """The pending items' cosines (with embeddings; one block of :func:`_cosines`, or the last),
    then what :class:`Kept` keeps of them (their texts dropped: a million items' contexts are
    gigabytes)."""
    if data.embed is not None:
        _cosines(data, [(v, f) for v, f, _ in pending])
    for v, f, ov in pending:
        kept.add(v, f, ov)
    pending.clear()


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    out = [
        f"{s['items']} items with a visible context; an option is named where one sentence (or "
        f"window of {WINDOW} content words) holds at least {s['name_share']:.0%} of its "
        "distinctive lemmas. Per item, the answer alone named or alone unnamed is an error; "
        f"{s['structural']} such items. A conditional-logit classifier on "
        f"{', '.join(s['features'])} is cross-validated against chance.",
        "",
    ]
    return out + per_type_table(r) + tells_table(r)


@check(
    KEY,
    order=18,
    title="Options against the context",
    finds="the answer is the only option the visible context names, or the only one it does not "
    "(per item); a classifier on how the context names each option beats chance",
    uses=(
        "context_name_share",
        "language",
        "embeddings",
        "shortcut_folds",
        "shortcut_repeats",
        "shortcut_l2",
        "shortcut_min_items",
        "shortcut_max_items",
        *TELL_OPTIONS,
    ),
    markdown=_markdown,
)
def context_options(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Every option of every item against the item's visible context (the visible fields besides
    the question and the options; a scenario's camera descriptions and user turns, its referents
    the two gold lists). Words are compared as lemmas, stopwords left out; an option is named where
    one sentence of the context (or a window of 24 content words) holds ``context_name_share`` of
    its distinctive lemmas (those no other option has). Per option: named or not, how often, where
    first (share of the context before it), the best window's share, the share of its words in the
    context and in the question, and, with embeddings, its cosine to the context and to the
    question. Per item, an error when the answer is the only option named or the only one not
    named: the rule "pick the odd one out" answers it, at any bank size. Per question type, a
    conditional-logit classifier on these features, cross-validated as the choice-only one (check
    7), against chance by the audit's tell rules."""
    lemmas = Lemmas(english=cfg.language == "en")
    kept = Kept()
    kinds: list[str | None] = []
    odd = array("b")
    res = CheckResult(KEY)
    if data.bundles is not None or data.histories is not None:
        return CheckResult(KEY, "skipped", "not an MCQ or scenario bank")
    common: dict[str, frozenset[str]] = {}  # per question type, the lemmas of every question
    for v in views(data):
        q = frozenset(lemmas.content(v.question))
        common[v.question_type] = common.get(v.question_type, q) & q
    last: tuple[list[str], tuple[list[Window], int], WindowIndex] | None = None
    pending: list[tuple[View, list[list[float]], list[OptionView]]] = []  # not yet embedded
    for v in views(data):
        if last is None or last[0] != v.context:  # the items of a clip follow each other
            wins = windows(lemmas, v.context)
            last = (v.context, wins, window_index(wins[0]))
        ov, _ = option_views(
            lemmas, v, cfg.context_name_share, common[v.question_type], last[1], last[2]
        )
        pending.append((v, lexical_features(ov), ov))
        if len(pending) == EMBED_BLOCK or data.embed is None:
            _keep(data, pending, kept)
        kind = tell_of(ov, v.answer)
        kinds.append(kind)
        odd.append(has_odd_one(ov))
        if kind is not None:
            what = (
                "the answer is the only option the visible context names"
                if kind == "answer_only_named"
                else "the answer is the only option the visible context does not name"
            )
            res.findings.append(
                finding(
                    KEY,
                    kind,
                    "error",
                    f"{what}: picking the odd one out answers the item without reading it",
                    items=[v.item_id],
                    fields=["visible", "options"],
                    numbers={"options": len(v.options), "question_type": v.question_type},
                    bank=v.bank,
                )
            )
    _keep(data, pending, kept)
    if not kept.ids:
        return CheckResult(KEY, "skipped", "no item with options, an answer and a visible context")
    names = list(LEXICAL)
    if data.embed is not None:
        names += EMBEDDED
    per_type: dict[str, Any] = {}
    tells: list[tuple[Tell, list[str], list[tuple[str, float]]]] = []
    by_type: dict[str, list[int]] = {}
    for r, t in enumerate(kept.types):
        by_type.setdefault(t, []).append(r)
    for qtype in sorted(by_type):
        idx = by_type[qtype]
        n = len(idx)
        answer_named, distractor_named, first_a, first_d = kept.rates(idx)
        kinds_of = [kinds[r] for r in idx]
        p0 = float(np.mean([1 / kept.k[r] for r in idx]))
        row: dict[str, Any] = {
            "items": n,
            "answer_named": rounded(float(np.mean(answer_named)), 3),
            "distractor_named": rounded(float(np.mean(distractor_named)), 3)
            if distractor_named
            else None,
            "answer_first_at": rounded(float(np.mean(first_a)), 3) if first_a else None,
            "distractor_first_at": rounded(float(np.mean(first_d)), 3) if first_d else None,
            "answer_only_named": kinds_of.count("answer_only_named"),
            "answer_only_unnamed": kinds_of.count("answer_only_unnamed"),
            # how often an odd one out is the answer at all: near 1/options when naming says
            # nothing (each flagged item is still answered by the rule)
            "items_with_odd_one": sum(odd[r] for r in idx),
            "chance": rounded(p0, 3),
        }
        if n < cfg.shortcut_min_items:
            row["note"] = f"classifier not run: fewer than {cfg.shortcut_min_items} items"
            per_type[qtype] = row
            continue
        fit = idx
        if n > cfg.shortcut_max_items:  # the tell's estimate, at a bounded cost (as check 7)
            fit = sampled(np.asarray(idx), cfg.shortcut_max_items, data.seed).tolist()
            p0 = float(np.mean([1 / kept.k[r] for r in fit]))
            row["sampled"] = len(fit)
        k, weights = _classify(kept, fit, names, cfg, data.seed, data.workers)
        row |= {
            "folds": cfg.shortcut_folds,
            "repeats": cfg.shortcut_repeats,
            "accuracy": rounded(k / len(fit), 3),
            "top_features": weights,
        }
        per_type[qtype] = row
        tell = Tell(
            {"question_type": qtype, "tell": "options-against-context classifier"},
            k,
            len(fit),
            p0,
            binom_greater(k, len(fit), p0),
        )
        tells.append((tell, [kept.ids[r] for r in fit], weights))
    judged([t for t, _, _ in tells], cfg)
    for tell, ids, weights in tells:
        if tell.severity is None:
            continue
        q = tell.labels["question_type"]
        res.findings.append(
            tell_finding(
                KEY,
                "context_options_classifier",
                tell,
                f"{q}: a classifier that sees only how the visible context names each option "
                f"({cfg.shortcut_folds}-fold cross-validation, {cfg.shortcut_repeats} draws) is "
                "right in",
                items=ids,
                fields=["visible", "options"],
                numbers={"question_type": q, "top_features": weights},
            )
        )
    res.stats = {
        "items": len(kept.ids),
        "name_share": cfg.context_name_share,
        "features": names,
        "structural": sum(k is not None for k in kinds),
        "per_question_type": per_type,
        "tells": [t.row() for t, _, _ in tells],
    }
    return res


def _classify(
    kept: Kept, fit: list[int], names: list[str], cfg: AuditConfig, seed: int, workers: int = 1
) -> tuple[int, list[tuple[str, float]]]:
    """Expected hits of the conditional logit on the items ``fit`` over the fold draws (as check 7
    counts them), and the features the model fitted on every one of them leans on most."""
    from scipy.sparse import csr_matrix

    n, d = len(fit), len(names)
    k = np.frombuffer(kept.k, dtype=np.int32)
    starts = kept.starts() * d  # an option's features are d float32s
    feats = np.frombuffer(kept.feats, dtype=np.float32)
    kmax = int(k[fit].max())
    dense = np.zeros((n * kmax, d), dtype=np.float32)
    mask = np.zeros((n, kmax), dtype=bool)
    for r, i in enumerate(fit):
        mask[r, : k[i]] = True
        dense[r * kmax : r * kmax + k[i]] = feats[starts[i] : starts[i + 1]].reshape(k[i], d)
    F = Features(dense, csr_matrix((n * kmax, 0), dtype=np.float32), n, kmax)
    y = np.array([kept.answer[i] for i in fit], dtype=np.int64)
    groups = [kept.groups[i] for i in fit]
    with one_blas_thread():
        folds = [
            folds_for(groups, cfg.shortcut_folds, (seed, r)) for r in range(cfg.shortcut_repeats)
        ]
        _, right = cv_hits(F, mask, y, folds, cfg.shortcut_folds, cfg.shortcut_l2, workers)
        everyone = np.ones(n, dtype=bool)
        w = _fit_logit(F, _standardised(F, mask, everyone), mask, y, cfg.shortcut_l2, everyone)
    top = np.argsort(-np.abs(w))[:5]
    weights = [(names[j], rounded(float(w[j]), 3)) for j in top if abs(w[j]) > 1e-6]
    return int(round(float(right.sum()) / cfg.shortcut_repeats)), weights
