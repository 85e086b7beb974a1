"""The ten audit checks, as pure functions over loaded items (no files written, no CLI).

Each check takes an :class:`AuditData` and the audit config and returns a :class:`CheckResult`:
its statistics (for the report's tables), its findings (:class:`FindingRecord`: check, kind,
severity, items, field paths, numbers) and the series its plots are drawn from.
``generators/audit.py`` runs them, one check per record index, and writes the report.

Severities: ``error`` is a defect the bank should not ship with (an answer not among the
options, a leaked answer, a significant position or length tell, a changed output file);
``warning`` asks a person to look (a distractor nearly identical to the answer, a near-duplicate
item, one item whose answer is much longer than its distractors); ``info`` is context.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import math
import re
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, Field, ValidationError

from gen.llm import sha256_file
from schemas.mcq import LETTERS, MCQ

if TYPE_CHECKING:
    from gen.mcq import Bank
    from generators.audit import AuditConfig

Severity = Literal["info", "warning", "error"]
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


class FindingRecord(BaseModel):
    """One audit finding: a line of ``audit.jsonl``."""

    check: str
    """The check's key (``structure``, ``leakage``, ``position``…)."""
    check_id: int
    """The check's number, 1-10, as in the issue and the report."""
    kind: str
    """A typed name of what was found (``answer_in_visible``, ``position_bias``…)."""
    severity: Severity
    what: str
    """One sentence a person can act on."""
    items: list[str] = Field(default_factory=list)
    """Item ids (bundle ids for ``digital``; empty for file-level findings)."""
    fields: list[str] = Field(default_factory=list)
    """Field paths: ``visible.context``, ``options[2]``, ``options[answer]`` (the answer option of
    each listed item), ``apps.Messaging.conversations[0].messages[1].timestamp``, ``outputs.x``."""
    numbers: dict[str, Any] = Field(default_factory=dict)
    bank: str | None = None
    """The bank file or run folder it concerns, when the audit read several."""


@dataclass
class CheckResult:
    key: str
    status: Literal["ran", "skipped"] = "ran"
    reason: str = ""
    """Why a check was skipped (not applicable to this input, a missing optional input)."""
    stats: dict[str, Any] = field(default_factory=dict)
    findings: list[FindingRecord] = field(default_factory=list)
    series: dict[str, Any] = field(default_factory=dict)
    """Raw numbers for plots (not written to audit.json)."""
    seconds: float = 0.0


@dataclass
class AuditData:
    """Everything the checks read, loaded once."""

    items: list[MCQ] = field(default_factory=list)
    banks: list[Bank] = field(default_factory=list)
    bank_of: list[str] = field(default_factory=list)
    """Per item, the name of the file it came from."""
    against: list[MCQ] = field(default_factory=list)
    against_name: str | None = None
    bundles: list[dict[str, Any]] | None = None
    """``digital`` bundles when the input is a digital run (then ``items`` is empty)."""
    digital_config: dict[str, Any] = field(default_factory=dict)
    """The digital run's config (windows, cue recency) from its manifest."""
    nocontext: list[dict[str, Any]] | None = None
    folders: list[Path] = field(default_factory=list)
    """Run folders whose manifest.json the integrity check verifies."""
    embed: Callable[[list[str]], np.ndarray] | None = None
    seed: int = 0
    _visible: list[list[tuple[str, str]]] | None = field(default=None, repr=False)
    grams: Grams = field(default_factory=lambda: Grams(), repr=False)
    """Word ids of normalised texts, shared by the leakage and duplicate checks."""

    def visible(self, i: int) -> list[tuple[str, str]]:
        """Item i's visible fields, normalised (computed once for all checks)."""
        if self._visible is None:
            self._visible = [_visible(it) for it in self.items]
        return self._visible[i]

    @property
    def mcq(self) -> list[tuple[int, MCQ]]:
        """Items with at least two options and a known answer (what the statistics use)."""
        return [(i, it) for i, it in enumerate(self.items) if len(it.options) >= 2 and it.answer is not None]


CHECKS = ("structure", "leakage", "position", "length", "similar_options", "duplicates",
          "shortcut", "blind", "digital", "integrity")
"""Check keys in issue order; a check's id is its position + 1."""

TITLES = {
    "structure": "Structure: answers among options, unique options, required fields, counts",
    "leakage": "Privileged leakage into visible fields, ids and file names",
    "position": "Answer-position balance",
    "length": "Option-length tell",
    "similar_options": "Near-duplicate options and distractors close to the answer",
    "duplicates": "Duplicate and near-duplicate items",
    "shortcut": "Choice-only shortcut classifier",
    "blind": "Blind solvability (nocontext results)",
    "digital": "Digital bundles: times, participants, cue",
    "integrity": "Integrity: output files against manifest.json",
}


def finding(key: str, kind: str, severity: Severity, what: str, **kw: Any) -> FindingRecord:
    return FindingRecord(check=key, check_id=CHECKS.index(key) + 1, kind=kind, severity=severity, what=what, **kw)


# --------------------------------------------------------------------------- text helpers

_NON_WORD = re.compile(r"[\W_]+")


def norm(text: str) -> str:
    """Casefolded, NFKC, every run of non-letters/digits (underscores too) one space."""
    return " ".join(_NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).split())


def has_phrase(term: str, text: str) -> bool:
    """``term`` occurs in ``text`` on word boundaries (both already :func:`norm`-ed)."""
    return f" {term} " in f" {text} "


def ngram_set(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


class Grams:
    """Word n-grams of normalised texts as arrays of 64-bit keys (a polynomial hash over word
    ids, vectorised); word ids are kept per distinct text. Sets of word tuples were the leakage
    check's whole cost on long contexts."""

    P = np.uint64(0x9E3779B97F4A7C15)

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self._ids: dict[str, np.ndarray] = {}

    def ids(self, text: str) -> np.ndarray:
        got = self._ids.get(text)
        if got is None:
            vocab = self.vocab
            got = np.array([vocab.setdefault(w, len(vocab)) for w in text.split()], dtype=np.uint64)
            self._ids[text] = got
        return got

    def keys(self, text: str, n: int) -> np.ndarray:
        """The distinct n-gram keys of ``text`` (sorted); empty when it has fewer than n words."""
        ids = self.ids(text)
        m = len(ids) - n + 1
        if m < 1:
            return np.zeros(0, dtype=np.uint64)
        h = ids[:m].copy()
        for j in range(1, n):
            h = h * self.P + ids[j:j + m]  # wraps modulo 2^64, as intended
        h.sort()
        return h[np.concatenate(([True], h[1:] != h[:-1]))]


def member(needles: np.ndarray, haystack: np.ndarray) -> np.ndarray:
    """``needles`` found in the sorted array ``haystack`` (np.isin re-sorts the haystack each call)."""
    if not len(haystack):
        return np.zeros(len(needles), dtype=bool)
    at = np.minimum(np.searchsorted(haystack, needles), len(haystack) - 1)
    return haystack[at] == needles


def letter(i: int | None) -> str:
    return "-" if i is None else LETTERS[i]


def rounded(x: float, nd: int = 4) -> float:
    return float(round(float(x), nd))


def pvalue(x: float) -> float:
    """A p-value for JSON: 3 significant digits (tiny values stay visible)."""
    return float(f"{float(x):.3g}")


def binom_greater(k: int, n: int, p: float) -> float:
    from scipy.stats import binomtest

    return binomtest(int(k), int(n), min(max(p, 1e-12), 1 - 1e-12), alternative="greater").pvalue if n else 1.0


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    from scipy.stats import binomtest

    if not n:
        return (0.0, 1.0)
    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=level)
    return (rounded(ci.low), rounded(ci.high))


def by_type(data: AuditData) -> dict[str, list[tuple[int, MCQ]]]:
    groups: dict[str, list[tuple[int, MCQ]]] = defaultdict(list)
    for i, it in data.mcq:
        groups[it.question_type].append((i, it))
    return dict(sorted(groups.items()))


def bank_name(data: AuditData, i: int) -> str | None:
    return data.bank_of[i] if len(data.banks) > 1 and i < len(data.bank_of) else None


# --------------------------------------------------------------------------- 1. structure


