"""Check 2: privileged text (the answer, gold terms, hidden state) where the candidate sees it,
and the context-overlap tell."""

from __future__ import annotations

import json
import re
from array import array
from collections import Counter
from collections.abc import Iterator
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

from gen.generators.audit.ngram_index import TermIndex, VisibleTexts
from gen.generators.audit.registry import (
    TELL_OPTIONS,
    CheckResult,
    check,
    finding,
    judged,
    tell_finding,
)
from gen.generators.audit.report import table, tells_table
from gen.generators.audit.stats import Tell, binom_greater, rounded
from gen.generators.audit.text import Grams, has_phrase, letter, norm, shares_in
from gen.schemas.audit import FindingRecord
from gen.schemas.mcq import LETTERS, MCQ

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    out = [
        f"{s['terms']} privileged texts searched in the visible fields of {s['items']} items "
        f"({s['ngram']}-word n-grams, containment >= {s['containment']}).",
        "",
    ]
    if s["context_overlap"]:
        out += [
            "Context-overlap tell: share of each option's word trigrams found in the item's "
            "visible "
            "fields, and how often picking the option with the most is right.",
            "",
        ]
        out += table([{"question type": t, **v} for t, v in s["context_overlap"].items()])
    return out + tells_table(r)


_PATHLIKE = re.compile(r"^[^\s]*[/\\][^\s]*$|^[^\s/\\]+\.[A-Za-z0-9]{2,5}$")
_ANSWER_MARK = re.compile(
    r"(?:^|[^a-z0-9])(?:ans|answer|gt|key|correct|label|target|sol|solution)[\s_\-.:=]*"
    r"([a-z]|\d{1,2})(?=$|[^a-z0-9])"
)


def _terms(it: MCQ, min_chars: int) -> list[tuple[str, str]]:
    """(source field path, normalised text) of what the candidate must not see: the answer,
    and every line of every privileged field; too short or letterless terms are skipped."""
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    sources = [(f"options[{it.answer}]", it.answer_text)] if it.answer_text is not None else []
    for path, text in it.privileged.items():
        sources += _flatten(path, text)
    for path, text in sources:
        t = norm(text or "")
        if len(t) >= min_chars and any(c.isalpha() for c in t) and t not in seen:
            seen.add(t)
            out.append((path, t))
    return out


def _matches(
    terms: list[tuple[str, str]], visible: list[tuple[str, str]], grams: Grams, n: int
) -> tuple[list[list[bool]], list[list[float | None]]]:
    """Per term and visible field: whether the field holds the term as a phrase
    (:func:`has_phrase`), and the share of the term's n-grams it holds (:func:`share_in`; None
    for a term of fewer than n words, or a field no term is searched in by n-grams). A field's
    n-grams are taken when the first term needs them (a term not already found in it as a phrase,
    of n words or more), the texts' word ids so given in the order a pair-by-pair search gives
    them; each field's shares in one search."""
    padded = [f" {v} " for _, v in visible]
    phrase = [[f" {t} " in v for v in padded] for _, t in terms]
    first: list[int | None] = [None] * len(visible)
    for p in range(len(visible)):
        found: set[str] = set()  # before its n-grams are taken, only phrases report a field
        for k, (src, t) in enumerate(terms):
            if src in found:
                continue
            if phrase[k][p]:
                found.add(src)
            elif len(t.split()) >= n:
                first[p] = k
                break
    keys: list[np.ndarray] = []
    fields: list[np.ndarray | None] = [None] * len(visible)
    for k, (_, t) in enumerate(terms):
        keys.append(grams.keys(t, n))
        for p, at in enumerate(first):
            if at == k:
                fields[p] = grams.keys(visible[p][1], n)
    shares: list[list[float | None]] = []
    for f in fields:
        if f is None:
            shares.append([None] * len(terms))
        else:
            got = shares_in(keys, f)
            shares.append([s if len(x) else None for s, x in zip(got, keys, strict=True)])
    return phrase, shares


def _flatten(path: str, text: str) -> list[tuple[str, str]]:
    """A privileged field as separate texts: an object (stored as JSON) by key, a list or
    multi-line text by line — so each gold term or future narration is searched on its own."""
    if text[:1] in "{[":
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            return [
                x
                for k, v in value.items()
                for x in _flatten(f"{path}.{k}", v if isinstance(v, str) else json.dumps(v))
            ]
        if isinstance(value, list):
            return [
                x for v in value for x in _flatten(path, v if isinstance(v, str) else json.dumps(v))
            ]
    return [(path, line) for line in text.splitlines()]


