"""``judge meta``: the judge against human raters (WAGIBench appendix H).

Input rows: a prediction's ``id``, its observation ``group``, ``raters`` (raters 1 and 2, and an
optional held-out rater 3) and the judge's value (the row's ``judge``, or a judge run's value by id
through ``judge_run=``). Numbers (scores) or labels, not mixed.

- Scores: **pairwise accuracy** (:func:`pairwise`). Every two predictions of one observation form
  a pair; raters 1 and 2 each order it (<, =, >); a pair they order oppositely is dropped (= and <
  do not disagree). The truth is the strict order one of them gives (or a tie when both tie). The
  judge is aligned when it gives that strict order, or, when it ties the pair, when at least one
  rater tied it. Rater 3, scored the same way, gives the human-human figure.
- Labels: raw agreement and Cohen's kappa of the judge with each rater and of the raters with
  each other, and per label the share of a rater's uses of it the judge matches.

Both: a confusion matrix of the judge against each of raters 1 and 2 (``confusion.png``).

Baselines (scores; appendix H), beside the judge's pairwise accuracy when the rows' predictions and
references are known (the row's ``prediction``/``reference``/``options``, or the judge run's
prediction and ``references=``' WAGIBench layout by id): **Snap-MCQ** maps the prediction onto the
MCQ's options by sentence-embedding similarity and scores 1 when the nearest is the reference, else
0; **SBERT similarity** scores the cosine of prediction and reference, a pair tied when the two
differ by at most ``sbert_tie`` (0.1). Goals are embedded as text (``type: field, field``) with the
run's embedder (all-MiniLM-L6-v2; the paper used paraphrase-mpnet-base-v2). The paper: judge 76.8 %,
Snap-MCQ 67.8 %, SBERT 59.5 %, human-human 75.2 %.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gen.engine.runfolder import RunFolder
from gen.engine.runner import Plan, RunContext
from gen.errors import InputError, MissingInputError
from gen.generators.judge.summary import finish
from gen.paths import inside
from gen.readers import iter_jsonl, validated
from gen.schemas.judge import MetaRecord, RatingRow
from gen.stats import agreement, cohen_kappa, confusion, proportion, rounded

if TYPE_CHECKING:
    from gen.generators.judge import JudgeConfig


def plan(cfg: JudgeConfig) -> Plan:
    path = cfg.input_path()
    assert path is not None
    rows = read_ratings(path)
    values, source = (
        judge_values(Path(cfg.judge_run).expanduser(), cfg) if cfg.judge_run else ({}, None)
    )
    out = []
    for where, row in rows:
        if row.judge is None and cfg.judge_run is None:
            raise InputError(
                f"{where}: judge: missing (give the judge's value in the row, or judge_run=<a "
                "judge run>)"
            )
        value = values.get(row.id, row.judge) if cfg.judge_run else row.judge
        out.append((where, row.model_copy(update={"judge": value})))
    kind = rating_kind(out)
    if cfg.baselines and kind == "scores":
        out = with_goals(out, cfg)
    return Plan(len(out), (out, kind, source))


def with_goals(rows: list[tuple[str, RatingRow]], cfg: JudgeConfig) -> list[tuple[str, RatingRow]]:
    """Rows with their prediction, reference and options filled in, where the row lacks them, from
    the judge run's records (prediction) and ``references=`` (reference, options) by id."""
    preds: dict[str, Any] = {}
    if cfg.judge_run:
        for _, rec in iter_jsonl(
            inside(Path(cfg.judge_run).expanduser(), "judge.jsonl", what="judge_run records")
        ):
            if isinstance(rec, dict) and "prediction" in rec:
                preds[str(rec.get("id"))] = rec["prediction"]
    layouts: dict[str, tuple[Any, Any]] = {}
    if cfg.references:
        from gen.generators.judge.wagibench import layout_options

        layouts = layout_options(Path(cfg.references).expanduser())
    out = []
    for where, row in rows:
        ref, options = layouts.get(row.id, (None, None))
        update = {
            "prediction": row.prediction if row.prediction is not None else preds.get(row.id),
            "reference": row.reference if row.reference is not None else ref,
            "options": row.options if row.options is not None else options,
        }
        out.append((where, row.model_copy(update=update)))
    return out