def check_structure(data: AuditData, cfg: AuditConfig) -> CheckResult:
    key = "structure"
    res = CheckResult(key)
    if data.bundles is not None:
        return CheckResult(key, "skipped", "a digital run: bundle structure is part of the digital check")
    if not data.items and not any(b.problems for b in data.banks):
        return CheckResult(key, "skipped", "no items (the input is a run folder without a bank)")
    for bank in data.banks:
        for p in bank.problems:
            sev: Severity = "error"
            res.findings.append(finding(key, "row_problem", sev, f"line {p['line'] + 1}: {p['field']} {p['problem']}",
                                        items=[p["item_id"]], fields=[p["field"]],
                                        numbers={"line": p["line"] + 1}, bank=bank.path.name))
    fmt_of = {b.path.name: b.format for b in data.banks}
    for i, it in enumerate(data.items):
        bank = bank_name(data, i)
        # a roles bank reports its answer and required fields as row problems (above)
        roles = fmt_of.get(data.bank_of[i] if i < len(data.bank_of) else "", "") == "roles_jsonl"
        if it.options:
            if len(it.options) < 2:
                res.findings.append(finding(key, "too_few_options", "error", "an item with options needs at least two",
                                            items=[it.item_id], fields=["options"], bank=bank))
            if it.answer is None and not roles:
                where = next(iter(it.privileged), "answer")
                res.findings.append(finding(key, "answer_not_in_options", "error",
                                            "the correct answer is not among the options", items=[it.item_id],
                                            fields=[where], bank=bank))
            seen: dict[str, int] = {}
            for j, o in enumerate(it.options):
                n = norm(o)
                if not n:
                    res.findings.append(finding(key, "empty_option", "error", f"option {letter(j)} is empty",
                                                items=[it.item_id], fields=[f"options[{j}]"], bank=bank))
                elif n in seen:
                    res.findings.append(finding(key, "duplicate_options", "error",
                                                f"options {letter(seen[n])} and {letter(j)} are the same text",
                                                items=[it.item_id], fields=[f"options[{seen[n]}]", f"options[{j}]"],
                                                bank=bank))
                else:
                    seen[n] = j
            if not it.question.strip() and not roles:
                res.findings.append(finding(key, "empty_question", "error", "the question is empty",
                                            items=[it.item_id], fields=["question"], bank=bank))
        for path, text in it.visible.items():
            if not text.strip():
                res.findings.append(finding(key, "empty_visible", "warning", f"visible field {path} is empty",
                                            items=[it.item_id], fields=[path], bank=bank))
    ids = Counter(it.item_id for it in data.items)
    for item_id, n in sorted(ids.items()):
        if n > 1:
            res.findings.append(finding(key, "duplicate_id", "error", f"item id used by {n} items",
                                        items=[item_id], fields=["item_id"], numbers={"count": n}))
    per_type: dict[str, dict[str, Any]] = {}
    for it in data.items:
        row = per_type.setdefault(it.question_type, {"items": 0, "options": Counter(), "no_answer": 0})
        row["items"] += 1
        row["options"][len(it.options)] += 1
        row["no_answer"] += bool(it.options) and it.answer is None
    res.stats = {
        "items": len(data.items),
        "banks": {b.path.name: {"format": b.format, "items": len(b.items), "row_problems": len(b.problems)}
                  for b in data.banks},
        "per_question_type": {t: {"items": r["items"], "options": dict(sorted(r["options"].items())),
                                  "no_answer": r["no_answer"]} for t, r in sorted(per_type.items())},
        "per_category": dict(sorted(Counter(it.category for it in data.items if it.category is not None).items())),
        "groups": len({it.group for it in data.items if it.group is not None}),
    }
    return res


# --------------------------------------------------------------------------- 2. leakage

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


def _visible(it: MCQ) -> list[tuple[str, str]]:
    fields = [(p, norm(v)) for p, v in it.visible.items()]
    if it.question.strip() and not any(v == it.question for v in it.visible.values()):
        fields.append(("question", norm(it.question)))
    return [(p, v) for p, v in fields if v]


def check_leakage(data: AuditData, cfg: AuditConfig) -> CheckResult:
    key = "leakage"
    res = CheckResult(key)
    if data.bundles is not None or not data.items:
        return CheckResult(key, "skipped", "no items with visible and privileged fields")
    n = cfg.leak_ngram
    grams = data.grams
    per_kind: Counter[str] = Counter()
    terms_of: list[list[tuple[str, str]]] = []
    for i, it in enumerate(data.items):
        bank = bank_name(data, i)
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
    overlap, tells = _overlap_tell(data, cfg, grams)
    res.findings += tells
    res.stats = {"items": len(data.items), "terms": sum(len(t) for t in terms_of),
                 "ngram": n, "containment": cfg.leak_containment,
                 "findings_by_kind": {k: v for k, v in sorted(per_kind.items()) if v},
                 "context_overlap": overlap}
    return res


OVERLAP_N = 3
"""Word n-gram size of the context-overlap tell (trigrams: short enough to catch a reworded clause)."""


def _overlap_tell(data: AuditData, cfg: AuditConfig, grams: Grams) -> tuple[dict[str, Any], list[FindingRecord]]:
    """Per question type: how often is the answer the option sharing the most word trigrams with
    the item's visible fields? Above chance, a model can match phrases instead of reasoning (an
    answer written from the same narration it is asked about)."""
    table: dict[str, Any] = {}
    out: list[FindingRecord] = []
    groups = {t: xs for t, xs in by_type(data).items() if any(it.visible for _, it in xs)}
    tested = [t for t, xs in groups.items() if len(xs) >= cfg.min_items_per_test]
    m = max(1, len(tested))
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
        row: dict[str, Any] = {"items": n, "answer_mean_share": rounded(np.mean(ans_share), 3),
                               "distractor_mean_share": rounded(np.mean(dis_share), 3),
                               "pick_most_overlap_accuracy": rounded(len(hits) / n, 3), "chance": rounded(p0, 3)}
        if qtype in tested:
            p = binom_greater(len(hits), n, p0)
            row["p"] = pvalue(p)
            if p < cfg.alpha / m:
                out.append(finding(
                    "leakage", "answer_overlaps_context", "warning",
                    f"{qtype}: the option sharing the most word {OVERLAP_N}-grams with the visible fields is the "
                    f"answer in {len(hits)}/{n} items ({len(hits) / n:.0%}, chance {p0:.0%}; binomial p={pvalue(p)})",
                    items=hits, fields=["options[answer]"],
                    numbers={"question_type": qtype, "accuracy": rounded(len(hits) / n, 3), "chance": rounded(p0, 3),
                             "p": pvalue(p), "answer_mean_share": row["answer_mean_share"],
                             "distractor_mean_share": row["distractor_mean_share"]}))
        table[qtype] = row
    return table, out


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


# --------------------------------------------------------------------------- 3. position


def check_position(data: AuditData, cfg: AuditConfig) -> CheckResult:
    from scipy.stats import chisquare

    key = "position"
    res = CheckResult(key)
    if not data.mcq:
        return CheckResult(key, "skipped", "no multiple-choice items with a known answer")
    groups: dict[tuple[str, int], list[tuple[int, MCQ]]] = defaultdict(list)
    for i, it in data.mcq:
        groups[(it.question_type, len(it.options))].append((i, it))
    tested = [g for g, xs in groups.items() if len(xs) >= cfg.min_items_per_test and len(xs) >= 5 * g[1]]
    m = max(1, len(tested))
    table = {}
    for (qtype, k), xs in sorted(groups.items()):
        counts = np.bincount([it.answer for _, it in xs], minlength=k)
        row: dict[str, Any] = {"question_type": qtype, "options": k, "items": len(xs),
                               "counts": {LETTERS[j]: int(c) for j, c in enumerate(counts)}}
        res.series[f"{qtype} ({k} options)"] = counts.tolist()
        if (qtype, k) in tested:
            stat, p = chisquare(counts)
            row.update({"chi2": rounded(stat, 3), "p": pvalue(p), "significant": bool(p < cfg.alpha / m)})
            if p < cfg.alpha / m:
                expected = len(xs) / k
                resid = (counts - expected) / math.sqrt(expected)
                over = [j for j in range(k) if resid[j] >= 2] or [int(np.argmax(resid))]
                ids = [it.item_id for _, it in xs if it.answer in over]
                shares = ", ".join(f"{LETTERS[j]} {counts[j] / len(xs):.0%}" for j in over)
                res.findings.append(finding(
                    key, "position_bias", "error",
                    f"{qtype}: answers pile up at {shares} (expected {1 / k:.0%} each; chi-square p={pvalue(p)})",
                    items=ids, fields=["answer"],
                    numbers={"question_type": qtype, "counts": row["counts"], "chi2": row["chi2"], "p": pvalue(p),
                             "alpha_corrected": rounded(cfg.alpha / m, 6), "positions": [LETTERS[j] for j in over]}))
        else:
            row["note"] = f"not tested: fewer than max({cfg.min_items_per_test}, 5 x options) items"
        table[f"{qtype}/{k}"] = row
    res.stats = {"groups": table, "tests": len(tested), "alpha": cfg.alpha}
    return res


