"""Read and write multiple-choice banks: our MCQ records (JSONL) and EgoToM's CSVs.

``load_banks(path)`` accepts a file or a folder (a ``tom`` / ``distractors`` run folder, or a
folder of ``egotom_{goal,belief,actions}_shuffled.csv``) and gives one :class:`Bank` per file,
its items normalised to :class:`schemas.mcq.MCQ`. ``write_subset`` writes chosen items back in
the file's own format, so a filter's output is read by the next step unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gen.errors import InputError, MissingInputError
from schemas.mcq import LETTERS, MCQ, MCQRecord

EGOTOM_TYPES = ("goal", "belief", "actions")
EGOTOM_QUESTION = {
    "goal": "What is C's future goal?",
    "belief": "At the end of these actions, what does C most likely believe?",
    "actions": "What will C most likely do next?",
}
EGOTOM_CHOICES = {"goal": 3, "belief": 4, "actions": 4}
# Record files our generators write, in the order a run folder is searched.
RECORD_FILES = ("tom.jsonl", "distractors.jsonl", "nocontext_kept.jsonl", "mcq.jsonl")


def egotom_columns(q: str) -> list[str]:
    """EgoToM's exact CSV columns for question type ``q``."""
    choices = [f"{q}_choice_{LETTERS[i]}" for i in range(EGOTOM_CHOICES[q])]
    return ["vuid", "cuid", "narrations_in_context", f"gt_{q}", *choices,
            "clip_start_time", "clip_end_time"]


@dataclass
class Bank:
    path: Path
    format: str
    """``jsonl`` (MCQ records) or ``egotom_csv``."""
    items: list[MCQ]


def load_banks(path: Path) -> list[Bank]:
    """Every MCQ bank at ``path`` (a file, a run folder, or a folder of EgoToM CSVs)."""
    if not path.exists():
        raise MissingInputError(f"input: no such file or folder: {path}")
    if path.is_file():
        return [load_bank(path)]
    for name in RECORD_FILES:
        if (path / name).is_file():
            return [load_bank(path / name)]
    csvs = sorted(p for p in path.glob("*.csv") if egotom_type(p) is not None)
    if not csvs:
        raise InputError(f"input: {path} holds no MCQ file ({', '.join(RECORD_FILES)} or EgoToM CSVs)")
    return [load_bank(p) for p in csvs]


def load_bank(path: Path) -> Bank:
    if path.suffix == ".csv":
        return Bank(path, "egotom_csv", read_egotom_csv(path))
    if path.suffix == ".jsonl":
        return Bank(path, "jsonl", read_mcq_jsonl(path))
    raise InputError(f"input: {path}: expected a .jsonl of MCQ records or an EgoToM .csv")


def egotom_type(path: Path) -> str | None:
    """The question type of an EgoToM CSV, from its header (None if it is not one)."""
    with open(path, encoding="utf-8") as f:
        header = f.readline()
    for q in EGOTOM_TYPES:
        if f"gt_{q}" in header and f"{q}_choice_a" in header:
            return q
    return None


def read_egotom_csv(path: Path) -> list[MCQ]:
    import polars as pl

    q = egotom_type(path)
    if q is None:
        raise InputError(f"{path}: not an EgoToM CSV (no gt_goal/gt_belief/gt_actions column)")
    try:
        df = pl.read_csv(path, infer_schema_length=0)  # all strings: nothing is reinterpreted
    except Exception as e:  # noqa: BLE001 - polars raises several types
        raise InputError(f"{path}: cannot parse CSV ({str(e).splitlines()[0]})") from None
    choice_cols = [c for c in egotom_columns(q) if c.startswith(f"{q}_choice_")]
    missing = [c for c in ("cuid", f"gt_{q}", *choice_cols) if c not in df.columns]
    if missing:
        raise InputError(f"{path}: missing EgoToM column(s) {', '.join(missing)}")
    items = []
    for i, row in enumerate(df.iter_rows(named=True)):
        options = [(row[c] or "").strip() for c in choice_cols]
        truth = (row[f"gt_{q}"] or "").strip()
        context = row.get("narrations_in_context") or ""
        items.append(MCQ(
            item_id=f"{q}:{row['cuid']}", question_type=q, question=EGOTOM_QUESTION[q],
            options=options, answer=options.index(truth) if truth in options else None,
            context=context, group=row["cuid"],
            origins=["truth" if o == truth else "counterfactual" for o in options],
            visible={"narrations_in_context": context},
            privileged={f"gt_{q}": truth}, line=i,
        ))
    return items


def read_mcq_jsonl(path: Path) -> list[MCQ]:
    items = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rec = MCQRecord.model_validate_json(line)
            except ValidationError as e:
                err = e.errors()[0]
                where = ".".join(str(x) for x in err["loc"])
                raise InputError(f"{path}:{i + 1}: not an MCQ record ({where}: {err['msg']})") from None
            items.append(from_record(rec, i))
    return items


def from_record(rec: MCQRecord, line: int) -> MCQ:
    visible = {k: as_text(v) for k, v in rec.visible.items()}
    context = visible.get("context", "\n".join(visible.values()))
    return MCQ(
        item_id=rec.item_id, question_type=rec.question_type, question=rec.question,
        options=rec.options, answer=rec.answer, context=context, group=rec.group,
        origins=rec.origins, visible={f"visible.{k}": v for k, v in visible.items()},
        privileged={f"privileged.{k}": as_text(v) for k, v in rec.privileged.items()}, line=line,
    )


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
    else:
        with open(bank.path, encoding="utf-8") as f:
            source = f.readlines()
        out.write_text("".join(source[i] if source[i].endswith("\n") else source[i] + "\n"
                               for i in keep), encoding="utf-8")
    return out


def write_egotom_csv(rows: list[dict[str, Any]], q: str, path: Path) -> Path:
    """Write rows (dicts keyed by :func:`egotom_columns`) as an EgoToM CSV."""
    import polars as pl

    cols = egotom_columns(q)
    data = {c: [None if r.get(c) is None else str(r[c]) for r in rows] for c in cols}
    pl.DataFrame(data, schema=dict.fromkeys(cols, pl.String)).write_csv(path)
    return path