def goal_text(goal: Any) -> str:
    """A goal as text for the sentence embedder: free text as it is, a structured goal as
    ``type: value, value`` (its fields in order)."""
    if isinstance(goal, dict):
        kind = str(goal.get("type", "")).replace("_", " ")
        values = ", ".join(str(v) for k, v in goal.items() if k != "type" and v not in (None, ""))
        return f"{kind}: {values}" if kind else values
    return str(goal)


def baseline_values(
    rows: list[RatingRow], embed: Callable[[list[str]], Any]
) -> list[tuple[float | None, float | None]]:
    """(Snap-MCQ, SBERT similarity) of each row; None where its prediction, reference or options
    are unknown."""
    import numpy as np

    texts = sorted(
        {
            goal_text(g)
            for r in rows
            for g in [r.prediction, r.reference, *(r.options or [])]
            if g is not None
        }
    )
    if not texts:
        return [(None, None)] * len(rows)
    vecs = np.asarray(embed(texts), dtype=np.float32)
    vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    at = {t: vecs[i] for i, t in enumerate(texts)}
    out: list[tuple[float | None, float | None]] = []
    for r in rows:
        if r.prediction is None or r.reference is None:
            out.append((None, None))
            continue
        p, ref = at[goal_text(r.prediction)], goal_text(r.reference)
        sbert = round(float(p @ at[ref]), 6)
        snap = None
        if r.options:
            sims = [float(p @ at[goal_text(o)]) for o in r.options]
            snap = float(goal_text(r.options[int(np.argmax(sims))]) == ref)
        out.append((snap, sbert))
    return out


def read_ratings(path: Path) -> list[tuple[str, RatingRow]]:
    """Rating rows (JSONL); a bad row is ``file:line: field: reason``; ids are unique."""
    if path.is_dir():
        raise InputError(f"input: {path} is a folder; judge meta reads a JSONL file of ratings")
    rows: list[tuple[str, RatingRow]] = []
    seen: set[str] = set()
    for lineno, raw in iter_jsonl(path):
        where = f"{path}:{lineno}"
        row = validated(RatingRow, raw, where, objects_only=False)
        if row.id in seen:
            raise InputError(f"{where}: id: {row.id!r} appears twice")
        seen.add(row.id)
        rows.append((where, row))
    if not rows:
        raise InputError(f"input: {path} holds no ratings")
    return rows


def rating_kind(rows: Sequence[tuple[str, RatingRow]]) -> str:
    """``scores`` when every rater and judge value is a number, ``labels`` when every one is a
    text."""
    kinds: set[str] = set()
    for where, row in rows:
        values = [*row.raters, *([row.judge] if row.judge is not None else [])]
        here = {"scores" if isinstance(v, float | int) else "labels" for v in values}
        if len(here) > 1 or (kinds and here != kinds):
            raise InputError(
                f"{where}: raters: numbers and labels mixed (a file holds scores or labels, not "
                "both)"
            )
        kinds = here
    return kinds.pop()


