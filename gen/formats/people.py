"""People, as every room that samples them reads them: a persona pool (the records of a
``personas`` run), made once per (seed, size, LLM) and reused (:func:`ensure_pool`); a main
persona with related ones whose relations fit their ages (:func:`sample_related`); and a pool
slot's persona id (:func:`persona_id`), the same whether or not its bio was written."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from gen.engine.runfolder import load_run_records
from gen.errors import GenError, InputError
from gen.netfs import exclusive
from gen.schemas.personas import PersonaFacts, PersonaRecord, RelatedPersona, Relation

if TYPE_CHECKING:
    from gen.engine.runner import RunContext


def persona_id(seed: int, slot: int | str) -> str:
    """The id of pool slot ``slot``'s persona (its first draw of facts: ``slot``; a redraw:
    ``"<slot>~<attempt>"``) in the pool of ``seed``."""
    from gen.engine.runner import derive_id

    return derive_id(seed, "personas", slot)


# --------------------------------------------------------------------------- relations


def feasible_relations(main: PersonaFacts, other: PersonaFacts) -> list[Relation]:
    """Relations consistent with both ages (and nationality, for family)."""
    diff = other.age - main.age  # positive: other is older
    family = main.nationality == other.nationality
    rel: list[Relation] = ["friend", "neighbour"] if abs(diff) <= 25 else ["neighbour"]
    if family and 18 <= diff <= 45:
        rel.append("parent")
    if family and 18 <= -diff <= 45:
        rel.append("child")
    if family and abs(diff) <= 12:
        rel.append("sibling")
    if main.age >= 18 and other.age >= 18 and abs(diff) <= 12:
        rel.append("partner")
    if main.status == other.status == "working":
        rel.append("co-worker")
    if main.status == other.status == "student" and abs(diff) <= 6:
        rel.append("classmate")
    if max(main.age, other.age) <= 45 and abs(diff) <= 12:
        rel.append("roommate")
    return rel


_WEIGHTS: dict[str, float] = {
    "partner": 3,
    "parent": 3,
    "child": 3,
    "sibling": 3,
    "co-worker": 2.5,
    "classmate": 2.5,
    "friend": 2,
    "roommate": 1.5,
    "neighbour": 1,
}
_AT_MOST = {"partner": 1, "parent": 2, "roommate": 2}


def sample_related(
    pool: Sequence[PersonaRecord], rng: random.Random, k: int = 5, main: PersonaRecord | None = None
) -> tuple[PersonaRecord, list[RelatedPersona]]:
    """A main persona and ``k`` others from ``pool``, each with an age-consistent relation."""
    if len(pool) < k + 1:
        raise ValueError(
            f"a persona pool of {len(pool)} cannot give a main persona and {k} related ones"
        )
    main = main or rng.choice(list(pool))
    others = rng.sample([p for p in pool if p.persona_id != main.persona_id], k)
    taken: dict[str, int] = {}
    related = []
    for other in others:
        options = [
            r for r in feasible_relations(main, other) if taken.get(r, 0) < _AT_MOST.get(r, 99)
        ]
        relation = rng.choices(options, weights=[_WEIGHTS[r] for r in options])[0]
        taken[relation] = taken.get(relation, 0) + 1
        related.append(RelatedPersona(relation=relation, persona=other))
    return main, related


def load_pool(path: Path) -> list[PersonaRecord]:
    """A pool from a personas run folder or a personas.jsonl; a bad row names file and line."""
    records, file = load_run_records(path, "personas")
    pool = []
    for lineno, row in enumerate(records, 1):
        try:
            pool.append(PersonaRecord.model_validate(row))
        except ValidationError as e:
            raise InputError(
                f"{file}:{lineno}: not a persona record ({e.errors()[0]['msg']})"
            ) from None
    return pool


def ensure_pool(
    ctx: RunContext, seed: int, size: int, pool_dir: str
) -> tuple[list[PersonaRecord], Path]:
    """A pool of ``size`` personas made once per (seed, size, LLM) by a ``personas`` sub-run of
    ``ctx`` in ``pool_dir`` and reused after (a given ``persona_file`` is read by
    :func:`load_pool`)."""
    folder = Path(pool_dir).expanduser() / f"seed{seed}-n{size}"
    folder.mkdir(parents=True, exist_ok=True)
    with exclusive(folder / ".lock"):  # shards started together make the pool once (NFS too)
        pool = ctx.subrun(
            "personas",
            folder,
            reuse=True,
            quiet=False,
            seed=seed,
            n=size,
            language=getattr(ctx.cfg, "language", "en"),
        )
        if not pool.ok:
            raise PoolError(pool.manifest.error or f"the persona pool at {folder} is incomplete")
    return load_pool(folder), folder


class PoolError(GenError):
    """The persona pool could not be made at the size asked for (exit code 1)."""

    exit_code = 1
