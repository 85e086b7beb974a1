"""Read and write multiple-choice banks: our MCQ records (JSONL) and EgoToM's CSVs.

:func:`load_bank` reads one file (MCQ records, an EgoToM CSV, a WAGIBench MCQ layout) as a
:class:`Bank`, its items normalised to :class:`schemas.mcq.MCQ`; which files a folder holds is
its kind's to say (:func:`gen.kinds.mcq.load_banks`). ``write_subset`` writes chosen items back in
the file's own format, so a filter's output is read by the next step unchanged.

Generators that order options place the answer with :func:`answer_position` (or
:class:`Positions`) and :func:`arrange`: answer positions balanced by construction.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gen.errors import InputError, not_utf8
from gen.schemas.mcq import LETTERS, MCQ, MCQRecord

EGOTOM_TYPES = ("goal", "belief", "actions")
EGOTOM_QUESTION = {
    "goal": "What is C's future goal?",
    "belief": "At the end of these actions, what does C most likely believe?",
    "actions": "What will C most likely do next?",
}
EGOTOM_CHOICES = {"goal": 3, "belief": 4, "actions": 4}


def egotom_columns(q: str) -> list[str]:
    """EgoToM's exact CSV columns for question type ``q``."""
    choices = [f"{q}_choice_{LETTERS[i]}" for i in range(EGOTOM_CHOICES[q])]
    return [
        "vuid",
        "cuid",
        "narrations_in_context",
        f"gt_{q}",
        *choices,
        "clip_start_time",
        "clip_end_time",
    ]


@dataclass
class Bank:
    path: Path
    format: str
    """``jsonl`` (MCQ records), ``egotom_csv`` or ``roles_jsonl`` (any JSONL read with a roles
    file, :mod:`gen.formats.roles`)."""
    items: Sequence[MCQ]
    problems: list[dict[str, Any]] = field(default_factory=list)
    """Rows that loaded with a defect (``line``, ``item_id``, ``field``, ``problem``): a missing
    field, an answer that is not among the options. Only :func:`gen.formats.roles.load_roles_bank`
    fills
    it."""

    def _repr_html_(self) -> str:
        """The bank as a notebook shows it: its items by question type, the rows that loaded
        with a defect (by problem), and its first items."""
        from collections import Counter

        from gen.engine.runfolder import HTML_ROWS, html_card

        by_type = Counter(item.question_type for item in self.items)
        facts: list[tuple[str, Any]] = [
            ("file", self.path),
            ("format", self.format),
            ("items", len(self.items)),
            *((f"items of type {t}", n) for t, n in sorted(by_type.items())),
            ("rows with a defect", len(self.problems)),
        ]
        funnel = Counter(str(p.get("problem", "?")) for p in self.problems).most_common()
        rows = [
            item.model_dump(
                mode="json", include={"item_id", "question_type", "question", "options", "answer"}
            )
            for item in self.items[:HTML_ROWS]
        ]
        return html_card("MCQ bank", facts, funnel, rows, funnel_title="defects by problem")


BANK_FORMATS = {".csv": "egotom_csv", ".jsonl": "jsonl", ".json": "wagibench_json"}
"""A bank file's format by its suffix (see :class:`Bank`)."""


def load_bank(path: Path) -> Bank:
    return Bank(path, bank_format(path), list(iter_bank(path)))


def bank_format(path: Path) -> str:
    """The format of an MCQ file, by its suffix; another suffix is an InputError."""
    if path.suffix not in BANK_FORMATS:
        raise InputError(
            f"input: {path}: expected a .jsonl of MCQ records, an EgoToM .csv or a WAGIBench MCQ "
            ".json"
        )
    return BANK_FORMATS[path.suffix]


