"""Percentile-band greedy distractor sampling (WAGIBench §3.1): MCQs from a goal bank.

Every goal of the bank is a reference. Goals are verbalised (one template per action type,
``prompts/distractors/<type>.jinja``), embedded (L2-normalised), and for each reference the cosine
similarity to every other goal of its *pool* is computed — the bank minus the reference and exact
duplicates of its text: the paper's "entire set of other reference goals", so a goal of the same
script (a fine-grained neighbour: "take care of plant" / "take care of monstera", appendix E.2) may
be a similar distractor (``exclude_same_group=true`` drops the reference's group too). *Similar*
distractors come from the 95th–99th percentile band of that pool, *dissimilar* ones from the
0th–80th. Within a band C the choice is greedy for diversity: D1 is uniform over C, each next
Di is the candidate of C whose largest similarity to the already chosen is smallest.

Two modes compute the same thing at different costs:

* ``exact`` (banks up to ``exact_max`` goals): full similarity rows, exact percentiles,
  time O(N²·d), memory O(N·d) (rows are processed in blocks). The greedy steps of a narrow
  band (the similar one) ask a FAISS inner-product index (``IndexFlatIP``) for the similarities
  of the last pick to just that row's candidates; a wide band uses one matrix product per step.
* ``scalable`` (larger banks): references are cut into blocks of ``block_size``; each block
  takes one uniform sample of ``sample_size`` goals (consecutive slices of one seeded
  permutation of the bank, so the samples cover it), the block's similarities are one
  matrix product against it, percentile thresholds are estimated from it (minus each
  reference's exclusions), band candidates are the sample's members inside the estimated band,
  and the greedy rule runs exactly within them (over the sample's Gram matrix). Time
  O(N·sample_size·d), memory O(N·d + block_size·sample_size). The percentiles written are
  estimates; their error is that of a sample quantile, sqrt(q(1-q)/sample_size).

Each reference yields a list: ``mcqs_per_kind`` MCQs per band, or a reject for a band with
fewer than N candidates (never a smaller option set). Percentiles need every similarity of a
row, so rows are BLAS matrix products (what ``faiss.pairwise_distances`` does for inner
products); a FAISS ``search`` with k = all returns them sorted but measured 5–7× slower here.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from gen.engine.manifest import JsonListWriter
from gen.engine.registry import generator
from gen.engine.runfolder import load_run_records
from gen.engine.runner import CommonConfig, Plan, RunContext, derive_seed
from gen.errors import ConfigError, InputError, MissingInputError
from gen.formats.goals import GoalBank, goal_dict, load_goals, verbalise
from gen.formats.mcq import answer_position, arrange
from gen.generators.distractors.sampler import NAME, Band, Choice, Sampler, matches
from gen.paths import EXAMPLES
from gen.readers import validated
from gen.schemas import Reject
from gen.schemas.digital import DigitalBundle
from gen.schemas.distractors import Distractor, DistractorMCQ, GoalRow

__all__ = ["Band", "Choice", "DistractorsConfig", "Sampler", "distractors", "matches", "plan"]

BANK_FILES = ("goals.jsonl", "goals.parquet")


class DistractorsConfig(CommonConfig):
    n: int | None = Field(None, ge=1)  # type: ignore[assignment]
    """References: the first n goals of the bank (null: every goal). Distractors come from the whole
    bank."""
    distractors: int = Field(3, ge=1, le=25)
    """Distractors per MCQ (N); options = N + 1."""
    bands: dict[str, tuple[float, float]] = {"similar": (95.0, 99.0), "dissimilar": (0.0, 80.0)}
    """Percentile bands [low, high] of the reference's similarities, one MCQ kind each."""
    mcqs_per_kind: int = Field(1, ge=1, le=20)
    """MCQs per reference and band; later ones avoid distractors the earlier ones used."""
    exclude_same_group: bool = False
    """Drop goals of the reference's own group (its script's other goals, paraphrases among them)
    before percentiles. Off: the paper samples from every other reference goal (§3.1)."""
    mode: Literal["auto", "exact", "scalable"] = "auto"
    """auto: exact up to exact_max goals, scalable beyond."""
    exact_max: int = Field(20_000, ge=2)
    """Largest bank handled in exact mode when mode=auto."""
    sample_size: int = Field(2048, ge=64)
    """Scalable mode: goals sampled per block of references (threshold estimate and candidates)."""
    block_size: int = Field(2048, ge=1)
    """Scalable mode: references sharing one sample (results depend on it, not on sharding)."""
    question: str = "Which digital action does the user most likely want to take now?"
    """The question every MCQ asks."""
    wagibench: bool = True
    """Also write wagibench_mcq_<band>.json in WAGIBench's MCQ layout."""
    digital: str | None = None
    """A digital run made from this goal bank (``digital goals=…``): the WAGIBench MCQ rows of a
    goal with a bundle carry the bundle's cue (``x.cues``), and its MCQ records show the bundle's
    key-only state (``visible.digital_state``, what WAGIBench's digital_key_only prompt shows);
    goals without one keep none (counted)."""

    @field_validator("bands")
    @classmethod
    def _bands(cls, v: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
        if not v:
            raise ValueError("give at least one band")
        for name, (lo, hi) in v.items():
            if not name.isidentifier():
                raise ValueError(f"band name {name!r} must be a plain word (it names files)")
            if not 0 <= lo < hi <= 100:
                raise ValueError(
                    f"bands.{name} must be a pair low, high with 0 <= low < high <= 100, "
                    f"got {lo:g}, {hi:g}"
                )
        return v

    def bank_path(self) -> Path:
        """The goal bank file: input= (a .jsonl/.parquet file or a folder holding goals.*),
        or the shipped examples/goals.jsonl."""
        if self.input is None:
            return EXAMPLES / "goals.jsonl"
        path = Path(self.input).expanduser()
        if path.is_dir():
            for name in BANK_FILES:
                if (path / name).is_file():
                    return path / name
            raise MissingInputError(f"input: {path} holds no {' or '.join(BANK_FILES)}")
        if not path.exists():
            raise MissingInputError(f"input: no such file or folder: {path}")
        return path


def plan(cfg: DistractorsConfig) -> Plan:
    """One index per reference goal: the first ``n`` goals of the bank, or all of them."""
    bank = load_goals(cfg.bank_path())
    total = len(bank.rows)
    if total == 0:
        raise InputError(f"input: {bank.path} holds no goals")
    if cfg.n is not None and cfg.n > total:
        raise ConfigError(f"n={cfg.n} references but the bank has {total} goals")
    if cfg.digital is not None:
        bank.cues, bank.states = bundle_cues(
            Path(cfg.digital).expanduser(), {r.goal_id for r in bank.rows}
        )
    return Plan(total if cfg.n is None else cfg.n, bank)


def bundle_cues(
    path: Path, goal_ids: set[str]
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]]:
    """goal_id -> WAGIBench's cue list of the goal's bundle in a digital run (``digital goals=``),
    and goal_id -> its key-only rendering; a bundle of a goal this bank does not hold means the run
    was made from another bank."""
    from gen.formats.wagibench import render_bundle, wagibench_cues

    records, file = load_run_records(path, "digital")
    cues: dict[str, list[dict[str, Any]]] = {}
    states: dict[str, str] = {}
    for lineno, r in enumerate(records, 1):
        goal = r.get("goal") if isinstance(r, dict) else None
        if not isinstance(goal, dict) or not isinstance(goal.get("goal_id"), str):
            raise InputError(
                f"{file}:{lineno}: goal: not a goal-conditioned bundle (make them with digital "
                "goals=…)"
            )
        if goal["goal_id"] not in goal_ids:
            raise InputError(
                f"{file}:{lineno}: goal.goal_id: {goal['goal_id']!r} is not in the goal bank "
                "(the digital run was made from another bank)"
            )
        cue = r.get("cue")
        if cue is not None and not (
            isinstance(cue, dict)
            and isinstance(cue.get("app"), str)
            and isinstance(cue.get("cue"), str)
        ):
            raise InputError(
                f"{file}:{lineno}: cue: expected null or an object with app and cue texts"
            )
        cues[goal["goal_id"]] = wagibench_cues(r)
        if cue is not None:  # the state a model is shown: the bundle must be one, field by field
            states[goal["goal_id"]] = render_bundle(
                validated(DigitalBundle, r, f"{file}:{lineno}"), key_only=True
            )
    return cues, states


