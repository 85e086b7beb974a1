"""Persona pool: sampled facts (authoritative) and an LLM-written bio that must agree with them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from pydantic import Field, model_validator

from gen.errors import LLMOutputError
from gen.run import CommonConfig, RunContext, generator
from personas import bio_problems, sample_facts
from schemas import Reject
from schemas.persona import Bio, PersonaFacts, PersonaRecord

PRONOUN = {"female": "she", "male": "he", "non-binary": "they"}
BIO_PROMPT = "personas/bio.jinja"


class PersonasConfig(CommonConfig):
    persona_pool: int | None = Field(None, ge=6)
    """Pool size; the documented form (``+persona_pool=50``); sets ``n``."""
    bio_attempts: int = Field(3, ge=1, le=10)
    """Fresh bios (new seeds) tried before a persona is rejected as contradicting its facts."""
    bio_max_tokens: int = Field(200, ge=32)
    """Token cap of one bio."""

    @model_validator(mode="after")
    def _pool_sets_n(self) -> PersonasConfig:
        if self.persona_pool is not None:
            self.n = self.persona_pool
        return self


def bio_messages(ctx: RunContext, facts: PersonaFacts) -> list[dict[str, str]]:
    return ctx.prompts.render(BIO_PROMPT, p=facts, pronoun=PRONOUN[facts.gender])


def write_bio(ctx: RunContext, facts: PersonaFacts, index: int, attempts: int,
              max_tokens: int) -> PersonaRecord | Reject:
    """Ask for a bio until one agrees with the facts, within ``attempts`` fresh seeds."""
    last: Reject | None = None
    for attempt in range(attempts):
        seed = ctx.seed(index, "bio", attempt)
        try:
            bio = ctx.llm.structured(bio_messages(ctx, facts), Bio, seed=seed, max_tokens=max_tokens)
        except LLMOutputError as e:
            ctx.count(f"bio.{e.reason}")
            last = Reject(record_id=facts.persona_id, index=index, stage="bio", reason=e.reason,
                          detail=e.detail, raw=e.raw)
            continue
        text = " ".join(bio.bio.split())
        problems = bio_problems(facts, text)
        if not problems:
            return PersonaRecord(**facts.model_dump(), bio=text)
        ctx.count("bio.contradiction")
        last = Reject(record_id=facts.persona_id, index=index, stage="bio", reason="contradiction",
                      detail="; ".join(problems), raw=bio.bio)
    assert last is not None
    return last


def pool_summary(seed: int, indices: range) -> dict[str, Any]:
    """The manifest's picture of the sampled facts at ``indices`` (bios accepted or not)."""
    facts = sample_facts(seed, indices.stop)
    dist: dict[str, Counter[str]] = {"nationality": Counter(), "age_band": Counter(),
                                     "gender": Counter(), "status": Counter()}
    for i in indices:
        f = facts[i]
        dist["nationality"][f.nationality] += 1
        dist["age_band"][f"{f.age // 10 * 10}s"] += 1
        dist["gender"][f.gender] += 1
        dist["status"][f.status] += 1
    return {"distribution": {k: dict(sorted(v.items())) for k, v in dist.items()},
            "distinct_occupations": len({facts[i].occupation for i in indices})}


def merge_shards(ctx: RunContext, records: list[dict[str, Any]], manifests: list[dict[str, Any]]) -> None:
    """``merge``: the facts' distribution over every shard's indices."""
    spans = [m["shard"]["indices"] for m in manifests]
    ctx.extra.update(pool_summary(manifests[0]["seed"], range(min(a for a, _ in spans), max(b for _, b in spans))))


@generator("personas", config=PersonasConfig, merge=merge_shards)
def personas(cfg: PersonasConfig, ctx: RunContext) -> Iterator[PersonaRecord | Reject]:
    """Persona pool: seeded facts via Faker locales plus an LLM bio checked against them."""
    facts = sample_facts(cfg.seed, ctx.indices().stop)
    ctx.prompts.hash(BIO_PROMPT)
    for i in ctx.indices():
        yield write_bio(ctx, facts[i], i, cfg.bio_attempts, cfg.bio_max_tokens)
    ctx.extra.update(pool_summary(cfg.seed, ctx.indices()))
    if cfg.progress != "off":
        print_distribution(ctx.extra["distribution"])


def print_distribution(dist: dict[str, dict[str, int]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="persona pool", show_header=True)
    table.add_column("field")
    table.add_column("counts")
    for field, counts in dist.items():
        table.add_row(field, ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])))
    Console(width=120).print(table)