def iter_bank(path: Path) -> Iterator[MCQ]:
    """The items of one MCQ file, read as they are needed (a CSV in batches, a JSONL line by
    line; a WAGIBench JSON list is one document, read whole)."""
    fmt = bank_format(path)
    if fmt == "egotom_csv":
        return iter_egotom_csv(path)
    if fmt == "jsonl":
        return iter_mcq_jsonl(path)
    return iter(read_wagibench_mcq(path))


WAGIBENCH_QUESTION = "Which digital action does the user most likely want to take now?"
"""The question of a WAGIBench-layout item (the layout stores none; ``distractors``' default)."""


def read_wagibench_mcq(path: Path) -> list[MCQ]:
    """WAGIBench's MCQ layout (a JSON list of ``{x: {client_tag, context_window, cues, mcq_set},
    y, meta: {client_tag, scenario: {shortname}, structured_goal, item_id?, question_type?}}``, as
    ``distractors`` and ``bank export format=wagibench`` write it): options are the goal dicts as
    JSON (fields in their order, ``type`` first), the visible context is the cues. A bad row is
    ``file:row N: field: reason``."""
    from gen.readers import read_json

    data = read_json(path)
    if not isinstance(data, list):
        raise InputError(
            f"{path}: expected a JSON list of WAGIBench MCQ rows, got a {type(data).__name__}"
        )
    items = []
    for i, row in enumerate(data):
        where = f"{path}:row {i + 1}"
        x = row.get("x") if isinstance(row, dict) else None
        meta = row.get("meta") if isinstance(row, dict) else None
        if not isinstance(x, dict) or not isinstance(meta, dict):
            raise InputError(
                f"{where}: x, meta: a WAGIBench MCQ row is an object with x and meta objects"
            )
        options = x.get("mcq_set")
        if not isinstance(options, list) or len(options) < 2:
            raise InputError(f"{where}: x.mcq_set: expected a list of two or more goals")
        y = row.get("y")
        if isinstance(y, bool) or not isinstance(y, int) or not 0 <= y < len(options):
            raise InputError(
                f"{where}: y: expected the answer's index among the {len(options)} options, "
                f"got {y!r}"
            )
        scenario = meta.get("scenario")
        if not isinstance(scenario, dict):
            scenario = {}
        tag, short = meta.get("client_tag", x.get("client_tag")), scenario.get("shortname")
        item_id = (
            meta.get("item_id") or (f"{short}_{tag}" if short and tag else None) or f"row{i + 1}"
        )
        cues = x.get("cues") or []
        context = as_text(cues if isinstance(cues, list) else [cues])
        items.append(
            MCQ(
                item_id=as_text(item_id),
                question_type=as_text(meta.get("question_type") or "wagibench"),
                question=WAGIBENCH_QUESTION,
                answer=y,
                context=context,
                options=[
                    json.dumps(o, ensure_ascii=False) if isinstance(o, dict) else as_text(o)
                    for o in options
                ],
                group=as_text(short) if short else None,
                visible={"x.cues": context} if context else {},
                privileged={"meta.structured_goal": as_text(meta.get("structured_goal"))},
                line=i,
            )
        )
    return items


def egotom_type(path: Path) -> str | None:
    """The question type of an EgoToM CSV, from its header (None if it is not one)."""
    from gen.paths import input_file

    with open(
        input_file(path), encoding="utf-8-sig", errors="replace"
    ) as f:  # its reader names a bad byte
        header = f.readline(1 << 16)
    for q in EGOTOM_TYPES:
        if f"gt_{q}" in header and f"{q}_choice_a" in header:
            return q
    return None


def read_egotom_csv(path: Path) -> list[MCQ]:
    return list(iter_egotom_csv(path))


CSV_BATCH = 2048
"""Rows per batch of a CSV read in batches (polars' streaming engine holds a few batches)."""


