"""gen's MCQ kinds: ``tom``, ``distractors`` and ``mcq`` (any other MCQ records, and EgoToM's
CSV rows).

Their content id hashes what the candidate sees, order-free, plus the answer text
(:meth:`~gen.kinds.MCQKind.identity`): ``question_type``, ``question``, the visible fields,
the options **sorted** and the answer **as text** — so a reshuffled copy is the same item. Not
hashed: the record's own ``item_id`` (seed-derived), ``group``, ``origins``, ``privileged`` and
any generator-specific field.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gen.errors import InputError, MissingInputError
from gen.kinds import MCQKind
from gen.schemas.mcq import MCQ

if TYPE_CHECKING:
    from gen.formats.mcq import Bank


def egotom_row_mcq(row: dict[str, Any]) -> MCQ:
    """One EgoToM CSV row (all strings) as :class:`MCQ`, exactly as
    :func:`gen.formats.mcq.read_egotom_csv`
    reads it."""
    from gen.formats.mcq import EGOTOM_TYPES, egotom_columns, egotom_mcq

    q = next((t for t in EGOTOM_TYPES if f"gt_{t}" in row and f"{t}_choice_a" in row), None)
    if q is None:
        raise InputError("not an EgoToM row (no gt_goal/gt_belief/gt_actions column)")
    cols = [c for c in egotom_columns(q) if c.startswith(f"{q}_choice_")]
    return egotom_mcq(q, row, cols, 0)


def is_egotom_row(record: Any) -> bool:
    """An EgoToM CSV row (its ``gt_<type>`` and choice columns, no ``options``)."""
    return isinstance(record, dict) and "options" not in record and "cuid" in record


class ExternalMCQ(MCQKind):
    """``mcq``: MCQ records of any origin, and EgoToM's CSVs (one row per item, read as
    :func:`gen.formats.mcq.read_egotom_csv` reads them)."""

    def mcq(self, record: dict[str, Any]) -> MCQ:
        return egotom_row_mcq(record) if is_egotom_row(record) else super().mcq(record)

    def validate(self, record: Any, where: str) -> None:
        if is_egotom_row(record):
            try:
                egotom_row_mcq(record)
            except InputError as e:
                raise InputError(f"{where}: {e}") from None
            return
        super().validate(record, where)

    def source_id(self, record: dict[str, Any]) -> str:
        """An EgoToM row's ``cuid``; a record's ``item_id``."""
        return str(record.get("cuid") or "") if is_egotom_row(record) else super().source_id(record)

    def holds(self, path: Path) -> bool:
        from gen.formats.mcq import egotom_type

        return super().holds(path) or (path.suffix == ".csv" and egotom_type(path) is not None)

    def find(self, folder: Path) -> list[Path]:
        from gen.formats.mcq import egotom_type

        return super().find(folder) or sorted(
            p for p in folder.glob("*.csv") if egotom_type(p) is not None
        )

    def read(self, path: Path) -> Iterator[tuple[str, Any]]:
        if path.suffix != ".csv":
            yield from super().read(path)
            return
        import polars as pl

        from gen.formats.mcq import csv_error

        try:  # all strings, as gen.formats.mcq reads it: nothing is reinterpreted
            rows = pl.read_csv(path, infer_schema_length=0).to_dicts()
        except Exception as e:  # noqa: BLE001 - polars raises several types
            raise csv_error(path, e) from None
        for i, row in enumerate(rows):
            yield f"{path}:row {i + 1}", row

    def source_format_of(self, path: Path) -> str:
        return "egotom_csv" if path.suffix == ".csv" else self.source_format

    def iter_mcq(self, path: Path) -> Iterator[MCQ]:
        from gen.formats.mcq import iter_bank

        return iter_bank(path)


TOM = MCQKind(
    name="tom",
    files=("tom.jsonl",),
    formats=("lm_eval", "inspect", "egotom"),
    help="tom (EgoToM §3): the correct option is C's future goal, belief or next actions read "
    "from the narrations after the transition; the wrong options are counterfactuals an LLM "
    "proposed from the narrations before it, conditioned on the true goal.",
)
DISTRACTORS = MCQKind(
    name="distractors",
    files=("distractors.jsonl",),
    formats=("lm_eval", "inspect", "wagibench"),
    help="distractors (WAGIBench §3.1): the correct option is the reference goal; the "
    "distractors are other goals of the bank drawn from percentile bands of embedding "
    "similarity to it.",
)
MCQ_ = ExternalMCQ(
    name="mcq",
    files=("mcq.jsonl", "candidates.jsonl", "nocontext_kept.jsonl", "introspect.jsonl"),
    formats=("lm_eval", "inspect", "egotom"),
    help="mcq: items imported from an existing MCQ bank, with that bank's answers.",
)
KINDS = (TOM, DISTRACTORS, MCQ_)


WAGIBENCH_LAYOUT = "wagibench_mcq_*.json"
"""A bank export in WAGIBench's MCQ layout (one file per question type)."""


def find_mcq_files(path: Path) -> list[Path]:
    """The MCQ files at ``path``: the file itself; a run folder's item files, by the kind its
    manifest names (a screening's: the items it kept); else the first MCQ kind's declared files
    in the folder (EgoToM CSVs for ``mcq``), a screening's kept items, or a WAGIBench MCQ layout
    export. Nothing is read but manifests and EgoToM headers."""
    from gen import kinds
    from gen.engine.runfolder import RunFolder

    if path.is_file():
        return [path]
    if not path.is_dir():
        return []

    def takes(kind: MCQKind | Any) -> bool:
        return kind.is_mcq or (kind.gives_items and not kind.bank)

    try:
        run = RunFolder.find(path)
    except InputError:  # a broken manifest: read as a folder without one
        run = None
    if run is not None and (kind := kinds.of_run(run)) is not None and takes(kind):
        if files := kind.item_files(run):
            return files
    for kind in kinds.every():
        if takes(kind) and (files := kind.find(path)):
            return files
    return sorted(path.glob(WAGIBENCH_LAYOUT))


def mcq_files(path: Path) -> list[Path]:
    """:func:`find_mcq_files`, or an error saying what was looked for."""
    from gen import kinds

    if not path.exists():
        raise MissingInputError(f"input: no such file or folder: {path}")
    files = find_mcq_files(path)
    if not files:
        names = ", ".join(f for k in kinds.every() if k.is_mcq for f in k.files)
        raise InputError(
            f"input: {path} holds no MCQ file ({names}, EgoToM CSVs or {WAGIBENCH_LAYOUT})"
        )
    return files


def iter_items(path: Path) -> Iterator[MCQ]:
    """The items of one MCQ file, read by the kind whose declared files hold it (any other file
    by gen's MCQ reader: records, EgoToM CSVs, WAGIBench layouts)."""
    from gen import kinds

    kind = kinds.for_file(path)
    if kind is not None and isinstance(kind, MCQKind):
        return kind.iter_mcq(path)
    from gen.formats.mcq import iter_bank

    return iter_bank(path)


def load_banks(path: Path) -> list[Bank]:
    """Every MCQ bank at ``path`` (a file, a run folder, or a folder of EgoToM CSVs)."""
    from gen.formats.mcq import Bank, bank_format

    return [Bank(p, bank_format(p), list(iter_items(p))) for p in mcq_files(path)]