# --------------------------------------------------------------------------- 4. length


def check_length(data: AuditData, cfg: AuditConfig) -> CheckResult:
    key = "length"
    res = CheckResult(key)
    if not data.mcq:
        return CheckResult(key, "skipped", "no multiple-choice items with a known answer")
    groups = by_type(data)
    tested = [t for t, xs in groups.items() if len(xs) >= cfg.min_items_per_test]
    m = max(1, 2 * len(tested))
    table = {}
    for qtype, xs in groups.items():
        longest, shortest, chance = [], [], []
        ans_len, dis_len = [], []
        for i, it in xs:
            lens = np.array([len(o.strip()) for o in it.options])
            a = it.answer
            assert a is not None
            others = np.delete(lens, a)
            ans_len.append(int(lens[a]))
            dis_len += others.tolist()
            chance.append(1 / len(lens))
            if lens[a] > others.max():
                longest.append(it.item_id)
            if lens[a] < others.min():
                shortest.append(it.item_id)
            r_long = lens[a] / max(1, others.max())
            r_short = others.min() / max(1, lens[a])
            for ratio, kind, word in ((r_long, "answer_much_longer", "longer"),
                                      (r_short, "answer_much_shorter", "shorter")):
                if ratio > cfg.length_ratio:
                    res.findings.append(finding(
                        key, kind, "warning",
                        f"the answer is {ratio:.2f}x {word} than {'every' if word == 'longer' else 'the shortest'} "
                        f"distractor (rule: > {cfg.length_ratio})" if word == "longer" else
                        f"every distractor is at least {ratio:.2f}x longer than the answer (rule: > {cfg.length_ratio})",
                        items=[it.item_id], fields=[f"options[{a}]"],
                        numbers={"ratio": rounded(ratio, 3), "answer_chars": int(lens[a]),
                                 "distractor_chars": others.tolist()},
                        bank=bank_name(data, i)))
        n = len(xs)
        p0 = float(np.mean(chance))
        row: dict[str, Any] = {"items": n, "answer_mean_chars": rounded(np.mean(ans_len), 1),
                               "distractor_mean_chars": rounded(np.mean(dis_len), 1),
                               "pick_longest_accuracy": rounded(len(longest) / n, 3),
                               "pick_shortest_accuracy": rounded(len(shortest) / n, 3), "chance": rounded(p0, 3)}
        res.series[qtype] = {"answer": ans_len, "distractor": dis_len}
        if qtype in tested:
            for name, hit in (("longest", longest), ("shortest", shortest)):
                p = binom_greater(len(hit), n, p0)
                row[f"p_{name}"] = pvalue(p)
                if p < cfg.alpha / m:
                    res.findings.append(finding(
                        key, f"{name}_option_tell", "error",
                        f"{qtype}: picking the {name} option is right in {len(hit)}/{n} items "
                        f"({len(hit) / n:.0%}, chance {p0:.0%}; one-sided binomial p={pvalue(p)})",
                        items=hit, fields=["options[answer]"],
                        numbers={"question_type": qtype, "accuracy": rounded(len(hit) / n, 3), "chance": rounded(p0, 3),
                                 "p": pvalue(p), "n": n, "alpha_corrected": rounded(cfg.alpha / m, 6)}))
        else:
            row["note"] = f"not tested: fewer than {cfg.min_items_per_test} items"
        table[qtype] = row
    res.stats = {"per_question_type": table, "ratio_rule": cfg.length_ratio, "alpha": cfg.alpha}
    return res


# --------------------------------------------------------------------------- 5. similar options


def _embed_unique(embed: Callable[[list[str]], np.ndarray], texts: list[str]) -> tuple[np.ndarray, dict[str, int]]:
    uniq = sorted(set(texts))
    vecs = embed(uniq) if uniq else np.zeros((0, 1), dtype=np.float32)
    return np.asarray(vecs, dtype=np.float32), {t: j for j, t in enumerate(uniq)}


def check_similar_options(data: AuditData, cfg: AuditConfig) -> CheckResult:
    key = "similar_options"
    res = CheckResult(key)
    if data.embed is None:
        return CheckResult(key, "skipped", "embeddings=false")
    xs = [(i, it) for i, it in enumerate(data.items) if len(it.options) >= 2]
    if not xs:
        return CheckResult(key, "skipped", "no items with options")
    vecs, at = _embed_unique(data.embed, [o.strip() for _, it in xs for o in it.options])
    kmax = max(len(it.options) for _, it in xs)
    idx = np.full((len(xs), kmax), -1, dtype=np.int64)
    for r, (_, it) in enumerate(xs):
        idx[r, :len(it.options)] = [at[o.strip()] for o in it.options]
    ans_dis: dict[str, list[float]] = defaultdict(list)
    dis_dis: dict[str, list[float]] = defaultdict(list)
    counts: Counter[str] = Counter()
    found: list[tuple[int, int, int, FindingRecord]] = []
    for a in range(kmax):
        for b in range(a + 1, kmax):
            rows = np.nonzero((idx[:, a] >= 0) & (idx[:, b] >= 0))[0]
            if not len(rows):
                continue
            sims = np.einsum("nd,nd->n", vecs[idx[rows, a]], vecs[idx[rows, b]])
            for r, s in zip(rows.tolist(), sims.tolist(), strict=True):
                i, it = xs[r]
                is_ans = it.answer in (a, b)
                (ans_dis if is_ans else dis_dis)[it.question_type].append(s)
                if norm(it.options[a]) == norm(it.options[b]):
                    continue  # the same text: a structure finding
                if s >= cfg.option_dup_sim:
                    kind, sev, what = "near_duplicate_options", "warning", \
                        f"options {letter(a)} and {letter(b)} say nearly the same (cosine {s:.3f})"
                elif is_ans and s >= cfg.answer_close_sim:
                    d = b if it.answer == a else a
                    kind, sev, what = "distractor_close_to_answer", "warning", \
                        f"distractor {letter(d)} is so close to the answer {letter(it.answer)} that it may also be correct (cosine {s:.3f})"
                else:
                    continue
                counts[kind] += 1
                fields = [f"options[{a}]", f"options[{b}]"]
                if kind == "distractor_close_to_answer" and it.answer == b:
                    fields.reverse()  # the answer first
                found.append((r, a, b, finding(key, kind, sev, what, items=[it.item_id], fields=fields,
                                               numbers={"cosine": rounded(s)}, bank=bank_name(data, i))))
    res.findings = [f for *_, f in sorted(found, key=lambda x: x[:3])]  # in item order
    table = {}
    for qtype in sorted(set(ans_dis) | set(dis_dis)):
        row = {}
        for name, vals in (("answer_distractor", ans_dis[qtype]), ("distractor_distractor", dis_dis[qtype])):
            if vals:
                q = np.percentile(vals, [50, 90, 99])
                row[name] = {"pairs": len(vals), "median": rounded(q[0], 3), "p90": rounded(q[1], 3),
                             "p99": rounded(q[2], 3), "max": rounded(max(vals), 3)}
        table[qtype] = row
    res.series = {"answer_distractor": [s for v in ans_dis.values() for s in v],
                  "distractor_distractor": [s for v in dis_dis.values() for s in v],
                  "thresholds": {"option_dup_sim": cfg.option_dup_sim, "answer_close_sim": cfg.answer_close_sim}}
    res.stats = {"per_question_type": table, "option_dup_sim": cfg.option_dup_sim,
                 "answer_close_sim": cfg.answer_close_sim, "findings_by_kind": dict(sorted(counts.items()))}
    return res


# --------------------------------------------------------------------------- 6. duplicates


def item_text(it: MCQ) -> str:
    """What is embedded for an item: its question and options (its visible fields when it has no
    options). The visible context is compared lexically (:func:`context_vectors`): a whole-item
    embedding is dominated by a shared context (items of one clip read alike whatever they ask)."""
    if it.options:
        return "\n".join(p for p in (it.question, *it.options) if p)
    return "\n".join(v for v in it.visible.values() if v) or it.question