def iter_egotom_csv(path: Path) -> Iterator[MCQ]:
    """An EgoToM CSV's rows as items, read in batches (all columns as strings: nothing is
    reinterpreted). A missing column is an InputError before the first item; a bad byte or
    row when the reader reaches it."""
    import polars as pl

    q = egotom_type(path)
    if q is None:
        raise InputError(f"{path}: not an EgoToM CSV (no gt_goal/gt_belief/gt_actions column)")
    choice_cols = [c for c in egotom_columns(q) if c.startswith(f"{q}_choice_")]
    needed = ["cuid", "narrations_in_context", f"gt_{q}", *choice_cols]
    try:
        frame = pl.scan_csv(path, infer_schema=False, glob=False)
        columns = frame.collect_schema().names()
    except Exception as e:  # noqa: BLE001 - polars raises several types
        raise csv_error(path, e) from None
    missing = [c for c in needed if c not in columns]
    if missing:
        raise InputError(
            f"{path}: missing EgoToM column(s) {', '.join(missing)} "
            f"(an EgoToM {q} CSV has {', '.join(egotom_columns(q))})"
        )
    return _egotom_rows(path, q, frame.select(needed), choice_cols)


def csv_error(path: Path, e: Exception) -> InputError:
    if "utf-8" in str(e).lower():
        return not_utf8(path)  # with the line polars does not give
    return InputError(f"{path}: cannot parse CSV ({str(e).splitlines()[0]})")


def egotom_mcq(q: str, row: dict[str, Any], choice_cols: list[str], line: int) -> MCQ:
    """One EgoToM CSV row of question type ``q`` (all strings) as :class:`MCQ`."""
    options = [(row.get(c) or "").strip() for c in choice_cols]
    truth = (row.get(f"gt_{q}") or "").strip()
    context = row.get("narrations_in_context") or ""
    return MCQ(
        item_id=f"{q}:{row.get('cuid')}",
        question_type=q,
        question=EGOTOM_QUESTION[q],
        options=options,
        answer=options.index(truth) if truth in options else None,
        context=context,
        group=row.get("cuid"),
        origins=["truth" if o == truth else "counterfactual" for o in options],
        visible={"narrations_in_context": context},
        privileged={f"gt_{q}": truth},
        line=line,
    )


def _egotom_rows(path: Path, q: str, frame: Any, choice_cols: list[str]) -> Iterator[MCQ]:
    # collect_batches (polars >= 1.3x) streams; an older polars reads the file whole
    batches = (
        frame.collect_batches(chunk_size=CSV_BATCH)
        if hasattr(frame, "collect_batches")
        else [frame.collect()]
    )
    i = 0
    try:
        for df in batches:
            for row in df.iter_rows(named=True):
                yield egotom_mcq(q, row, choice_cols, i)
                i += 1
    except Exception as e:  # noqa: BLE001 - polars raises several types
        raise csv_error(path, e) from None


def read_mcq_jsonl(path: Path) -> list[MCQ]:
    return list(iter_mcq_jsonl(path))


def iter_mcq_jsonl(path: Path) -> Iterator[MCQ]:
    """A JSONL of MCQ records, line by line; a line that is not one is an InputError naming it."""
    from gen.readers import iter_jsonl

    for lineno, row in iter_jsonl(path):
        try:
            rec = MCQRecord.model_validate(row)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            raise InputError(
                f"{path}:{lineno}: not an MCQ record ({where}: {err['msg']})"
            ) from None
        yield from_record(rec, lineno - 1)


def from_record(rec: MCQRecord, line: int) -> MCQ:
    visible = {k: as_text(v) for k, v in rec.visible.items()}
    context = visible.get("context", "\n".join(visible.values()))
    return MCQ(
        item_id=rec.item_id,
        question_type=rec.question_type,
        question=rec.question,
        options=rec.options,
        answer=rec.answer,
        context=context,
        group=rec.group,
        origins=rec.origins,
        visible={f"visible.{k}": v for k, v in visible.items()},
        privileged={f"privileged.{k}": as_text(v) for k, v in rec.privileged.items()},
        answers=_indices(rec, "answers"),
        acceptable=_indices(rec, "acceptable"),
        line=line,
    )


