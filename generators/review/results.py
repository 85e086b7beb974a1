"""What other runs said about the reviewed items, for the privileged side: the blind answers of a
``nocontext`` run and the per-option scores of a ``judge kind=distractor_validity`` run.

Both are read with their own record schemas (:class:`schemas.nocontext.NocontextRecord`,
:class:`schemas.judge.ValidityRecord`; a bad line is ``file:line: field: reason``) and matched to
the items by the record's own id, as the audit's findings are (:meth:`ReviewItem.names`). A record
whose option count or answer differs from the item's was made from another version of the item:
it is shown with that warning rather than as the item's result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from gen.engine.runfolder import RunFolder
from gen.errors import InputError, MissingInputError
from gen.generators.review.items import ReviewItem, by_name
from gen.paths import UnsafePathError, inside
from gen.readers import iter_jsonl, validated
from gen.schemas.judge import ValidityRecord
from gen.schemas.mcq import LETTERS
from gen.schemas.nocontext import NocontextRecord

NOCONTEXT_FILE = "nocontext.jsonl"
JUDGE_FILE = "judge.jsonl"
VALIDITY = "distractor_validity"
MAX_SHUFFLES = 26
"""nocontext's own bound on shuffles."""
R = TypeVar("R", bound=BaseModel)


@dataclass
class Results:
    """The runs whose results are shown, and what they hold."""

    nocontext: Path | None = None
    judge: Path | None = None
    judge_primary: str | None = None
    """The judge run's primary judge (its manifest's ``judge.judge_label``): the one whose flag
    counts."""
    blind: list[NocontextRecord] | None = None
    validity: list[ValidityRecord] | None = None

    def files(self) -> list[Path]:
        return [p for p in (self.nocontext, self.judge) if p is not None]


def _file(given: str, name: str, what: str) -> Path:
    """``given`` (a run folder or its records file) -> the records file."""
    path = Path(given).expanduser()
    if path.is_dir():
        path = path / name
    if not path.is_file():
        raise MissingInputError(f"{what}: {path} not found (a {what} run folder or its {name})")
    return path


def _own(folder: Path, name: str) -> Path | None:
    try:
        path = inside(folder, name, what="results file")
    except UnsafePathError:
        return None
    return path if path.is_file() else None


def read_records(
    path: Path, model: type[R], check: Callable[[R], str | None] | None = None
) -> list[R]:
    """Every line of ``path`` validated as ``model`` (and by ``check``, which names a field and
    what is wrong with it); a bad one is ``file:line: field: reason``."""
    out = []
    for lineno, row in iter_jsonl(path):
        rec = validated(model, row, f"{path}:{lineno}", what="line", objects_only=False)
        problem = check(rec) if check is not None else None
        if problem is not None:
            raise InputError(f"{path}:{lineno}: {problem}")
        out.append(rec)
    return out


def _options(n_options: int, answer: int) -> str | None:
    if not 1 <= n_options <= len(LETTERS):
        return f"n_options: {n_options} is not 1-{len(LETTERS)}"
    if not 0 <= answer < n_options:
        return f"answer: {answer} is not an option index (0-{n_options - 1})"
    return None


def check_blind(r: NocontextRecord) -> str | None:
    """What a nocontext record must hold to be shown: options, shuffles and choices in range."""
    if (problem := _options(r.n_options, r.answer)) is not None:
        return problem
    if not 1 <= r.shuffles <= MAX_SHUFFLES:
        return f"shuffles: {r.shuffles} is not 1-{MAX_SHUFFLES}"
    for m, k in r.correct.items():
        if not 0 <= k <= r.shuffles:
            return f"correct.{m}: {k} is not 0-{r.shuffles}"
    for m, answers in r.answers.items():
        if any(a.choice is not None and not 0 <= a.choice < r.n_options for a in answers):
            return f"answers.{m}: a choice is not an option index (0-{r.n_options - 1})"
    return None


def check_validity(r: ValidityRecord) -> str | None:
    """What a distractor_validity record must hold to be shown: one score per option per judge."""
    if (problem := _options(r.n_options, r.answer)) is not None:
        return problem
    for j, js in r.scores.items():
        if len(js) != r.n_options:
            return f"scores.{j}: {len(js)} judgments for {r.n_options} options"
    return None


def judge_kind(path: Path) -> tuple[str | None, str | None] | None:
    """``(kind, primary judge)`` from the manifest beside a judge.jsonl; None without a manifest."""
    run = RunFolder.find(path)
    if run is None:
        return None
    info = run.manifest.extras.get("judge")
    if not isinstance(info, dict):
        return (None, None)
    kind, primary = info.get("kind"), info.get("judge_label")
    return (kind if isinstance(kind, str) else None, primary if isinstance(primary, str) else None)


