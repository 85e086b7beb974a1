"""Check 2: privileged text (the answer, gold terms, hidden state) where the candidate sees it,
and the context-overlap tell."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

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
from gen.generators.audit.text import Grams, has_phrase, letter, member, norm
from gen.schemas.audit import FindingRecord
from gen.schemas.mcq import LETTERS, MCQ

if TYPE_CHECKING:
    from gen.generators.audit import AuditConfig
    from gen.generators.audit.data import AuditData


def _markdown(r: CheckResult) -> list[str]:
    s = r.stats
    out = [f"{s['terms']} privileged texts searched in the visible fields of {s['items']} items "
           f"({s['ngram']}-word n-grams, containment >= {s['containment']}).", ""]
    if s["context_overlap"]:
        out += ["Context-overlap tell: share of each option's word trigrams found in the item's visible "
                "fields, and how often picking the option with the most is right.", ""]
        out += table([{"question type": t, **v} for t, v in s["context_overlap"].items()])
    return out + tells_table(r)
_PATHLIKE = re.compile(r"^[^\s]*[/\\][^\s]*$|^[^\s/\\]+\.[A-Za-z0-9]{2,5}$")
_ANSWER_MARK = re.compile(r"(?:^|[^a-z0-9])(?:ans|answer|gt|key|correct|label|target|sol|solution)[\s_\-.:=]*"
                          r"([a-z]|\d{1,2})(?=$|[^a-z0-9])")


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


def _flatten(path: str, text: str) -> list[tuple[str, str]]:
    """A privileged field as separate texts: an object (stored as JSON) by key, a list or
    multi-line text by line — so each gold term or future narration is searched on its own."""
    if text[:1] in "{[":
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            return [x for k, v in value.items() for x in _flatten(f"{path}.{k}", v if isinstance(v, str) else json.dumps(v))]
        if isinstance(value, list):
            return [x for v in value for x in _flatten(path, v if isinstance(v, str) else json.dumps(v))]
    return [(path, line) for line in text.splitlines()]


@check("leakage", order=2, title="Privileged leakage into visible fields, ids and file names",
       finds="the answer or a privileged text in a visible field, an id, a file name or another item, "
             "and answers sharing the most phrases with the context",
       uses=("leak_ngram", "leak_containment", "leak_min_chars", "min_items_per_test", *TELL_OPTIONS),
       markdown=_markdown)
def leakage(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """A privileged text (the answer, gold terms, hidden state, future narration) in a visible field
    of the same item (word-boundary match of the normalised text, or a share of its word n-grams),
    in the item id or a file name, or in the visible text of another item."""
    key = "leakage"
    res = CheckResult(key)
    if data.scenarios is not None:
        return CheckResult(key, "skipped", "a scenario bank: gold words in user speech and object names in camera "
                                           "text are the scenarios check's rules")
    if data.bundles is not None or not data.items:
        return CheckResult(key, "skipped", "no items with visible and privileged fields")
    n = cfg.leak_ngram
    grams = data.grams
    per_kind: Counter[str] = Counter()
    terms_of: list[list[tuple[str, str]]] = []
    for i, it in enumerate(data.items):
        bank = data.bank_name(i)
        terms = _terms(it, cfg.leak_min_chars)
        terms_of.append(terms)
        visible = data.visible(i)
        raw = dict(it.visible)
        vis_grams: dict[str, np.ndarray] = {}
        reported: set[tuple[str, str]] = set()  # one finding per (visible field, source field)
        for src, t in sorted(terms, key=lambda x: -len(x[1])):
            t_grams = grams.keys(t, n)
            for path, v in visible:
                is_answer = src.startswith("options[")
                if (path, src) in reported:
                    continue
                if has_phrase(t, v):
                    reported.add((path, src))
                    pathlike = bool(_PATHLIKE.match(raw.get(path, "").strip()))
                    kind = ("answer" if is_answer else "privileged") + ("_in_file_name" if pathlike else "_in_visible")
                    what = (f"the {'answer' if is_answer else src} text appears in visible field {path}"
                            + (" (a file name)" if pathlike else ""))
                    res.findings.append(finding(key, kind, "error", what, items=[it.item_id], fields=[path, src],
                                                numbers={"chars": len(t)}, bank=bank))
                    per_kind[kind] += 1
                elif len(t_grams):
                    if path not in vis_grams:
                        vis_grams[path] = grams.keys(v, n)
                    shared = float(member(t_grams, vis_grams[path]).mean())
                    if shared >= cfg.leak_containment:
                        reported.add((path, src))
                        kind = "answer_ngrams_in_visible" if is_answer else "privileged_ngrams_in_visible"
                        res.findings.append(finding(
                            key, kind, "warning",
                            f"{shared:.0%} of the {n}-word phrases of {'the answer' if is_answer else src} appear in {path}",
                            items=[it.item_id], fields=[path, src], numbers={"containment": rounded(shared, 3), "n": n},
                            bank=bank))
                        per_kind[kind] += 1
            if has_phrase(t, norm(it.item_id)) and ("item_id", src) not in reported:
                reported.add(("item_id", src))
                res.findings.append(finding(key, "privileged_in_id", "error",
                                            f"the item id contains the {'answer' if src.startswith('options[') else src} text",
                                            items=[it.item_id], fields=["item_id", src], bank=bank))
                per_kind["privileged_in_id"] += 1
        if it.answer is not None:
            marks = {m.group(1) for m in _ANSWER_MARK.finditer(it.item_id.casefold())}
            if marks & {LETTERS[it.answer], str(it.answer), str(it.answer + 1)}:
                res.findings.append(finding(key, "answer_in_id", "error",
                                            f"the item id marks the answer ({letter(it.answer)})",
                                            items=[it.item_id], fields=["item_id", "answer"], bank=bank))
                per_kind["answer_in_id"] += 1
    cross = _cross_item_leaks(data, terms_of, cfg, grams)
    res.findings += cross
    per_kind["privileged_in_other_item"] += len(cross)
    overlap, tells, found = _overlap_tell(data, cfg, grams)
    res.findings += found
    res.stats = {"items": len(data.items), "terms": sum(len(t) for t in terms_of),
                 "ngram": n, "containment": cfg.leak_containment,
                 "findings_by_kind": {k: v for k, v in sorted(per_kind.items()) if v},
                 "context_overlap": overlap, "tells": [t.row() for t in tells]}
    return res


OVERLAP_N = 3
"""Word n-gram size of the context-overlap tell (trigrams: short enough to catch a reworded clause)."""


def _overlap_tell(data: AuditData, cfg: AuditConfig,
                  grams: Grams) -> tuple[dict[str, Any], list[Tell], list[FindingRecord]]:
    """Per question type: how often is the answer the option sharing the most word trigrams with
    the item's visible fields? Above chance, a model can match phrases instead of reasoning (an
    answer written from the same narration it is asked about)."""
    table: dict[str, Any] = {}
    tells: list[tuple[Tell, list[str], dict[str, Any]]] = []
    groups = {t: xs for t, xs in data.by_type().items() if any(it.visible for _, it in xs)}
    for qtype, xs in groups.items():
        hits, chance = [], []
        ans_share, dis_share = [], []
        for i, it in xs:
            parts = [grams.keys(v, OVERLAP_N) for p, v in data.visible(i) if p != "question"]
            vis = (parts[0] if len(parts) == 1 else np.unique(np.concatenate(parts)) if parts
                   else np.zeros(0, dtype=np.uint64))
            shares = []
            for o in it.options:
                g = grams.keys(norm(o), OVERLAP_N)
                shares.append(float(member(g, vis).mean()) if len(g) else 0.0)
            a = it.answer
            assert a is not None
            ans_share.append(shares[a])
            dis_share += [x for j, x in enumerate(shares) if j != a]
            chance.append(1 / len(shares))
            if shares[a] > 0 and shares[a] > max(x for j, x in enumerate(shares) if j != a):
                hits.append(it.item_id)
        n, p0 = len(xs), float(np.mean(chance))
        row: dict[str, Any] = {"items": n, "answer_mean_share": rounded(float(np.mean(ans_share)), 3),
                               "distractor_mean_share": rounded(float(np.mean(dis_share)), 3),
                               "pick_most_overlap_accuracy": rounded(len(hits) / n, 3), "chance": rounded(p0, 3)}
        if n >= cfg.min_items_per_test:
            tell = Tell({"question_type": qtype, "tell": "pick the most overlap"}, len(hits), n, p0,
                        binom_greater(len(hits), n, p0))
            tells.append((tell, hits, {"answer_mean_share": row["answer_mean_share"],
                                       "distractor_mean_share": row["distractor_mean_share"]}))
        else:
            row["note"] = f"not tested: fewer than {cfg.min_items_per_test} items"
        table[qtype] = row
    judged([t for t, _, _ in tells], cfg)
    out = [tell_finding("leakage", "answer_overlaps_context", t,
                        f"{t.labels['question_type']}: the option sharing the most word {OVERLAP_N}-grams with the "
                        "visible fields is the answer in", items=hits, fields=["options[answer]"],
                        numbers={"question_type": t.labels["question_type"], **shares})
           for t, hits, shares in tells if t.severity is not None]
    return table, [t for t, _, _ in tells], out


def _cross_item_leaks(data: AuditData, terms_of: list[list[tuple[str, str]]], cfg: AuditConfig,
                      grams: Grams) -> list[FindingRecord]:
    """A privileged text of one item (at least n words) inside the visible text of another:
    an inverted index of the privileged n-grams, probed once per distinct visible text."""
    n = cfg.leak_ngram
    sizes: list[int] = []
    term_owner: list[tuple[int, str]] = []
    index: dict[int, list[int]] = defaultdict(list)
    for i, terms in enumerate(terms_of):
        for src, t in terms:
            keys = grams.keys(t, n)
            if not len(keys):
                continue
            tid = len(term_owner)
            term_owner.append((i, src))
            sizes.append(len(keys))
            for g in keys.tolist():
                index[g].append(tid)
    if not term_owner:
        return []
    # phrases shared by many privileged texts are the bank's template ("c believes that the"),
    # not content: they neither count for nor against containment
    common = max(20, len(term_owner) // 100)
    for g in [g for g, tids in index.items() if len(tids) > common]:
        for tid in index.pop(g):
            sizes[tid] -= 1
    all_keys = np.array(sorted(index), dtype=np.uint64)
    texts: dict[str, list[tuple[int, str]]] = defaultdict(list)
    own_texts: list[set[str]] = []
    for i in range(len(data.items)):
        vis = data.visible(i)
        own_texts.append({v for _, v in vis})
        for path, v in vis:
            texts[v].append((i, path))
    out: list[FindingRecord] = []
    for text, owners in texts.items():
        keys = grams.keys(text, n)
        hits: Counter[int] = Counter()
        for g in keys[member(keys, all_keys)].tolist():
            for tid in index[g]:
                hits[tid] += 1
        for tid, k in hits.items():
            if not sizes[tid] or k / sizes[tid] < cfg.leak_containment:
                continue
            src_item, src = term_owner[tid]
            if text in own_texts[src_item]:
                continue  # the item's own visible text: reported as a same-item leak
            for j, path in owners:
                if j == src_item:
                    continue
                a, b = data.items[src_item], data.items[j]
                out.append(finding(
                    "leakage", "privileged_in_other_item", "warning",
                    f"{k / sizes[tid]:.0%} of {src} of {a.item_id} appears in {path} of {b.item_id}",
                    items=[a.item_id, b.item_id], fields=[src, path],
                    numbers={"containment": rounded(k / sizes[tid], 3), "n": n}))
    out.sort(key=lambda f: (f.items, f.fields))
    return out