def _indices(rec: MCQRecord, name: str) -> list[int] | None:
    """A multi-select record's ``answers`` / ``acceptable`` (option indices), when it has them; a
    list that is not indices of its options is an InputError."""
    value = (rec.model_extra or {}).get(name)
    if not isinstance(value, list):
        return None
    if not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(rec.options) for i in value
    ):
        raise InputError(
            f"{rec.item_id}: {name}: expected indices of its {len(rec.options)} options, "
            f"got {value!r}"
        )
    return value


def as_text(value: Any) -> str:
    """A field's value as the text a reader sees: lists one per line, objects as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(as_text(v) for v in value)
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def write_subset(bank: Bank, lines: Iterable[int], out: Path) -> Path:
    """Write the items at ``lines`` (source rows/lines) to ``out`` in the bank's own format."""
    keep = sorted(set(lines))
    if bank.format == "egotom_csv":
        import polars as pl

        df = pl.read_csv(bank.path, infer_schema_length=0)
        df.with_row_index("_row").filter(pl.col("_row").is_in(keep)).drop("_row").write_csv(out)
    elif bank.format == "wagibench_json":
        from gen.readers import read_json

        rows = read_json(bank.path)
        body = ",\n".join(json.dumps(rows[i], ensure_ascii=False, allow_nan=False) for i in keep)
        out.write_text(f"[\n{body}\n]\n" if body else "[]\n", encoding="utf-8")
    else:
        with open(bank.path, encoding="utf-8-sig") as f:
            source = f.readlines()
        out.write_text(
            "".join(source[i] if source[i].endswith("\n") else source[i] + "\n" for i in keep),
            encoding="utf-8",
        )
    return out


def write_egotom_csv(rows: list[dict[str, Any]], q: str, path: Path) -> Path:
    """Write rows (dicts keyed by :func:`egotom_columns`) as an EgoToM CSV."""
    import polars as pl

    cols = egotom_columns(q)
    data = {c: [None if r.get(c) is None else str(r[c]) for r in rows] for c in cols}
    pl.DataFrame(data, schema=dict.fromkeys(cols, pl.String)).write_csv(path)
    return path


# --------------------------------------------------------------------------- answer positions


def answer_position(seed: int, stream: str, rank: int, k: int) -> int:
    """Where the answer goes (0..k-1) in the ``rank``-th item (0-based) of a stream of ``k``-option
    items: every block of ``k`` consecutive ranks is a seeded permutation of the k positions, so
    each position holds the answer exactly once per block.

    ``audit``'s position check counts answers per question type and option count over the whole
    bank; a stream is one such group (``stream`` = the question type), so any run of ``n``
    consecutive ranks has each position within one of ``n / k`` and no tested group shows a
    position tell by construction (rejected items leave gaps, random with respect to the
    permutation). Pure in ``(seed, stream, rank, k)``: shards and resumed runs give the same
    positions. A stream whose items have different option counts is blocked per count when the
    ranks are counted per count (:class:`Positions`); with a shared rank it is only balanced
    in expectation.
    """
    if k < 1 or rank < 0:
        raise ValueError(f"answer_position: k={k}, rank={rank}: need k >= 1 and rank >= 0")
    block, slot = divmod(rank, k)
    order = list(range(k))
    random.Random(f"{seed}/positions/{stream}/{k}/{block}").shuffle(order)
    return order[slot]


class Positions:
    """Balanced answer positions for items made one after another in a deterministic order (a
    plan's items): the rank of an item is how many items of its stream and option count came
    before it."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.taken: Counter[tuple[str, int]] = Counter()

    def take(self, stream: str, k: int) -> int:
        """The next item's answer position in ``stream`` among ``k`` options."""
        rank = self.taken[(stream, k)]
        self.taken[(stream, k)] += 1
        return answer_position(self.seed, stream, rank, k)