def context_text(it: MCQ, visible: list[tuple[str, str]] | None = None) -> str:
    """The normalised visible context of an item with options ("" without options: an item
    without options is its visible text, compared semantically)."""
    if not it.options:
        return ""
    return " ".join(v for p, v in (visible if visible is not None else _visible(it)) if p != "question")


def item_signature(it: MCQ, visible: list[tuple[str, str]] | None = None) -> str:
    """Exact-duplicate key: normalised question, options as a set, visible fields."""
    vis = sorted((p, v) for p, v in (visible if visible is not None else _visible(it)) if p != "question")
    key = json.dumps([norm(it.question), sorted(norm(o) for o in it.options), vis], ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()


BUCKETS = 1 << 16


def context_vectors(texts: list[str], grams: Grams | None = None) -> Any:
    """The set of word trigrams of each (normalised) text, hashed into 2^16 columns, rows
    L2-normalised (sparse): the dot product of two rows is the cosine overlap of two contexts.
    Sets, not counts: formulaic narration ("with his right hand") would otherwise make every
    context alike. An empty text gets a column of its own, so two items without context count as
    having the same (no) context. Each distinct text is processed once."""
    from scipy.sparse import csr_matrix

    grams = grams or Grams()
    distinct: dict[str, int] = {}
    row_of = np.array([distinct.setdefault(t, len(distinct)) for t in texts], dtype=np.int64)
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    for r, text in enumerate(distinct):
        keys = grams.keys(text, min(3, max(1, len(text.split()))))
        buckets = np.unique(keys % np.uint64(BUCKETS - 1)).astype(np.int64) if len(keys) else np.array([BUCKETS - 1])
        rows.append(np.full(len(buckets), r))
        cols.append(buckets)
    r_, c_ = (np.concatenate(x) if x else np.zeros(0, dtype=np.int64) for x in (rows, cols))
    X = csr_matrix((np.ones(len(c_), dtype=np.float32), (r_, c_)), shape=(len(distinct), BUCKETS))
    X = X.multiply(1 / np.sqrt(np.maximum(np.asarray(X.sum(axis=1)).ravel(), 1))[:, None]).tocsr()
    return X[row_of]


def row_dots(X: Any, Y: Any, pairs: list[tuple[int, int]]) -> np.ndarray:
    if not pairs:
        return np.zeros(0, dtype=np.float32)
    ii, jj = (np.array(x) for x in zip(*pairs, strict=True))
    return np.asarray(X[ii].multiply(Y[jj]).sum(axis=1)).ravel()


def combined(sem: np.ndarray, lex: Any, seed: int, dims: int = 128) -> np.ndarray:
    """One vector per item whose inner products approximate (semantic + lexical) / 2: the
    semantic part as is, the lexical part by a seeded Gaussian random projection."""
    rng = np.random.default_rng(seed)
    R = rng.standard_normal((BUCKETS, dims), dtype=np.float32) / np.sqrt(dims)
    proj = np.asarray(lex @ R, dtype=np.float32)
    proj /= np.maximum(np.linalg.norm(proj, axis=1, keepdims=True), 1e-9)
    return np.hstack([sem, proj]).astype(np.float32) / np.sqrt(2)


def similar_pairs(a: np.ndarray, b: np.ndarray | None, threshold: float, block: int = 4096) -> list[tuple[int, int, float]]:
    """Pairs (i, j, inner product) at or above ``threshold`` between the rows of ``a`` and of
    ``b`` (or within ``a``, i < j): an exact FAISS range search, in blocks of queries."""
    import faiss

    base = a if b is None else b
    if not len(a) or not len(base):
        return []
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(np.ascontiguousarray(base, dtype=np.float32))
    out = []
    for s in range(0, len(a), block):
        lims, dist, ids = index.range_search(np.ascontiguousarray(a[s:s + block], dtype=np.float32),
                                             float(threshold) - 1e-6)
        for r in range(len(lims) - 1):
            i = s + r
            for j, d in zip(ids[lims[r]:lims[r + 1]].tolist(), dist[lims[r]:lims[r + 1]].tolist(), strict=True):
                if b is None and j <= i:
                    continue
                out.append((i, j, d))
    return sorted(out)


def nearest(a: np.ndarray, b: np.ndarray | None, block: int = 4096) -> np.ndarray:
    """For each row of ``a`` its highest inner product with another row (of ``b``, or of ``a``)."""
    import faiss

    base = a if b is None else b
    if not len(a) or len(base) < (2 if b is None else 1):
        return np.zeros(0, dtype=np.float32)
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(np.ascontiguousarray(base, dtype=np.float32))
    k = 2 if b is None else 1
    best = []
    for s in range(0, len(a), block):
        dist, ids = index.search(np.ascontiguousarray(a[s:s + block], dtype=np.float32), k)
        if b is None:  # drop the row itself (with an exact twin both are 1.0 anyway)
            own = ids[:, 0] == np.arange(s, s + len(ids))
            best.append(np.where(own, dist[:, 1], dist[:, 0]))
        else:
            best.append(dist[:, 0])
    return np.concatenate(best)


def knn(a: np.ndarray, b: np.ndarray | None, k: int, block: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` highest inner products of each row of ``a`` with the rows of ``b`` (or with the
    other rows of ``a``): exact FAISS search in blocks. Returns (similarities, indices), -1 padded."""
    import faiss

    base = a if b is None else b
    k = min(k, len(base) - (b is None))
    if k < 1 or not len(a):
        return np.zeros((len(a), 0), dtype=np.float32), np.zeros((len(a), 0), dtype=np.int64)
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(np.ascontiguousarray(base, dtype=np.float32))
    sims, ids = [], []
    for s in range(0, len(a), block):
        d, i = index.search(np.ascontiguousarray(a[s:s + block], dtype=np.float32), k + (b is None))
        if b is None:  # drop the row itself
            own = i == np.arange(s, s + len(i))[:, None]
            keep = np.argsort(own, axis=1, kind="stable")[:, :k]
            d, i = np.take_along_axis(d, keep, 1), np.take_along_axis(i, keep, 1)
        sims.append(d)
        ids.append(i)
    return np.concatenate(sims), np.concatenate(ids)


def _near_pairs(sem_a: np.ndarray, lex_a: Any, sem_b: np.ndarray | None, lex_b: Any, cfg: AuditConfig,
                seed: int) -> tuple[list[tuple[int, int, float, float]], np.ndarray]:
    """Pairs whose question+options cosine >= item_dup_sim and context overlap >= context_dup_sim:
    candidates are each item's ``DUP_NEIGHBOURS`` nearest by :func:`combined` vectors above a cut
    (with a margin for the projection's error), then both similarities are computed exactly.
    Also each item's nearest combined similarity (for the histogram)."""
    ca = combined(sem_a, lex_a, seed)
    cb = None if sem_b is None else combined(sem_b, lex_b, seed)
    sims, ids = knn(ca, cb, DUP_NEIGHBOURS)
    cut = (cfg.item_dup_sim + cfg.context_dup_sim) / 2 - 0.08
    cand = sorted({(i, int(j)) if cb is not None or i < j else (int(j), i)
                   for i, row in enumerate(ids) for j, d in zip(row, sims[i], strict=True) if j >= 0 and d >= cut})
    nn = sims[:, 0] if sims.shape[1] else np.zeros(0, dtype=np.float32)
    if not cand:
        return [], nn
    other_sem = sem_a if sem_b is None else sem_b
    other_lex = lex_a if lex_b is None else lex_b
    sem = np.einsum("nd,nd->n", sem_a[[i for i, _ in cand]], other_sem[[j for _, j in cand]])
    lex = row_dots(lex_a, other_lex, cand)
    keep = [(i, j, float(s), float(x)) for (i, j), s, x in zip(cand, sem, lex, strict=True)
            if s >= cfg.item_dup_sim - 1e-6 and x >= cfg.context_dup_sim - 1e-6]
    return keep, nn


DUP_NEIGHBOURS = 10
"""Candidates per item for near-duplicates: a cluster larger than this still shows up, each
member with its ten closest."""


def check_duplicates(data: AuditData, cfg: AuditConfig) -> CheckResult:
    key = "duplicates"
    res = CheckResult(key)
    if data.bundles is not None or not data.items:
        return CheckResult(key, "skipped", "no items")
    sig = [item_signature(it, data.visible(i)) for i, it in enumerate(data.items)]
    by_sig: dict[str, list[int]] = defaultdict(list)
    for i, s in enumerate(sig):
        by_sig[s].append(i)
    exact_pairs: set[tuple[int, int]] = set()
    for idxs in by_sig.values():
        if len(idxs) > 1:
            ids = [data.items[i].item_id for i in idxs]
            res.findings.append(finding(key, "duplicate_items", "error",
                                        f"{len(idxs)} items show the same question, options and visible fields",
                                        items=ids, fields=["question", "options", "visible"],
                                        numbers={"count": len(idxs)}))
            exact_pairs |= {(a, b) for a in idxs for b in idxs if a < b}
    against_sig: dict[str, list[str]] = defaultdict(list)
    for it in data.against:
        against_sig[item_signature(it)].append(it.item_id)
    for i, s in enumerate(sig):
        if s in against_sig:
            res.findings.append(finding(key, "duplicate_in_against", "error",
                                        f"the same item is in {data.against_name} as {', '.join(against_sig[s][:5])}",
                                        items=[data.items[i].item_id], fields=["question", "options", "visible"],
                                        numbers={"against_items": against_sig[s]}, bank=bank_name(data, i)))
    stats: dict[str, Any] = {"items": len(data.items), "exact_duplicate_groups": sum(len(v) > 1 for v in by_sig.values()),
                             "item_dup_sim": cfg.item_dup_sim, "context_dup_sim": cfg.context_dup_sim}
    if data.against:
        stats["against"] = {"name": data.against_name, "items": len(data.against),
                            "exact": sum(s in against_sig for s in sig)}
    if data.embed is not None:
        both = data.items + data.against
        sem_all = np.asarray(data.embed([item_text(it) for it in both]), dtype=np.float32)
        lex_all = context_vectors([context_text(it, data.visible(i) if i < len(data.items) else None)
                                   for i, it in enumerate(both)], data.grams)
        n = len(data.items)
        sem, lex = sem_all[:n], lex_all[:n]
        pairs, nn = _near_pairs(sem, lex, None, None, cfg, data.seed)
        for i, j, s, x in pairs:
            if (i, j) in exact_pairs:
                continue
            a, b = data.items[i], data.items[j]
            res.findings.append(finding(key, "near_duplicate_items", "warning",
                                        f"{a.item_id} and {b.item_id} ask nearly the same (cosine {s:.3f}) on "
                                        f"nearly the same context (overlap {x:.2f})",
                                        items=[a.item_id, b.item_id], fields=["question", "options", "visible"],
                                        numbers={"cosine": rounded(s), "context_overlap": rounded(x, 3)}))
        res.series["nearest"] = nn.tolist()
        if len(nn):
            stats["nearest_neighbour"] = {"median": rounded(np.median(nn), 3), "p99": rounded(np.percentile(nn, 99), 3),
                                          "max": rounded(nn.max(), 3)}
        if data.against:
            exact_against = {i for i, s in enumerate(sig) if s in against_sig}
            pairs, ann = _near_pairs(sem, lex, sem_all[n:], lex_all[n:], cfg, data.seed)
            for i, j, s, x in pairs:
                if i in exact_against and item_signature(data.against[j]) == sig[i]:
                    continue
                res.findings.append(finding(key, "near_duplicate_in_against", "warning",
                                            f"{data.items[i].item_id} asks nearly the same as "
                                            f"{data.against[j].item_id} of {data.against_name} (cosine {s:.3f}, "
                                            f"context overlap {x:.2f})",
                                            items=[data.items[i].item_id], fields=["question", "options", "visible"],
                                            numbers={"cosine": rounded(s), "context_overlap": rounded(x, 3),
                                                     "against_item": data.against[j].item_id},
                                            bank=bank_name(data, i)))
            res.series["nearest_against"] = ann.tolist()
            stats["against"]["nearest_neighbour"] = {"median": rounded(np.median(ann), 3), "max": rounded(ann.max(), 3)}
    res.stats = stats
    return res


# --------------------------------------------------------------------------- 7. choice-only shortcut

NEGATION = {"not", "no", "never", "nothing", "none", "nobody", "cannot", "without", "nor", "t"}
ABSOLUTE = {"always", "never", "all", "every", "only", "completely", "entirely", "none", "must"}
HEDGE = {"may", "might", "could", "probably", "likely", "possibly", "perhaps", "some", "maybe", "usually"}
DENSE = ("log_chars", "words", "length_z", "is_longest", "is_shortest", "length_rank", "question_overlap",
         "question_overlap_rel", "centrality", "centrality_rel", "commas", "ands", "negation", "absolute",
         "hedge", "digits", "template_start", "distinct_word_ratio")


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def option_features(items: list[MCQ], vocab: list[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per item and option, features of the options alone (and the question): length and its
    rank in the item, overlap with the question and with the other options, word patterns, and
    presence of the bank's frequent words. Returns (F[n, k, d], mask[n, k], names)."""
    kmax = max(len(it.options) for it in items)
    names = [*DENSE, *(f"word:{w}" for w in vocab)]
    col = {w: len(DENSE) + j for j, w in enumerate(vocab)}
    F = np.zeros((len(items), kmax, len(names)), dtype=np.float32)
    mask = np.zeros((len(items), kmax), dtype=bool)
    for r, it in enumerate(items):
        k = len(it.options)
        mask[r, :k] = True
        toks = [norm(o).split() for o in it.options]
        sets = [set(t) for t in toks]
        q = set(norm(it.question).split())
        chars = np.array([len(o.strip()) for o in it.options], dtype=np.float64)
        z = (chars - chars.mean()) / (chars.std() + 1e-9)
        rank = np.argsort(np.argsort(chars)) / max(1, k - 1)
        qov = np.array([_jaccard(s, q) for s in sets])
        cen = np.array([np.mean([_jaccard(sets[a], sets[b]) for b in range(k) if b != a]) for a in range(k)])
        firsts = Counter(t[0] for t in toks if t)
        for j in range(k):
            t, s = toks[j], sets[j]
            F[r, j, :len(DENSE)] = [
                math.log1p(chars[j]), len(t), z[j], chars[j] == chars.max() and (chars == chars.max()).sum() == 1,
                chars[j] == chars.min() and (chars == chars.min()).sum() == 1, rank[j], qov[j], qov[j] - qov.mean(),
                cen[j], cen[j] - cen.mean(), it.options[j].count(","), t.count("and"), bool(s & NEGATION),
                bool(s & ABSOLUTE), bool(s & HEDGE), any(c.isdigit() for c in it.options[j]),
                bool(t) and firsts[t[0]] > k / 2, len(s) / max(1, len(t)),
            ]
            for w in s:
                if w in col:
                    F[r, j, col[w]] = 1.0
    return F, mask, names


def option_vocab(items: list[MCQ], limit: int = 300, min_items: int = 3) -> list[str]:
    """Words that occur in the options of at least ``min_items`` items but not in every option
    of most items (those cancel out within an item)."""
    df: Counter[str] = Counter()
    everywhere: Counter[str] = Counter()
    for it in items:
        sets = [set(norm(o).split()) for o in it.options]
        df.update(set().union(*sets))
        everywhere.update(set.intersection(*sets))
    words = [w for w, c in df.items() if c >= min_items and everywhere[w] < 0.9 * c]
    return sorted(words, key=lambda w: (-df[w], w))[:limit]


def _fit_logit(F: np.ndarray, mask: np.ndarray, y: np.ndarray, l2: float) -> np.ndarray:
    """Conditional logit (softmax over an item's options), L2-penalised, by L-BFGS."""
    from scipy.optimize import minimize

    n, k, d = F.shape
    Fm = F.reshape(n * k, d).astype(np.float64)

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        s = (Fm @ w).reshape(n, k)
        s = np.where(mask, s, -np.inf)
        mx = s.max(axis=1, keepdims=True)
        e = np.exp(s - mx)
        z = e.sum(axis=1, keepdims=True)
        p = e / z
        nll = -(s[np.arange(n), y] - mx[:, 0] - np.log(z[:, 0])).sum()
        g = p.copy()
        g[np.arange(n), y] -= 1
        grad = Fm.T @ g.reshape(n * k)
        return nll + 0.5 * l2 * w @ w, grad + l2 * w

    w0 = np.zeros(d)
    return minimize(loss, w0, jac=True, method="L-BFGS-B", options={"maxiter": 300}).x


def _predict(F: np.ndarray, mask: np.ndarray, w: np.ndarray) -> np.ndarray:
    s = np.where(mask, F.astype(np.float64) @ w, -np.inf)
    s -= s.max(axis=1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=1, keepdims=True)


def _standardise(F: np.ndarray, mask: np.ndarray, train: np.ndarray) -> np.ndarray:
    rows = F[train][mask[train]]
    mu, sd = rows.mean(axis=0), rows.std(axis=0)
    sd[sd < 1e-9] = 1.0
    return (F - mu) / sd


def folds_for(items: list[MCQ], k: int, seed: int) -> np.ndarray:
    """Fold of each item; items sharing a group (clip, video) share a fold."""
    groups = sorted({it.group or it.item_id for it in items})
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(groups))
    fold_of = {groups[g]: r % k for r, g in enumerate(order)}
    return np.array([fold_of[it.group or it.item_id] for it in items])


def one_blas_thread() -> Any:
    """The classifier's products are small: BLAS threads only add contention (measured 40x
    slower with 2 threads on a loaded 2-core machine)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - it comes with scikit-learn, a sentence-transformers dependency
        return contextlib.nullcontext()
    return threadpool_limits(1)


def shortcut_cv(items: list[MCQ], cfg: AuditConfig, seed: int) -> dict[str, Any]:
    """Out-of-fold probability of the answer and prediction per item, and the features the
    classifier fitted on every item leans on most."""
    with one_blas_thread():
        return _shortcut_cv(items, cfg, seed)


def _shortcut_cv(items: list[MCQ], cfg: AuditConfig, seed: int) -> dict[str, Any]:
    vocab = option_vocab(items)
    F, mask, names = option_features(items, vocab)
    y = np.array([it.answer for it in items])
    folds = folds_for(items, cfg.shortcut_folds, seed)
    p_answer = np.zeros(len(items))
    predicted = np.zeros(len(items), dtype=int)
    for f in range(cfg.shortcut_folds):
        test = folds == f
        train = ~test
        if not test.any() or not train.any():
            continue
        Fs = _standardise(F, mask, train)
        w = _fit_logit(Fs[train], mask[train], y[train], cfg.shortcut_l2)
        P = _predict(Fs[test], mask[test], w)
        p_answer[test] = P[np.arange(test.sum()), y[test]]
        predicted[test] = P.argmax(axis=1)
    Fs = _standardise(F, mask, np.ones(len(items), dtype=bool))
    w = _fit_logit(Fs, mask, y, cfg.shortcut_l2)
    top = np.argsort(-np.abs(w))[:8]
    return {"p_answer": p_answer, "correct": predicted == y,
            "weights": [(names[j], rounded(w[j], 3)) for j in top if abs(w[j]) > 1e-6]}


def check_shortcut(data: AuditData, cfg: AuditConfig) -> CheckResult:
    key = "shortcut"
    res = CheckResult(key)
    groups = by_type(data)
    if not groups:
        return CheckResult(key, "skipped", "no multiple-choice items with a known answer")
    tested = [t for t, xs in groups.items() if len(xs) >= cfg.shortcut_min_items]
    m = max(1, len(tested))
    table = {}
    for qtype, xs in groups.items():
        items = [it for _, it in xs]
        if qtype not in tested:
            table[qtype] = {"items": len(items), "note": f"not tested: fewer than {cfg.shortcut_min_items} items"}
            continue
        out = shortcut_cv(items, cfg, data.seed)
        n = len(items)
        k = int(out["correct"].sum())
        p0 = float(np.mean([1 / len(it.options) for it in items]))
        p = binom_greater(k, n, p0)
        order = np.argsort(-out["p_answer"], kind="stable")
        easiest = [{"item": items[r].item_id, "p_answer": rounded(out["p_answer"][r], 3)} for r in order[:10]]
        table[qtype] = {"items": n, "folds": cfg.shortcut_folds, "accuracy": rounded(k / n, 3),
                        "chance": rounded(p0, 3), "ci95": clopper_pearson(k, n), "p": pvalue(p),
                        "significant": bool(p < cfg.alpha / m), "top_features": out["weights"], "easiest": easiest}
        res.series[qtype] = out["p_answer"].tolist()
        if p < cfg.alpha / m:
            easy = [items[r].item_id for r in order
                    if out["correct"][r] and out["p_answer"][r] >= cfg.shortcut_confidence]
            res.findings.append(finding(
                key, "choice_only_shortcut", "error",
                f"{qtype}: a classifier that sees only the options is right in {k}/{n} items ({k / n:.0%}, "
                f"chance {p0:.0%}; binomial p={pvalue(p)}); listed: the items it solves with p >= "
                f"{cfg.shortcut_confidence}",
                items=easy, fields=["options"],
                numbers={"question_type": qtype, "accuracy": rounded(k / n, 3), "chance": rounded(p0, 3),
                         "ci95": clopper_pearson(k, n), "p": pvalue(p), "alpha_corrected": rounded(cfg.alpha / m, 6),
                         "top_features": out["weights"]}))
    res.stats = {"per_question_type": table, "alpha": cfg.alpha}
    return res


# --------------------------------------------------------------------------- 8. blind solvability


def check_blind(data: AuditData, cfg: AuditConfig) -> CheckResult:
    key = "blind"
    res = CheckResult(key)
    if data.nocontext is None:
        return CheckResult(key, "skipped", "no nocontext= results given")
    by_id = {it.item_id: it for it in data.items}
    rows = [r for r in data.nocontext if not by_id or r["item_id"] in by_id]
    missing = len(by_id.keys() - {r["item_id"] for r in data.nocontext}) if by_id else 0
    models = sorted({m for r in rows for m in r.get("correct", {})})
    table: dict[str, Any] = {}
    solved: dict[str, list[str]] = defaultdict(list)
    tested = {(m, q) for m in models for q in {r["question_type"] for r in rows}}
    bonf = max(1, len(tested))
    for m in models:
        per_q: dict[str, dict[str, Any]] = {}
        letters: Counter[str] = Counter()
        unparsed = 0
        for qtype in sorted({r["question_type"] for r in rows}):
            rs = [r for r in rows if r["question_type"] == qtype and m in r.get("correct", {})]
            if not rs:
                continue
            trials = sum(int(r.get("shuffles", len(r.get("answers", {}).get(m, [])))) for r in rs)
            right = sum(int(r["correct"][m]) for r in rs)
            first = [a for r in rs for a in r.get("answers", {}).get(m, [])[:1]]
            k_first = sum(bool(a.get("correct")) for a in first)
            chance = float(np.mean([_chance(r, m, by_id) for r in rs]))
            p = binom_greater(k_first, len(first), chance) if first else 1.0
            per_q[qtype] = {"items": len(rs), "trials": trials, "accuracy": rounded(right / trials, 3) if trials else None,
                            "first_shuffle_accuracy": rounded(k_first / len(first), 3) if first else None,
                            "chance": rounded(chance, 3), "ci95_first_shuffle": clopper_pearson(k_first, len(first)),
                            "p": pvalue(p)}
            if first and p < cfg.alpha / bonf:
                res.findings.append(finding(
                    key, "blind_above_chance", "warning",
                    f"{m} answers {qtype} items without context {k_first}/{len(first)} right on the first shuffle "
                    f"({k_first / len(first):.0%}, chance {chance:.0%}; binomial p={pvalue(p)})",
                    items=[], fields=[f"nocontext.correct.{m}"],
                    numbers={"model": m, "question_type": qtype, "accuracy_first_shuffle": rounded(k_first / len(first), 3),
                             "accuracy_all_shuffles": per_q[qtype]["accuracy"], "chance": rounded(chance, 3),
                             "p": pvalue(p)}))
            for r in rs:
                if int(r["correct"][m]) > cfg.blind_max_correct:
                    solved[r["item_id"]].append(m)
                for a in r.get("answers", {}).get(m, []):
                    if a.get("letter"):
                        letters[str(a["letter"]).lower()] += 1
                    else:
                        unparsed += 1
        table[m] = {"per_question_type": per_q, "letters_chosen": dict(sorted(letters.items())), "unparsed": unparsed}
    for r in rows:
        if r["item_id"] in solved:
            ms = solved[r["item_id"]]
            res.findings.append(finding(
                key, "solved_without_context", "warning",
                f"answered correctly without context in more than {cfg.blind_max_correct} shuffles by {', '.join(ms)}",
                items=[r["item_id"]], fields=[f"nocontext.correct.{m}" for m in ms],
                numbers={"correct": {m: int(r['correct'][m]) for m in ms}, "shuffles": r.get("shuffles")}))
    res.stats = {"items_with_results": len(rows), "bank_items_without_results": missing, "models": table,
                 "max_correct": cfg.blind_max_correct,
                 "kept_by_nocontext": sum(bool(r.get("kept")) for r in rows)}
    return res


def _chance(row: dict[str, Any], model: str, by_id: dict[str, MCQ]) -> float:
    """1 / options of an item: ``n_options``, else the shuffle's order, else the bank's item."""
    answers = row.get("answers", {}).get(model) or [{}]
    k = int(row.get("n_options") or len(answers[0].get("order") or []))
    if not k and row["item_id"] in by_id:
        k = len(by_id[row["item_id"]].options)
    return 1 / k if k >= 2 else 0.25


# --------------------------------------------------------------------------- 9. digital bundles


def check_digital(data: AuditData, cfg: AuditConfig) -> CheckResult:
    """Re-runs the digital generator's own validators on every item of every bundle (time
    windows, past items before now, participants, text, duplicates) and checks what the
    generator guarantees by construction: time order, unique ids, and the cue in its key
    list as the latest (or upcoming) item."""
    from generators import digital as D
    from schemas import digital as S

    key = "digital"
    res = CheckResult(key)
    if data.bundles is None:
        return CheckResult(key, "skipped", "not a digital run")
    known = {"window_past_days", "window_future_days", "cue_recent_minutes"}
    dcfg = D.DigitalConfig(**{k: v for k, v in data.digital_config.items() if k in known})
    rules: Counter[str] = Counter()
    cued: Counter[str] = Counter()
    for b in data.bundles:
        bid = str(b.get("bundle_id", "?"))
        try:
            bundle = S.DigitalBundle.model_validate(b)
        except ValidationError as e:
            for err in e.errors()[:5]:
                res.findings.append(finding(key, "invalid_bundle", "error", f"not a digital bundle: {err['msg']}",
                                            items=[bid], fields=[_loc(err["loc"])]))
            continue
        if bundle.cue:
            cued[bundle.cue.app.value] += 1
        for f in _bundle_findings(bundle, b, dcfg, D, S):
            rules[f.kind] += 1
            res.findings.append(f)
    res.stats = {"bundles": len(data.bundles), "cued_per_app": dict(sorted(cued.items())),
                 "findings_by_kind": dict(sorted(rules.items())),
                 "windows": {k: getattr(dcfg, k) for k in sorted(known)}}
    return res


def _loc(loc: Iterable[Any]) -> str:
    out = ""
    for x in loc:
        out += f"[{x}]" if isinstance(x, int) else (f".{x}" if out else str(x))
    return out


_TIME_RULES = {"unparseable_datetime", "out_of_window", "future_past_item", "end_before_start"}
_PEOPLE_RULES = {"unknown_participant", "unknown_sender", "empty_conversation"}


def _app_items(app: str, state: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(path inside the app, item) of an app's full list."""
    base = f"apps.{app}"
    if app == "Maps":
        return [(f"{base}.maps.recent_places[{j}]", x) for j, x in enumerate(state["maps"]["recent_places"])]
    if app == "Music":
        music = state["music"]
        return [*((f"{base}.music.recent_tracks[{j}]", x) for j, x in enumerate(music["recent_tracks"])),
                (f"{base}.music.currently_playing", music["currently_playing"])]
    name = {"Calendar": "events", "Messaging": "conversations", "Notes": "notes", "Search": "searches",
            "Videos": "videos"}[app]
    return [(f"{base}.{name}[{j}]", x) for j, x in enumerate(state[name])]


ITEM_MODEL = {"Calendar": "CalendarEvent", "Messaging": "Conversation", "Notes": "Note", "Search": "SearchItem",
              "Videos": "Video", "Maps": "Place", "Music": "Track"}
ID_FIELD = {"Calendar": "event_id", "Messaging": "conversation_id", "Notes": "note_id", "Search": "search_id",
            "Videos": "video_id", "Maps": "place_id", "Music": "track_id"}
TIME_FIELD = {"Calendar": "start_datetime", "Notes": "last_updated", "Search": "timestamp",
              "Videos": "watch_timestamp", "Maps": "last_viewed", "Music": "played_at"}


def _bundle_findings(bundle: Any, raw: dict[str, Any], dcfg: Any, D: Any, S: Any) -> list[FindingRecord]:
    key = "digital"
    bid = bundle.bundle_id
    out: list[FindingRecord] = []
    now = dt.datetime.strptime(bundle.current_datetime, D.FMT_M)
    st = D.State(bundle.main_persona, bundle.related_personas, now, bundle.cue)

    def add(kind: str, what: str, fields: list[str], **numbers: Any) -> None:
        out.append(finding(key, kind, "error", what, items=[bid], fields=fields, numbers=numbers))

    all_ids: Counter[str] = Counter()
    for app, state in raw["apps"].items():
        try:
            entries = _app_items(app, state)
        except (KeyError, TypeError):
            add("invalid_app_state", f"{app}: the app state lacks its list", [f"apps.{app}"])
            continue
        model = getattr(S, ITEM_MODEL[app])
        parsed: list[tuple[str, Any]] = []
        for path, x in entries:
            try:
                parsed.append((path, model.model_validate(x)))
            except ValidationError as e:
                err = e.errors()[0]
                add("invalid_item", f"{app}: {err['msg']}", [f"{path}.{_loc(err['loc'])}".rstrip(".")])
        app_enum = D.App(app)
        passing = []
        for path, item in parsed:
            all_ids[getattr(item, ID_FIELD[app])] += 1
            chk = D.Checker(app_enum, st, dcfg)
            copy = item.model_copy(deep=True)
            kept = D.validate_items(app_enum, [copy], chk)
            if not chk.counts and kept:
                passing.append((path, item))
                continue
            hits = {k.split(".", 1)[1]: v for k, v in chk.counts.items()}
            names = sorted({h.rsplit(".", 1)[0] for h in hits})
            kind = ("time" if set(names) & _TIME_RULES else "participants" if set(names) & _PEOPLE_RULES else "text")
            fields = _validator_fields(app, path, item, copy)
            add(f"validator_{kind}", f"{app}: fails the digital validators ({', '.join(names)})", fields,
                rules=hits)
            if kept and not any(h.endswith(".dropped") for h in hits):
                passing.append((path, item))
        if passing:  # duplicates: items that pass alone but not together
            chk = D.Checker(app_enum, st, dcfg)
            kept = D.validate_items(app_enum, [x.model_copy(deep=True) for _, x in passing], chk)
            kept_ids = {getattr(x, ID_FIELD[app]) for x in kept}
            for path, item in passing:
                if getattr(item, ID_FIELD[app]) not in kept_ids:
                    add("validator_duplicate", f"{app}: duplicates an earlier item", [path])
        times = [_item_time(app, x) for _, x in parsed]
        if times != sorted(times):
            add("not_time_ordered", f"{app}: the full list is not in time order", [LIST_PATH[app]])
        if app == "Messaging":
            for path, c in parsed:
                stamps = [m.timestamp for m in c.messages]
                if stamps != sorted(stamps):
                    add("not_time_ordered", "Messaging: a conversation's messages are not in time order",
                        [f"{path}.messages"])
    for x, k in sorted(all_ids.items()):
        if k > 1:
            add("duplicate_id", f"the id {x} is used by {k} items", ["apps"], id=x, count=k)
    out += _cue_findings(bundle, raw, now, dcfg, D)
    return out


LIST_PATH = {"Calendar": "apps.Calendar.events", "Messaging": "apps.Messaging.conversations",
             "Notes": "apps.Notes.notes", "Search": "apps.Search.searches", "Videos": "apps.Videos.videos",
             "Maps": "apps.Maps.maps.recent_places", "Music": "apps.Music.music"}


def _item_time(app: str, x: Any) -> str:
    if app == "Messaging":
        return x.messages[-1].timestamp if x.messages else ""
    return getattr(x, TIME_FIELD[app])


def _validator_fields(app: str, path: str, before: Any, after: Any) -> list[str]:
    """The field paths the validators changed or objected to, as precisely as the item shows."""
    if app == "Messaging":
        fields = []
        if list(before.participants) != list(after.participants):
            fields.append(f"{path}.participants")
        kept = {m.message_id for m in after.messages}
        for j, m in enumerate(before.messages):
            if m.message_id not in kept:
                fields.append(f"{path}.messages[{j}]")
        return fields or [path]
    if app == "Calendar" and list(before.attendees) != list(after.attendees):
        return [f"{path}.attendees"]
    return [path]


def _cue_findings(bundle: Any, raw: dict[str, Any], now: dt.datetime, dcfg: Any, D: Any) -> list[FindingRecord]:
    key = "digital"
    bid = bundle.bundle_id
    out: list[FindingRecord] = []
    cue_app = bundle.cue.app.value if bundle.cue else None

    def add(kind: str, what: str, fields: list[str], **numbers: Any) -> None:
        out.append(finding(key, kind, "error", what, items=[bid], fields=fields, numbers=numbers))

    for app, state in raw["apps"].items():
        kname = next((k for k in state if k.startswith("key_")), None)
        keys = state.get(kname) if kname else None
        if bool(keys) != (app == cue_app):
            if app == cue_app:
                add("cue_not_in_key_list", f"{app} carries the cue but its key list is empty", [f"apps.{app}.{kname or 'key_*'}"])
            else:
                add("key_list_without_cue", f"{app} has key items but the cue is {'on ' + cue_app if cue_app else 'absent'}",
                    [f"apps.{app}.{kname}"])
    if cue_app is None or cue_app not in raw["apps"]:
        return out
    state = raw["apps"][cue_app]
    kname = next((k for k in state if k.startswith("key_")), "key_*")
    keys = state.get(kname) or []
    if not keys:
        return out
    lo_min, hi_min = dcfg.cue_recent_minutes
    recent = (now - dt.timedelta(minutes=hi_min + 1), now - dt.timedelta(minutes=max(0, lo_min - 1)))
    if cue_app == "Calendar":
        full_ids = {e.get("event_id") for e in state.get("events", [])}
        for j, ev in enumerate(keys):
            if ev.get("event_id") not in full_ids:
                add("cue_not_in_full_list", "the Calendar cue event is not in the events list", [f"apps.Calendar.{kname}[{j}]"])
            if ev.get("start_datetime", "") <= bundle.current_datetime:
                add("cue_event_not_upcoming", "the Calendar cue event does not start after now",
                    [f"apps.Calendar.{kname}[{j}].start_datetime"])
        return out
    if cue_app == "Messaging":
        convs = state.get("conversations", [])
        all_msgs = [(ci, mi, m) for ci, c in enumerate(convs) for mi, m in enumerate(c.get("messages", []))]
        for j, conv in enumerate(keys):
            msgs = conv.get("messages", [])
            if not msgs:
                add("cue_not_in_key_list", "the Messaging cue conversation has no messages", [f"apps.Messaging.{kname}[{j}]"])
                continue
            cue_msg = msgs[-1]
            where = next(((ci, mi) for ci, mi, m in all_msgs if m.get("message_id") == cue_msg.get("message_id")), None)
            if where is None:
                add("cue_not_in_full_list", "the cue message is not in any conversation",
                    [f"apps.Messaging.{kname}[{j}].messages[{len(msgs) - 1}]"])
                continue
            latest = max(m.get("timestamp", "") for _, _, m in all_msgs)
            path = f"apps.Messaging.conversations[{where[0]}].messages[{where[1]}]"
            if cue_msg.get("timestamp", "") < latest:
                add("cue_not_latest", "the cue message is not the latest message", [f"{path}.timestamp"])
            _recent(add, cue_msg.get("timestamp", ""), D.FMT_S, recent, f"{path}.timestamp")
            if cue_msg.get("sender") == bundle.main_persona.name:
                add("cue_sender", "the cue message is sent by the user themself", [f"{path}.sender"])
            elif bundle.cue.person and cue_msg.get("sender") != bundle.cue.person:
                add("cue_sender", f"the cue names {bundle.cue.person} but the message is from someone else",
                    [f"{path}.sender"])
        return out
    entries = _app_items(cue_app, state)
    key_items = keys["recent_places"] if cue_app == "Maps" else [keys["currently_playing"]] if cue_app == "Music" else keys
    id_field = ID_FIELD[cue_app]
    full = {x.get(id_field): (p, x) for p, x in entries}
    tfield = TIME_FIELD[cue_app]
    fmt = D.FMT_M if cue_app == "Notes" else D.FMT_S
    latest = max((x.get(tfield, "") for _, x in entries), default="")
    for x in key_items:
        if x.get(id_field) not in full:
            add("cue_not_in_full_list", f"a {cue_app} cue item is not in the full list", [f"apps.{cue_app}.{kname}"])
            continue
        path, _ = full[x.get(id_field)]
        if x.get(tfield, "") < latest:
            later = [p for p, y in entries if y.get(tfield, "") > x.get(tfield, "")]
            add("cue_not_latest", f"the {cue_app} cue item is not the latest item", [f"{path}.{tfield}", *later])
        _recent(add, x.get(tfield, ""), fmt, recent, f"{path}.{tfield}")
    return out


def _recent(add: Callable[..., None], value: str, fmt: str, window: tuple[dt.datetime, dt.datetime], path: str) -> None:
    try:
        t = dt.datetime.strptime(value, fmt)
    except ValueError:
        return  # the validators report unparseable times
    if not window[0] <= t <= window[1]:
        add("cue_not_recent", f"the cue item is at {value}, not just before now", [path])


# --------------------------------------------------------------------------- 10. integrity


def check_integrity(data: AuditData, cfg: AuditConfig) -> CheckResult:
    key = "integrity"
    res = CheckResult(key)
    if not data.folders:
        return CheckResult(key, "skipped", "no run folder with a manifest.json among the inputs")
    verified: dict[str, Any] = {}
    for folder in data.folders:
        name = str(folder)

        def add(kind: str, sev: Severity, what: str, fields: list[str], name: str = name, **numbers: Any) -> None:
            res.findings.append(finding(key, kind, sev, what, fields=fields, numbers=numbers, bank=name))

        try:
            manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            add("manifest_unreadable", "error", f"manifest.json cannot be read ({e})", ["manifest.json"])
            continue
        outputs = manifest.get("outputs")
        if not isinstance(outputs, dict) or not outputs:
            add("manifest_without_outputs", "error", "manifest.json lists no output hashes", ["outputs"])
            continue
        ok = 0
        for rel, digest in sorted(outputs.items()):
            path = folder / rel
            if not path.is_file():
                add("output_missing", "error", f"{rel} is listed in the manifest but missing", [f"outputs.{rel}"])
                continue
            actual = sha256_file(path)
            if actual != digest:
                add("output_changed", "error", f"{rel} does not match its SHA-256 in manifest.json",
                    [f"outputs.{rel}"], expected=digest, actual=actual)
            else:
                ok += 1
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder).as_posix()
            if path.is_file() and rel != "manifest.json" and rel not in outputs and not rel.endswith((".partial", ".tmp")):
                add("output_unlisted", "warning", f"{rel} is in the folder but not in the manifest", [f"outputs.{rel}"])
        counts = manifest.get("counts") or {}
        rec_name = (manifest.get("merged") or {}).get("generator") or manifest.get("generator")
        for fname, count_key in ((f"{rec_name}.jsonl", "accepted"), ("rejects.jsonl", "rejected")):
            path = folder / fname
            if path.is_file() and count_key in counts:
                lines = sum(1 for line in open(path, encoding="utf-8", errors="replace") if line.strip())
                if lines != counts[count_key]:
                    add("count_mismatch", "error", f"{fname} has {lines} lines, the manifest counts {counts[count_key]} {count_key}",
                        [f"counts.{count_key}"], lines=lines, manifest=counts[count_key])
        for src, digest in sorted((manifest.get("inputs") or {}).items()):
            p = Path(src)
            if p.is_file() and sha256_file(p) != digest:
                add("input_changed", "warning", f"the input {src} changed since the run", [f"inputs.{src}"])
        verified[name] = {"generator": manifest.get("generator"), "outputs": len(outputs), "matching": ok}
    res.stats = {"folders": verified}
    return res


CHECK_FUNCTIONS: dict[str, Callable[[AuditData, Any], CheckResult]] = {
    "structure": check_structure, "leakage": check_leakage, "position": check_position, "length": check_length,
    "similar_options": check_similar_options, "duplicates": check_duplicates, "shortcut": check_shortcut,
    "blind": check_blind, "digital": check_digital, "integrity": check_integrity,
}