# --------------------------------------------------------------------------- records


def build_mcq(
    ctx: RunContext, cfg: DistractorsConfig, rows: list[GoalRow], texts: list[str], c: Choice
) -> DistractorMCQ | Reject:
    i, kind = c.ref, c.band.name
    rid = ctx.record_id(i, kind, c.j)
    if c.picks is None:
        return Reject(
            record_id=rid, index=i, stage=kind, reason="too_few_candidates", detail=c.detail
        )
    ref = rows[i]
    members = [i, *c.picks]
    # the answer's place is balanced per band (audit's position check: per question type); the
    # distractors' order is the item's own shuffle
    seed = derive_seed(cfg.seed, NAME, "positions")
    at = answer_position(seed, kind, i * cfg.mcqs_per_kind + c.j, len(members))
    order = arrange(len(members), at, random.Random(ctx.seed(i, kind, c.j, "shuffle")))
    position = {m: p for p, m in enumerate(order)}  # member -> option index
    n = len(c.picks)
    distractors = [
        Distractor(
            goal_id=rows[g].goal_id,
            group=rows[g].group,
            text=texts[g],
            option=position[k + 1],
            similarity=round(c.similarity[k], 6),
            percentile=round(c.percentile[k], 4),
            similarity_to_others=[round(c.pairwise[k][m], 6) for m in range(n) if m != k],
        )
        for k, g in enumerate(c.picks)
    ]
    return DistractorMCQ(
        item_id=rid,
        question_type=kind,
        question=cfg.question,
        options=[texts[members[m]] for m in order],
        answer=position[0],
        origins=["reference" if m == 0 else "distractor" for m in order],
        group=ref.group,
        visible={},
        privileged={
            "reference_goal_id": ref.goal_id,
            "structured_goal": ref.goal.model_dump() if ref.goal else None,
        },
        reference_id=ref.goal_id,
        mcq_index=c.j,
        band=(c.band.lo, c.band.hi),
        band_similarity=(round(c.thresholds[0], 6), round(c.thresholds[1], 6)),
        band_candidates=c.candidates,
        pool_size=c.pool,
        percentile_mode="estimated" if c.estimated else "exact",
        distractors=distractors,
    )