def arrange(k: int, position: int, rng: random.Random) -> list[int]:
    """An order of ``k`` options given answer-first (option 0 is the answer): the answer at
    ``position``, the others shuffled by ``rng``. ``shown[i] = given[order[i]]``."""
    if not 0 <= position < k:
        raise ValueError(f"arrange: position {position} is not among {k} options")
    others = list(range(1, k))
    rng.shuffle(others)
    others.insert(position, 0)
    return others


# --------------------------------------------------------------------------- multi-select

NO_TOOL = "No tool needed"
"""EgoIntrospect Tool Selection's special option (H.1.1: "No tool needed", not a tool)."""


def correct(
    required: Collection[Hashable],
    helpful: Collection[Hashable],
    predicted: Collection[Hashable],
    none: Hashable = NO_TOOL,
) -> bool:
    """EgoIntrospect H.1.1's strict (hierarchical) correctness of one multi-select prediction:
    every required option and otherwise only helpful ones; with no required option, ``none``
    alone or only helpful ones; with neither, ``none`` alone. Options are tool names (``none``
    is :data:`NO_TOOL`) or option indices (``none`` the index of the "No tool needed" option)."""
    r, h, p = set(required), set(helpful) - set(required), set(predicted)
    if r:
        return r <= p <= r | h
    if h:
        return p == {none} or (bool(p) and p <= h)
    return p == {none}


def required_recall(
    rows: Sequence[tuple[Collection[Hashable], Collection[Hashable]]],
) -> float | None:
    """Share of instances with required options whose prediction holds all of them ((required,
    predicted) pairs; instances without required options do not count; None when none has)."""
    scored = [set(r) <= set(p) for r, p in rows if r]
    return sum(scored) / len(scored) if scored else None


def distractor_rate(
    rows: Sequence[tuple[Collection[Hashable], Collection[Hashable], Collection[Hashable]]],
    none: Hashable = NO_TOOL,
) -> float | None:
    """Share of predictions holding a real option that is neither required nor helpful
    ((required, helpful, predicted) triples; ``none``, "No tool needed", is no tool)."""
    if not rows:
        return None
    return sum(bool(set(p) - {none} - set(r) - set(h)) for r, h, p in rows) / len(rows)


def label(k: int) -> str:
    """The label of option ``k`` (0-based) as the candidate reads it: ``a`` … ``z``, then ``aa``,
    ``ab`` … ``az``, ``ba`` … (a spreadsheet's columns, lower case), so any number of options has
    one; the first 26 are :data:`LETTERS`."""
    if k < 0:
        raise ValueError(f"option index {k} < 0")
    out = ""
    k += 1
    while k:
        k, r = divmod(k - 1, 26)
        out = LETTERS[r] + out
    return out


def label_index(text: str) -> int | None:
    """The option index of a label (``b`` -> 1, ``AB`` -> 27); None when it is not one."""
    t = text.strip().lower()
    if not t or not all(c in LETTERS for c in t):
        return None
    k = 0
    for c in t:
        k = k * 26 + LETTERS.index(c) + 1
    return k - 1


_ANSWER_LINE = re.compile(r"answers?[ \t]*(?:is|are|:|=|-)[ \t]*(.*)", re.I)
_PIECE = re.compile(r"""^[-*_`"'\s]*[(\[]?\s*([a-z]{1,3})[*_`"'\s]*(?:[)\].:]|$)""", re.I)
_SPLIT = re.compile(r"\s*(?:,|;|/|&|\band\b|\n)\s*", re.I)