def read_validity(path: Path) -> tuple[list[ValidityRecord], str | None]:
    """A distractor_validity judge run's records and its primary judge (from its manifest; without
    one, the records' only judge)."""
    info = judge_kind(path)
    if info is not None and info[0] != VALIDITY:
        raise InputError(
            f"{path.parent}/manifest.json: judge: not a judge run of kind {VALIDITY} "
            f"(kind {info[0]!r}); review shows distractor_validity scores"
        )
    records = read_records(path, ValidityRecord, check_validity)
    primary = info[1] if info is not None else None
    if primary is None:
        judges = sorted({j for r in records for j in r.scores})
        if len(judges) > 1:
            raise InputError(
                f"{path}: records of several judges ({', '.join(judges)}) and no manifest naming "
                "the primary one"
            )
        primary = judges[0] if judges else None
    return records, primary


def find_results(folder: Path, nocontext: str | None, judge: str | None) -> Results:
    """The nocontext and judge results to show: the options' runs, else the reviewed folder's own
    (a nocontext run's ``nocontext.jsonl``; a ``judge.jsonl`` of kind distractor_validity)."""
    out = Results()
    out.nocontext = (
        _file(nocontext, NOCONTEXT_FILE, "nocontext")
        if nocontext is not None
        else _own(folder, NOCONTEXT_FILE)
    )
    if out.nocontext is not None:
        out.blind = read_records(out.nocontext, NocontextRecord, check_blind)
    if judge is not None:
        out.judge = _file(judge, JUDGE_FILE, "judge")
    elif (own := _own(folder, JUDGE_FILE)) is not None and (judge_kind(own) or (VALIDITY,))[
        0
    ] == VALIDITY:
        out.judge = own
    if out.judge is not None:
        out.validity, out.judge_primary = read_validity(out.judge)
    return out


def attach_results(items: list[ReviewItem], results: Results) -> None:
    """Give each MCQ item the nocontext and judge records that name it."""
    named = by_name([it for it in items if it.kind == "mcq"])
    for rec in results.blind or []:
        for it in named.get(rec.item_id, []):
            it.blind.append(rec)
    for val in results.validity or []:
        for it in named.get(val.item_id, []):
            it.judged.append(val)
            it.judge_primary = results.judge_primary


def _letter(i: int | None) -> str:
    return "?" if i is None or not 0 <= i < len(LETTERS) else LETTERS[i].upper()


def _mismatch(item: ReviewItem, n_options: int, answer: int, what: str) -> str | None:
    q = item.mcq
    assert q is not None
    if n_options == len(q.options) and answer == q.answer:
        return None
    return (
        f"this {what} record has {n_options} options and answer {_letter(answer)}; the item has "
        f"{len(q.options)} and answer {_letter(q.answer)}: it was made from another version of the "
        "item"
    )


def blind_view(item: ReviewItem) -> list[dict[str, Any]]:
    """Per nocontext record: the verdict and, per model, right in k of n shuffles and the options
    it chose (letters as the item shows them)."""
    out = []
    for rec in item.blind:
        models = [
            {
                "model": m,
                "correct": rec.correct.get(m, 0),
                "shuffles": rec.shuffles,
                "unparseable": rec.unparseable.get(m, 0),
                "chose": ", ".join(_letter(a.choice) for a in rec.answers.get(m, [])),
            }
            for m in sorted(set(rec.correct) | set(rec.answers))
        ]
        out.append(
            {
                "verdict": "kept" if rec.kept else "removed by " + ", ".join(rec.removed_by),
                "source": f"{Path(rec.source).name}:{rec.line + 1}",
                "chance": round(rec.shuffles / max(rec.n_options, 1), 2),
                "mismatch": _mismatch(item, rec.n_options, rec.answer, "nocontext"),
                "models": models,
            }
        )
    return out


def validity_view(item: ReviewItem) -> list[dict[str, Any]]:
    """Per judge record: a row per option (its score by each judge, the answer marked) and each
    judge's flag (a wrong option scoring at least the answer)."""
    out = []
    for rec in item.judged:
        judges = sorted(rec.scores, key=lambda j: (j != item.judge_primary, j))
        rows = []
        for k in range(rec.n_options):
            cells = []
            for j in judges:
                s = rec.scores[j][k]
                cells.append(
                    str(s.score) if s.score is not None else f"– ({s.problem or 'not followed'})"
                )
            rows.append(
                {
                    "letter": _letter(k),
                    "answer": k == rec.answer,
                    "flagged": any(k in rec.flagged_options.get(j, []) for j in judges),
                    "cells": cells,
                }
            )
        flags = [
            {
                "judge": j,
                "primary": j == item.judge_primary,
                "flagged": rec.flagged.get(j),
                "options": ", ".join(_letter(k) for k in rec.flagged_options.get(j, [])),
            }
            for j in judges
        ]
        out.append(
            {
                "judges": judges,
                "rows": rows,
                "flags": flags,
                "mismatch": _mismatch(item, rec.n_options, rec.answer, "judge"),
            }
        )
    return out