def wagibench_row(
    mcq: DistractorMCQ,
    rows: list[GoalRow],
    index: dict[str, int],
    cues: dict[str, list[dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """One MCQ in the layout WAGIBench's MCQ evaluation reads; ``x.cues`` holds every cue the
    inputs have: the goal row's own (any modality) and its digital bundle's."""
    ref = rows[index[mcq.reference_id]]
    by_option = {d.option: rows[index[d.goal_id]] for d in mcq.distractors} | {mcq.answer: ref}
    window = (
        ref.context_window.model_dump() if ref.context_window else {"start_s": None, "end_s": None}
    )
    tag = ref.client_tag or ref.goal_id
    own = [c.model_dump() for c in ref.cues or []]
    bundle = [c for c in (cues or {}).get(ref.goal_id, []) if c not in own]
    return {
        "x": {
            "client_tag": tag,
            "context_window": window,
            "cues": own + bundle,
            "mcq_set": [goal_dict(by_option[k]) for k in range(len(mcq.options))],
        },
        "y": mcq.answer,
        "meta": {
            "client_tag": tag,
            "scenario": {"shortname": ref.group},
            "structured_goal": goal_dict(ref),
            "item_id": mcq.item_id,
            "question_type": mcq.question_type,
        },
    }


# --------------------------------------------------------------------------- the generator


def embed_bank(ctx: RunContext, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Unit embeddings per goal (through the Embedder, once per distinct text) and text codes."""
    codes: dict[str, int] = {}
    text_codes = np.array([codes.setdefault(t, len(codes)) for t in texts], dtype=np.int64)
    vecs = np.asarray(ctx.embedder.encode(list(codes)), dtype=np.float32)
    norms = np.linalg.norm(vecs, axis=1)
    if not np.allclose(norms, 1, atol=1e-3):
        vecs /= np.maximum(norms, 1e-12)[:, None]  # another backend may not normalise
    return vecs[text_codes], text_codes


def summary(values: list[int]) -> dict[str, float]:
    if not values:
        return {}
    a = np.asarray(values)
    return {
        "min": int(a.min()),
        "median": float(np.median(a)),
        "mean": round(float(a.mean()), 2),
        "max": int(a.max()),
    }


@generator(
    NAME,
    config=DistractorsConfig,
    records=DistractorMCQ,
    kind="distractors",
    plan=plan,
    uses=("embedder", "search"),
)
def distractors(cfg: DistractorsConfig, ctx: RunContext) -> Iterator[list[DistractorMCQ | Reject]]:
    """Distractor MCQs from a goal bank: percentile bands of embedding similarity, greedy
    diversity."""
    t0 = time.perf_counter()
    bank: GoalBank = ctx.plan.data
    path = bank.path
    ctx.record_input(path)
    rows = bank.rows
    texts = [verbalise(row, ctx.prompts) for row in rows]
    t1 = time.perf_counter()
    E, text_codes = embed_bank(ctx, texts)
    t2 = time.perf_counter()
    # One option to a reader: texts equal up to case and spacing are excluded and kept apart as one.
    alike: dict[str, int] = {}
    same_text = np.array(
        [alike.setdefault(" ".join(t.casefold().split()), len(alike)) for t in texts],
        dtype=np.int64,
    )
    group_codes: dict[str, int] = {}
    groups = np.array(
        [group_codes.setdefault(row.group, len(group_codes)) for row in rows], dtype=np.int64
    )
    scalable = cfg.mode == "scalable" or (cfg.mode == "auto" and len(rows) > cfg.exact_max)
    sampler = Sampler(
        E,
        groups,
        same_text,
        [Band(k, lo, hi) for k, (lo, hi) in cfg.bands.items()],
        distractors=cfg.distractors,
        mcqs_per_kind=cfg.mcqs_per_kind,
        exclude_same_group=cfg.exclude_same_group,
        scalable=scalable,
        sample_size=cfg.sample_size,
        block_size=cfg.block_size,
        seed=cfg.seed,
    )
    index = {row.goal_id: k for k, row in enumerate(rows)}
    writers = (
        {b: JsonListWriter(ctx.out_dir / f"wagibench_mcq_{b}.json") for b in cfg.bands}
        if cfg.wagibench
        else {}
    )
    candidates: dict[str, list[int]] = {b: [] for b in cfg.bands}
    uses = np.zeros(len(rows), dtype=np.int64)
    for choices in sampler.run(ctx.indices()):
        outcome: list[DistractorMCQ | Reject] = []
        for c in choices:
            item = build_mcq(ctx, cfg, rows, texts, c)
            if (
                isinstance(item, DistractorMCQ)
                and bank.states
                and rows[c.ref].goal_id in bank.states
            ):
                item.visible = {"digital_state": bank.states[rows[c.ref].goal_id]}
            candidates[c.band.name].append(c.candidates)
            if isinstance(item, DistractorMCQ):
                uses[c.picks] += 1
                if writers:
                    writers[c.band.name].write(wagibench_row(item, rows, index, bank.cues))
            outcome.append(item)
        yield outcome
    for w in writers.values():
        w.close()
    ctx.extra[NAME] = {
        "bank": {
            "path": str(path),
            "goals": len(rows),
            "groups": len(group_codes),
            "distinct_texts": int(text_codes.max()) + 1,
            "dim": int(E.shape[1]),
        },
        "mode": "scalable" if sampler.scalable else "exact",
        "percentiles": "estimated" if sampler.scalable else "exact",
        "sample_size": cfg.sample_size if sampler.scalable else None,
        "band_candidates": {b: summary(v) for b, v in candidates.items()},
        "distractor_uses": {
            "goals_used": int((uses > 0).sum()),
            "max_uses": int(uses.max(initial=0)),
        },
        **(
            {
                "digital": {
                    "run": cfg.digital,
                    "references_with_bundle": sum(
                        rows[i].goal_id in bank.cues for i in ctx.indices()
                    ),
                    "references_without_bundle": sum(
                        rows[i].goal_id not in bank.cues for i in ctx.indices()
                    ),
                }
            }
            if bank.cues is not None
            else {}
        ),
        "seconds": {
            "load_and_verbalise": round(t1 - t0, 3),
            "embed": round(t2 - t1, 3),
            "sample_and_write": round(time.perf_counter() - t2, 3),
        },
    }