def parse_labels(text: str | None, options: Sequence[str]) -> list[int] | None:
    """The options a multi-select reply chooses (indices in the order given, each once), or None
    when it cannot be read.

    Reads the text after the last ``Answer:`` (``Answers:``, ``answer is``), else the reply's
    first non-empty line; splits it on commas, semicolons, slashes and "and"; each piece is a
    label of a shown option (:func:`label`: ``c``, ``(c)``, ``c)``, ``ab.``, ``**c**``, followed
    by anything: ``c) weather: …``) or the exact text of a shown option (``No tool needed``; a
    tool's name before its ``:``). A piece that is neither, or a label beyond the options shown,
    makes the reply unparseable: an answer is never half-read.
    """
    if not text or not text.strip():
        return None
    found = list(_ANSWER_LINE.finditer(text))
    if found:  # the last answer line; a list under it when the line itself is empty
        body = found[-1].group(1)
        if not body.strip():
            body = "\n".join(x for x in text[found[-1].end() :].splitlines() if x.strip())
    else:
        body = next(line for line in text.splitlines() if line.strip())
    names: dict[str, int] = {}
    for i, o in enumerate(options):
        for name in (o, o.split(":", 1)[0]):
            names.setdefault(_norm(name), i)
    chosen: list[int] = []
    for piece in _SPLIT.split(body.strip().rstrip(".")):
        piece = piece.strip()
        if not piece:
            continue
        k = None
        if (m := _PIECE.match(piece)) is not None:
            k = label_index(m.group(1))
        if k is None or not 0 <= k < len(options):
            k = names.get(_norm(piece), names.get(_norm(piece.split(":", 1)[0])))
        if k is None:
            return None
        if k not in chosen:
            chosen.append(k)
    return chosen or None


# --------------------------------------------------------------------------- reading an answer


_TAIL = r"(?=\s*[)\].:,;]|\s*$|\s+[-–—]\s)"  # what may follow a bare letter
_ANSWER = re.compile(
    r"answer(?:\s*\d+)?\s*(?:is|:|-|=)?\s*[*_`\"']*\s*[(\[]?\s*([a-z])" + _TAIL, re.I | re.M
)
_LEADING = re.compile(r"\A\W*?(?:option|choice|letter)?\s*[(\[]?([a-z])" + _TAIL, re.I)
_NAMED = re.compile(r"\b(?:option|choice|letter)\s*[(\[]?([a-z])[)\]]?(?![\w'])", re.I)
_IS = re.compile(
    r"\b(?:answer|choice|option)\s+is\s*:?\s*[*_`\"']*[(\[]?([a-z])" + _TAIL, re.I | re.M
)
_PAREN = re.compile(r"\(([a-z])\)", re.I)
_LISTED = re.compile(r"^\s*[(\[]?([a-z])[)\]]\s", re.I | re.M)


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s']", " ", text.lower()).split())


def parse_letter(text: str | None, options: Sequence[str]) -> str | None:
    """The option letter a free-text reply chooses, or None when it cannot be read.

    Reads, in order: ``Answer 1: b) ...`` / ``Answer: (B)``; a letter opening the reply
    (``b``, ``(B)``, ``B.``, ``**c)**``); ``option C`` / ``the answer is (d)``; a single
    parenthesised letter; finally the text of exactly one shown option. A reply that lists
    several lettered options (the prompt echoed) is unparseable, and so is one whose letter and
    quoted option disagree. A letter beyond the options shown is ignored (the quoted text, if
    any, decides). The person's name ``C`` ("C believes ...") is never read as a letter.
    """
    if not text or not text.strip():
        return None
    valid = LETTERS[: len(options)]
    if len({m.lower() for m in _LISTED.findall(text)}) >= 2:
        return None  # the options echoed as a list
    reply = _norm(text)
    quoted = [i for i, o in enumerate(options) if _norm(o) and f" {_norm(o)} " in f" {reply} "]
    by_text = valid[quoted[0]] if len(quoted) == 1 else None
    for pattern in (_ANSWER, _LEADING, _NAMED, _IS):
        m = pattern.search(text)
        if m and m.group(1).lower() in valid:
            letter = m.group(1).lower()
            return letter if by_text in (None, letter) else None
    parens = {m.lower() for m in _PAREN.findall(text)}
    if len(parens) == 1 and (only := parens.pop()) in valid:
        return only if by_text in (None, only) else None
    return by_text