@check(
    "leakage",
    order=2,
    title="Privileged leakage into visible fields, ids and file names",
    finds="the answer or a privileged text in a visible field, an id, a file name or another item, "
    "and answers sharing the most phrases with the context",
    uses=("leak_ngram", "leak_containment", "leak_min_chars", "min_items_per_test", *TELL_OPTIONS),
    markdown=_markdown,
)
def leakage(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """A privileged text (the answer, gold terms, hidden state, future narration) in a visible field
    of the same item (word-boundary match of the normalised text, or a share of its word n-grams),
    in the item id or a file name, or in the visible text of another item."""
    key = "leakage"
    res = CheckResult(key)
    if data.scenarios is not None:
        return CheckResult(
            key,
            "skipped",
            "a scenario bank: gold words in user speech and object names in camera "
            "text are the scenarios check's rules",
        )
    if data.bundles is not None or not data.items:
        return CheckResult(key, "skipped", "no items with visible and privileged fields")
    n = cfg.leak_ngram
    grams = Grams()  # its own: its caches go with it (keys do not depend on what it read)
    per_kind: Counter[str] = Counter()
    index = TermIndex()
    fields = VisibleTexts()
    overlap = _Overlap(grams)
    is_mcq = (data.items.n_options >= 2) & (data.items.answer >= 0)  # data.mcq's items
    for i, it, terms, visible, options in _blocks(data, cfg, grams, is_mcq):
        # the same-item leaks; the other items' index is built on the way
        bank = data.bank_name(i)
        raw = dict(it.visible)
        ordered = sorted(terms, key=lambda x: -len(x[1]))
        phrase, shares = _matches(ordered, visible, grams, n)
        item_key = norm(it.item_id)
        reported: set[tuple[str, str]] = set()  # one finding per (visible field, source field)
        for k, (src, t) in enumerate(ordered):
            for p, (path, _) in enumerate(visible):
                is_answer = src.startswith("options[")
                if (path, src) in reported:
                    continue
                if phrase[k][p]:
                    reported.add((path, src))
                    pathlike = bool(_PATHLIKE.match(raw.get(path, "").strip()))
                    kind = ("answer" if is_answer else "privileged") + (
                        "_in_file_name" if pathlike else "_in_visible"
                    )
                    what = (
                        f"the {'answer' if is_answer else src} text appears in visible field {path}"
                        + (" (a file name)" if pathlike else "")
                    )
                    res.findings.append(
                        finding(
                            key,
                            kind,
                            "error",
                            what,
                            items=[it.item_id],
                            fields=[path, src],
                            numbers={"chars": len(t)},
                            bank=bank,
                        )
                    )
                    per_kind[kind] += 1
                elif (shared := shares[p][k]) is not None:
                    if shared >= cfg.leak_containment:
                        reported.add((path, src))
                        kind = (
                            "answer_ngrams_in_visible"
                            if is_answer
                            else "privileged_ngrams_in_visible"
                        )
                        res.findings.append(
                            finding(
                                key,
                                kind,
                                "warning",
                                f"{shared:.0%} of the {n}-word phrases "
                                f"of {'the answer' if is_answer else src} appear in {path}",
                                items=[it.item_id],
                                fields=[path, src],
                                numbers={"containment": rounded(shared, 3), "n": n},
                                bank=bank,
                            )
                        )
                        per_kind[kind] += 1
            if has_phrase(t, item_key) and ("item_id", src) not in reported:
                reported.add(("item_id", src))
                res.findings.append(
                    finding(
                        key,
                        "privileged_in_id",
                        "error",
                        "the item id contains "
                        f"the {'answer' if src.startswith('options[') else src} text",
                        items=[it.item_id],
                        fields=["item_id", src],
                        bank=bank,
                    )
                )
                per_kind["privileged_in_id"] += 1
        if it.answer is not None:
            marks = {m.group(1) for m in _ANSWER_MARK.finditer(it.item_id.casefold())}
            if marks & {LETTERS[it.answer], str(it.answer), str(it.answer + 1)}:
                res.findings.append(
                    finding(
                        key,
                        "answer_in_id",
                        "error",
                        f"the item id marks the answer ({letter(it.answer)})",
                        items=[it.item_id],
                        fields=["item_id", "answer"],
                        bank=bank,
                    )
                )
                per_kind["answer_in_id"] += 1
        index.add(i, terms, grams, n)
        fields.add(visible)
        if is_mcq[i]:
            overlap.add(it, visible, options)
    cross = _cross_item_leaks(data, index, fields, cfg, grams)
    res.findings += cross
    per_kind["privileged_in_other_item"] += len(cross)
    by_type, tells, found = _overlap_tell(overlap, cfg)
    res.findings += found
    res.stats = {
        "items": len(data.items),
        "terms": index.terms,
        "ngram": n,
        "containment": cfg.leak_containment,
        "findings_by_kind": {k: v for k, v in sorted(per_kind.items()) if v},
        "context_overlap": by_type,
        "tells": [t.row() for t in tells],
    }
    return res


BLOCK = 256
"""Items whose short texts (terms, options) have their n-gram keys made together
(:meth:`Grams.prime`)."""


Block = tuple[int, MCQ, list[tuple[str, str]], list[tuple[str, str]], list[str]]
"""An item as :func:`_blocks` gives it: its index, itself, its terms, its visible fields and its
options normalised (an item the overlap tell reads; else none)."""


def _blocks(data: AuditData, cfg: AuditConfig, grams: Grams, is_mcq: np.ndarray) -> Iterator[Block]:
    """The items in the bank's order, read a block at a time: a block's terms' n-gram keys and
    its options' trigram keys (the overlap tell's) made together before its items are searched."""
    items = enumerate(data.items)
    while block := [
        (
            i,
            it,
            _terms(it, cfg.leak_min_chars),
            data.visible(i),
            [norm(o) for o in it.options] if is_mcq[i] else [],
        )
        for i, it in islice(items, BLOCK)
    ]:
        grams.prime(
            [
                ([t for _, _, terms, _, _ in block for _, t in terms], cfg.leak_ngram),
                ([o for *_, options in block for o in options], OVERLAP_N),
            ]
        )
        yield from block


OVERLAP_N = 3
"""Word n-gram size of the context-overlap tell (trigrams: short enough to catch a reworded
clause)."""


class _Overlap:
    """The context-overlap tell's numbers, item by item in the bank's order (a clip's items,
    which share their visible text, follow each other), each question type's kept apart: read in
    the check's one pass over the items, beside the same-item search, so that a context's words
    are hashed once."""

    def __init__(self, grams: Grams) -> None:
        self.grams = grams
        self.per: dict[str, tuple[list[str], array[float], array[float], array[float]]] = {}
        self.shown: set[str] = set()  # the types with an item that has visible fields
        self._last: tuple[list[tuple[str, str]], np.ndarray] | None = None

    def add(self, it: MCQ, visible: list[tuple[str, str]], options: list[str]) -> None:
        """An item with two options or more and a known answer, its options normalised."""
        grams = self.grams
        hits, chance, ans_share, dis_share = self.per.setdefault(
            it.question_type, ([], array("d"), array("d"), array("d"))
        )
        self.shown.update([it.question_type] if it.visible else [])
        visible = [(p, v) for p, v in visible if p != "question"]
        last = self._last
        if last is None or last[0] != visible:
            # each part's keys are sorted and distinct: one part (a context beside a query time
            # of two words) is the whole, not sorted again
            parts = [k for _, v in visible if len(k := grams.keys(v, OVERLAP_N))]
            last = self._last = (
                visible,
                parts[0]
                if len(parts) == 1
                else np.unique(np.concatenate(parts))
                if parts
                else np.zeros(0, dtype=np.uint64),
            )
        shares = shares_in([grams.keys(o, OVERLAP_N) for o in options], last[1])
        a = it.answer
        assert a is not None
        ans_share.append(shares[a])
        dis_share.extend(x for j, x in enumerate(shares) if j != a)
        chance.append(1 / len(shares))
        if shares[a] > 0 and shares[a] > max(x for j, x in enumerate(shares) if j != a):
            hits.append(it.item_id)


def _overlap_tell(
    overlap: _Overlap, cfg: AuditConfig
) -> tuple[dict[str, Any], list[Tell], list[FindingRecord]]:
    """Per question type: how often is the answer the option sharing the most word trigrams with
    the item's visible fields? Above chance, a model can match phrases instead of reasoning (an
    answer written from the same narration it is asked about)."""
    table: dict[str, Any] = {}
    tells: list[tuple[Tell, list[str], dict[str, Any]]] = []
    per, shown = overlap.per, overlap.shown
    for qtype in sorted(shown):
        hits, chance, ans_share, dis_share = per[qtype]
        n, p0 = len(chance), float(np.mean(chance))
        row: dict[str, Any] = {
            "items": n,
            "answer_mean_share": rounded(float(np.mean(ans_share)), 3),
            "distractor_mean_share": rounded(float(np.mean(dis_share)), 3),
            "pick_most_overlap_accuracy": rounded(len(hits) / n, 3),
            "chance": rounded(p0, 3),
        }
        if n >= cfg.min_items_per_test:
            tell = Tell(
                {"question_type": qtype, "tell": "pick the most overlap"},
                len(hits),
                n,
                p0,
                binom_greater(len(hits), n, p0),
            )
            tells.append(
                (
                    tell,
                    hits,
                    {
                        "answer_mean_share": row["answer_mean_share"],
                        "distractor_mean_share": row["distractor_mean_share"],
                    },
                )
            )
        else:
            row["note"] = f"not tested: fewer than {cfg.min_items_per_test} items"
        table[qtype] = row
    judged([t for t, _, _ in tells], cfg)
    out = [
        tell_finding(
            "leakage",
            "answer_overlaps_context",
            t,
            f"{t.labels['question_type']}: the option sharing the most word {OVERLAP_N}-grams with "
            "the "
            "visible fields is the answer in",
            items=hits,
            fields=["options[answer]"],
            numbers={"question_type": t.labels["question_type"], **shares},
        )
        for t, hits, shares in tells
        if t.severity is not None
    ]
    return table, [t for t, _, _ in tells], out


PROBE_KEYS = 1 << 17
"""Keys of distinct visible texts looked up in the term index at once."""


def _cross_item_leaks(
    data: AuditData, index: TermIndex, fields: VisibleTexts, cfg: AuditConfig, grams: Grams
) -> list[FindingRecord]:
    """A privileged text of one item (at least n words) inside the visible text of another:
    an index of the privileged n-grams, probed once per distinct visible text, as the items are
    read again in order."""
    n = cfg.leak_ngram
    if not len(index.item):
        return []
    index.build(cfg.leak_containment)
    src_paths = list(index.paths)
    text_of, by_text, text_start = fields.groups()
    item_of = np.repeat(np.arange(len(fields.start) - 1), np.diff(np.asarray(fields.start)))
    path_names = list(fields.names)
    ids = data.items.ids
    out: list[FindingRecord] = []
    done = np.zeros(len(text_start) - 1, dtype=bool)
    batch: list[tuple[int, np.ndarray]] = []  # (text id, its keys), looked up together

    def probe() -> None:
        found = index.contained([k for _, k in batch], cfg.leak_containment)
        for (t, _), owned in zip(batch, found, strict=True):
            owners = by_text[
                text_start[t] : text_start[t + 1]
            ].tolist()  # (item, field) rows showing it
            for tid, k, size in owned:
                src_item, src = index.item[tid], src_paths[index.src[tid]]
                if t in text_of[fields.start[src_item] : fields.start[src_item + 1]]:
                    continue  # the item's own visible text: reported as a same-item leak
                for row in owners:
                    j = int(item_of[row])
                    if j == src_item:
                        continue
                    path = path_names[fields.path[row]]
                    out.append(
                        finding(
                            "leakage",
                            "privileged_in_other_item",
                            "warning",
                            f"{k / size:.0%} of {src} of {ids[src_item]} appears in {path} "
                            f"of {ids[j]}",
                            items=[ids[src_item], ids[j]],
                            fields=[src, path],
                            numbers={"containment": rounded(k / size, 3), "n": n},
                        )
                    )
        batch.clear()

    held = 0
    for i in range(len(data.items)):
        for r, (_, text) in zip(
            range(fields.start[i], fields.start[i + 1]), data.visible(i), strict=True
        ):
            t = int(text_of[r])
            if done[t]:
                continue
            done[t] = True
            keys = grams.keys(text, n)
            batch.append((t, keys))
            held += len(keys)
            if held >= PROBE_KEYS:
                probe()
                held = 0
    probe()
    out.sort(key=lambda f: (f.items, f.fields))
    return out