def judge_values(folder: Path, cfg: JudgeConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """id -> the primary judge's value in a judge run: the normalised score of the first
    ``variant=`` (wagibench) or the label (context, id ``scenario/condition/trial/tTURN``)."""
    if not folder.is_dir():
        raise MissingInputError(f"judge_run: no such run folder: {folder}")
    run = RunFolder.open(folder)
    info = run.manifest.extras.get("judge")
    if (
        run.generator != "judge"
        or not isinstance(info, dict)
        or info.get("kind") not in ("wagibench", "context")
    ):
        raise InputError(f"{folder}/manifest.json: not a judge run of kind wagibench or context")
    label = info.get("judge_label")
    out: dict[str, Any] = {}
    for lineno, rec in run.rows():
        where = f"{folder}/judge.jsonl:{lineno}"
        if not isinstance(rec, dict):
            raise InputError(f"{where}: expected a JSON object")
        try:
            if info["kind"] == "wagibench":
                j = (
                    rec["judgments"].get(cfg.variant[0], {}).get(label)
                    if rec["judgments"]
                    else None
                )
                out[str(rec["id"])] = None if j is None else j["normalised"]
            else:
                key = f"{rec['scenario_id']}/{rec['condition']}/{rec['trial']}/t{rec['turn']}"
                out[key] = rec["verdicts"][label]["label"]
        except (KeyError, TypeError, AttributeError) as e:
            raise InputError(f"{where}: {e}: not a judge record of kind {info['kind']}") from None
    return out, {
        "judge_run": str(folder),
        "kind": info["kind"],
        "judge_label": label,
        "judge_prompt_version": info.get("judge_prompt_version"),
        "judge_prompt_sha256": info.get("judge_prompt_sha256"),
    }


# --------------------------------------------------------------------------- the statistics


def _sign(a: float, b: float, tie: float = 0.0) -> int:
    """The order of a pair: 0 when the two differ by at most ``tie``."""
    return 0 if abs(a - b) <= tie else (a > b) - (a < b)


def aligned(judge: int, r1: int, r2: int) -> bool:
    """WAGIBench's rule for one pair the raters do not order oppositely: a judge tie is aligned
    when a rater tied; a strict judge order when it is the raters' strict order (that of the one
    who did not tie; a strict order never matches two ties)."""
    if judge == 0:
        return r1 == 0 or r2 == 0
    return judge == (r1 or r2)


def pairwise(
    rows: Sequence[MetaRecord],
    value: Callable[[MetaRecord], Any] = lambda r: r.judge,
    tie: float = 0.0,
) -> dict[str, Any]:
    """Pairwise accuracy of the judge (or of another scorer: ``value``, its ties within ``tie``) and
    of rater 3 against raters 1 and 2 (module docstring)."""
    by_group: dict[str, list[MetaRecord]] = defaultdict(list)
    for r in rows:
        by_group[r.group].append(r)
    total = dropped = judge_missing = 0
    judge_ok: list[bool] = []
    human_ok: list[bool] = []
    for group in by_group.values():
        for a, b in combinations(group, 2):
            total += 1
            r1, r2 = (
                _sign(float(a.raters[0]), float(b.raters[0])),
                _sign(float(a.raters[1]), float(b.raters[1])),
            )
            if r1 * r2 == -1:
                dropped += 1
                continue
            va, vb = value(a), value(b)
            if va is None or vb is None:
                judge_missing += 1
            else:
                judge_ok.append(aligned(_sign(float(va), float(vb), tie), r1, r2))
            if len(a.raters) > 2 and len(b.raters) > 2:
                human_ok.append(aligned(_sign(float(a.raters[2]), float(b.raters[2])), r1, r2))
    return {
        "pairs": total,
        "dropped_raters_disagree": dropped,
        "kept": total - dropped,
        "judge_missing": judge_missing,
        "judge_pairwise_accuracy": proportion(sum(judge_ok), len(judge_ok)),
        "human_pairwise_accuracy": proportion(sum(human_ok), len(human_ok)) if human_ok else None,
        "note": "Wilson intervals over pairs; pairs sharing a prediction are not independent.",
    }


def label_agreement(rows: Sequence[MetaRecord]) -> dict[str, Any]:
    """Raw agreement and Cohen's kappa, judge vs each rater and rater vs rater, and per label the
    share of each rater's uses of it that the judge matches."""
    n_raters = min(len(r.raters) for r in rows)
    with_judge = [r for r in rows if r.judge is not None]
    out: dict[str, Any] = {
        "rows": len(rows),
        "judge_missing": len(rows) - len(with_judge),
        "pairs": {},
    }

    def pair(name: str, xs: list[Any], ys: list[Any]) -> None:
        k, a = cohen_kappa(xs, ys), agreement(xs, ys)
        out["pairs"][name] = {
            "rows": len(xs),
            "agreement": None if a is None else rounded(a),
            "kappa": None if k is None else rounded(k),
        }

    for i in range(n_raters):
        pair(
            f"judge~rater_{i + 1}", [r.judge for r in with_judge], [r.raters[i] for r in with_judge]
        )
    for i, k in combinations(range(n_raters), 2):
        pair(
            f"rater_{i + 1}~rater_{k + 1}", [r.raters[i] for r in rows], [r.raters[k] for r in rows]
        )
    labels = sorted({str(v) for r in rows for v in [*r.raters, r.judge] if v is not None})
    out["per_label"] = {
        lab: {
            f"rater_{i + 1}": proportion(
                sum(r.judge == lab for r in with_judge if r.raters[i] == lab),
                sum(r.raters[i] == lab for r in with_judge),
            )
            for i in range(min(n_raters, 2))
        }
        for lab in labels
    }
    return out


def plot_confusion(rows: Sequence[MetaRecord], out: Path) -> dict[str, Any]:
    """``confusion.png``: the judge (columns) against raters 1 and 2 (rows); returns the counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_judge = [r for r in rows if r.judge is not None]
    cats = sorted(
        {v for r in with_judge for v in [*r.raters[:2], r.judge]},
        key=lambda v: (isinstance(v, str), v),
    )
    names = [str(c) for c in cats]
    matrices = {
        f"rater_{i + 1}": confusion(
            [r.raters[i] for r in with_judge], [r.judge for r in with_judge], cats
        )
        for i in range(2)
    }
    fig, axes = plt.subplots(1, 2, figsize=(4 + 1.4 * len(cats), 2.5 + 0.7 * len(cats)))
    for ax, (name, m) in zip(axes, matrices.items(), strict=True):
        ax.imshow(m, cmap="Blues")
        ax.set_xticks(range(len(cats)), names, rotation=45, ha="right")
        ax.set_yticks(range(len(cats)), names)
        ax.set_xlabel("judge")
        ax.set_ylabel(name.replace("_", " "))
        for i, row in enumerate(m):
            for j, v in enumerate(row):
                ax.text(j, i, str(v), ha="center", va="center", color="black")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return {"categories": names, **matrices}


# --------------------------------------------------------------------------- the run


def run(cfg: JudgeConfig, ctx: RunContext) -> Iterator[MetaRecord]:
    rows, kind, source = ctx.plan.data
    assert cfg.input is not None
    ctx.record_input(Path(cfg.input).expanduser())
    records = []
    plain = [row for _, row in rows]
    base = (
        baseline_values(plain, ctx.embedder.encode)
        if cfg.baselines
        and kind == "scores"
        and any(r.prediction is not None and r.reference is not None for r in plain)
        else [(None, None)] * len(rows)
    )
    for index in ctx.indices():
        _, row = rows[index]
        snap, sbert = base[index]
        rec = MetaRecord(
            id=row.id,
            group=row.group,
            raters=row.raters,
            judge=row.judge,
            snap_mcq=snap,
            sbert=sbert,
        )
        records.append(rec)
        yield rec
    summary: dict[str, Any] = {
        "kind": "meta",
        "values": kind,
        "rows": len(records),
        "judge_missing": sum(r.judge is None for r in records),
        "source": source,
    }
    if kind == "scores":
        summary["pairwise"] = pairwise(records)
        summary["baselines"] = (
            {
                "snap_mcq": pairwise(records, lambda r: r.snap_mcq),
                "sbert_similarity": {
                    **pairwise(records, lambda r: r.sbert, cfg.sbert_tie),
                    "tie_within": cfg.sbert_tie,
                },
                "rows_with_prediction_and_reference": sum(r.sbert is not None for r in records),
                "rows_with_options": sum(r.snap_mcq is not None for r in records),
                "embedder": ctx.embedder.describe() if hasattr(ctx.embedder, "describe") else None,
            }
            if any(r.sbert is not None for r in records)
            else None
        )
    else:
        summary["labels"] = label_agreement(records)
    if cfg.plots and any(r.judge is not None for r in records):
        summary["confusion"] = plot_confusion(records, ctx.out_dir / "confusion.png")
    lines = [f"judge meta: {len(records)} rated predictions ({kind})"]
    if kind == "scores":
        p = summary["pairwise"]
        acc = p["judge_pairwise_accuracy"]
        lines.append(
            f"  pairs {p['pairs']}, dropped {p['dropped_raters_disagree']}; judge pairwise "
            "accuracy "
            f"{acc['rate']} {acc['ci95']}"
            + (
                f"; human {p['human_pairwise_accuracy']['rate']}"
                if p["human_pairwise_accuracy"]
                else ""
            )
        )
        if summary["baselines"]:
            b = summary["baselines"]
            lines.append(
                f"  baselines: Snap-MCQ {b['snap_mcq']['judge_pairwise_accuracy']['rate']}, SBERT "
                "similarity "
                f"{b['sbert_similarity']['judge_pairwise_accuracy']['rate']} (pairwise accuracy)"
            )
    else:
        for name, v in summary["labels"]["pairs"].items():
            lines.append(
                f"  {name}: agreement {v['agreement']}, kappa {v['kappa']} ({v['rows']} rows)"
            )
    prompt = {k: (source or {}).get(k) for k in ("judge_prompt_version", "judge_prompt_sha256")}
    finish(cfg, ctx, None, summary, prompt, lines)
