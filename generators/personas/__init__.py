"""Persona pool (WAGIBench G.1): facts sampled by code, a bio by the LLM that must agree with them.

Code owns every fact: nationality (Faker locales for ~30 nationalities; the city lists are real
cities, since several Faker locales invent city names), age band, name, address, occupation,
interests, languages (the tables are data: ``personas/``). The LLM writes a bio, which is checked
against the facts. A pool has exactly the size asked for: when every bio of a slot's facts fails,
fresh facts are drawn for that slot (``draws``), and when those fail too the slot widens to the
nearest stratum the model can write (a neighbouring age band, a nationality sharing a language or
a region, any nationality: ``widen``), each widening in the manifest. Digital bundles take a main
persona and related personas (with age-consistent relations) from a pool made here and reused by
(seed, size, LLM).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Literal

from pydantic import Field

from gen.engine.registry import generator
from gen.engine.runner import CommonConfig, Plan, RunContext
from gen.generators.personas.checks import bio_problems
from gen.generators.personas.facts import (
    AGE_BANDS,
    NATIONALITIES,
    WIDEN_STEPS,
    redraw_facts,
    sample_facts,
    slot_strata,
)
from gen.llm.attempts import AttemptFailure, retry
from gen.schemas import Reject
from gen.schemas.personas import BIO_CHARS, Bio, PersonaFacts, PersonaRecord
from gen.text.gates import Gates, Language

__all__ = [
    "AGE_BANDS",
    "BIO_PROMPT",
    "NATIONALITIES",
    "PRONOUN",
    "WIDEN_STEPS",
    "PersonasConfig",
    "bio_problems",
    "personas",
    "plan",
    "sample_facts",
    "slot_strata",
    "write_bio",
]

PRONOUN = {"female": "she", "male": "he", "non-binary": "they"}
BIO_PROMPT = "personas/bio.jinja"


class PersonasConfig(CommonConfig):
    n: int = Field(50, ge=1, le=100_000)
    """Pool size (WAGIBench's pool is 50 personas); formerly also ``persona_pool``."""
    attempts: int = Field(3, ge=1, le=10)
    """Fresh bios (new seeds) tried for one draw of facts before the draw is rejected;
    formerly ``bio_attempts``."""
    draws: int = Field(5, ge=1, le=50)
    """Draws of facts per pool slot and stratum: when every bio of a draw fails, the slot draws
    fresh facts (same nationality and age band) until one is accepted or this many were tried,
    then as many at each widening step (``widen``); formerly ``max_attempts``."""
    widen: Literal["none", "band", "language", "region", "any"] = "any"
    """How far a slot whose own nationality and age band failed every draw may move, step by
    step: a neighbouring age band, a nationality sharing a language, one of the same region,
    any nationality (``none``: never; the pool may then be short)."""
    renamed: ClassVar[dict[str, str]] = {
        "bio_attempts": "attempts",
        "max_attempts": "draws",
        "persona_pool": "n",
    }
    bio_max_tokens: int = Field(200, ge=32)
    """Token cap of one bio."""
    language: Language = "en"
    """The language bios must be in (the text gates' language check)."""


def plan(cfg: PersonasConfig) -> Plan:
    """One index per slot of the pool (``n``)."""
    return Plan(cfg.n)


def bio_messages(ctx: RunContext, facts: PersonaFacts) -> list[dict[str, str]]:
    return ctx.prompts.render(BIO_PROMPT, p=facts, pronoun=PRONOUN[facts.gender])


def bio_gates(messages: list[dict[str, str]], language: str) -> Gates:
    """The shared gates of a bio prompt: a bio states the facts, so only the prompt's other lines
    (its instructions) are text it must not copy."""
    prompt = "\n".join(
        line
        for m in messages
        if m["role"] != "assistant"
        for line in m["content"].splitlines()
        if not line.startswith("- ")
    )
    return Gates(messages, Bio, language=language, prompt_text=prompt)


def write_bio(
    ctx: RunContext,
    facts: PersonaFacts,
    index: int,
    attempts: int,
    max_tokens: int,
    draw: int = 0,
    language: str = "en",
    count: Callable[[str], None] | None = None,
) -> PersonaRecord | Reject:
    """Ask for a bio until one passes the shared text gates (as complete sentences) and agrees
    with the facts, within ``attempts`` fresh seeds (``count``: where the manifest's counters
    go, ``ctx.count`` unless given)."""
    messages = bio_messages(ctx, facts)
    gates = bio_gates(messages, language)

    def call(a: int) -> Bio:
        seed = ctx.seed(index, "bio", a) if draw == 0 else ctx.seed(index, "draw", draw, "bio", a)
        return ctx.llm.structured(messages, Bio, seed=seed, max_tokens=max_tokens)

    def check(bio: Bio) -> PersonaRecord:
        text = " ".join(bio.bio.split())
        failure = gates.check(text, "sentence", raw=bio.bio, max_chars=BIO_CHARS)
        if failure is not None:
            key = failure.key("bio")
            raise AttemptFailure("bio", failure.gate, failure.detail, bio.bio, counts=[key])
        problems = bio_problems(facts, text)
        if problems:
            raise AttemptFailure("bio", "contradiction", "; ".join(problems), bio.bio)
        return PersonaRecord(**facts.model_dump(), bio=text)

    try:
        return retry(
            call,
            check,
            budget=attempts,
            stage="bio",
            count=count or ctx.count,
            llm_key=lambda reason: f"bio.{reason}",
        )
    except AttemptFailure as f:
        return Reject.from_failure(f, record_id=facts.persona_id, index=index)


def fill_slot(
    ctx: RunContext,
    cfg: PersonasConfig,
    index: int,
    base: PersonaFacts,
    names: set[str],
    count: Callable[[str], None] | None = None,
) -> list[PersonaRecord | Reject]:
    """Pool slot ``index``: its facts' bios, then fresh draws of facts (its own stratum's, then
    each widening step's: :func:`slot_strata`) until one is accepted or every draw is spent;
    every failed draw is a reject row. A slot whose draws all ended in backend errors does not
    widen (the model wrote nothing that shows its stratum is the trouble)."""
    count = count or ctx.count
    out: list[PersonaRecord | Reject] = []
    facts = base
    strata = slot_strata(cfg.seed, index, base, cfg.draws, cfg.widen)
    for draw, stratum in enumerate(strata):
        if draw and stratum.step != strata[draw - 1].step:
            if all(isinstance(o, Reject) and o.reason == "backend_error" for o in out):
                break  # the model wrote nothing: no sign the stratum is what fails
            count(f"pool.widened.{stratum.step}")
        if draw:
            facts = redraw_facts(cfg.seed, index, draw, base, names, stratum)
            count("pool.redrawn")
        outcome = write_bio(
            ctx, facts, index, cfg.attempts, cfg.bio_max_tokens, draw, cfg.language, count
        )
        out.append(outcome)
        if isinstance(outcome, PersonaRecord):
            break
    return out


def widening(
    cfg: PersonasConfig, index: int, base: PersonaFacts, outcomes: list[PersonaRecord | Reject]
) -> dict[str, Any] | None:
    """The manifest's line for a slot filled by a widened draw (None when its own stratum filled
    it, or nothing did): the step, the stratum it left and the one it took, its draws, and its
    failed draws counted by reject reason."""
    if not isinstance(outcomes[-1], PersonaRecord):
        return None
    strata = slot_strata(cfg.seed, index, base, cfg.draws, cfg.widen)
    took = strata[len(outcomes) - 1]
    if not took.step:
        return None
    return {
        "slot": index,
        "step": took.step,
        "from": strata[0].label(),
        "to": took.label(),
        "draws": len(outcomes),
        "reasons": dict(sorted(Counter(o.reason for o in outcomes[:-1]).items())),  # type: ignore[union-attr]
    }


def pool_summary(
    seed: int, indices: range, records: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The manifest's picture of the pool: the accepted personas' facts (when given), else the
    first draw of every slot at ``indices``."""
    people: list[Any] = (
        records
        if records is not None
        else [f.model_dump() for f in sample_facts(seed, indices.stop)[indices.start :]]
    )
    dist: dict[str, Counter[str]] = {
        "nationality": Counter(),
        "age_band": Counter(),
        "gender": Counter(),
        "status": Counter(),
    }
    for f in people:
        dist["nationality"][f["nationality"]] += 1
        dist["age_band"][f"{f['age'] // 10 * 10}s"] += 1
        dist["gender"][f["gender"]] += 1
        dist["status"][f["status"]] += 1
    return {
        "distribution": {k: dict(sorted(v.items())) for k, v in dist.items()},
        "distinct_occupations": len({f["occupation"] for f in people}),
    }


def merge_shards(
    ctx: RunContext, records: list[dict[str, Any]], manifests: list[dict[str, Any]]
) -> None:
    """``merge``: the pool's distribution and sizes over every shard."""
    ctx.extra.update(pool_summary(manifests[0]["seed"], range(0), records))
    pools = [m["pool"] for m in manifests]
    ctx.extra["pool"] = {
        "requested": sum(p["requested"] for p in pools),
        "accepted": sum(p["accepted"] for p in pools),
        "rejected": sum(p["rejected"] for p in pools),
        "attempted": sum(p["attempted"] for p in pools),
        "short_slots": [i for p in pools for i in p["short_slots"]],
        "widened": dict(
            sorted(sum((Counter(p.get("widened", {})) for p in pools), Counter()).items())
        ),
        "widened_slots": [w for p in pools for w in p.get("widened_slots", [])],
    }


@generator(
    "personas",
    config=PersonasConfig,
    records=PersonaRecord,
    kind="persona",
    merge=merge_shards,
    plan=plan,
    uses=("llm", "text"),
)
def personas(cfg: PersonasConfig, ctx: RunContext) -> Iterator[list[PersonaRecord | Reject]]:
    """Persona pool: seeded facts via Faker locales plus an LLM bio checked against them."""
    base = sample_facts(cfg.seed, ctx.plan.n)
    first = frozenset(f.name for f in base)
    names = set(
        first
    )  # fresh draws never take a name of the pool's first draws, nor an earlier slot's
    ctx.prompts.hash(BIO_PROMPT)
    accepted: list[dict[str, Any]] = []
    rejected = attempted = 0
    short: list[int] = []
    short_reasons: Counter[str] = Counter()
    widened: list[dict[str, Any]] = []

    def ahead(i: int) -> tuple[list[PersonaRecord | Reject], set[str], Counter[str]]:
        # Slots are filled many at once, each as if no earlier slot had redrawn facts; a redraw
        # whose name an earlier slot's redraw took is filled again, in order (below), so the pool
        # is the one a slot-by-slot run makes.
        own, counts = set(first), Counter[str]()

        def tally(key: str) -> None:
            counts[key] += 1

        return fill_slot(ctx, cfg, i, base[i], own, tally), own - first, counts

    for i, (outcomes, drawn, counts) in zip(
        ctx.indices(), ctx.imap(ahead, ctx.indices()), strict=True
    ):
        if drawn & names:
            outcomes = fill_slot(ctx, cfg, i, base[i], names)
        else:
            names |= drawn
            for key, n in counts.items():
                ctx.count(key, n)
        attempted += len(outcomes)
        rejected += sum(isinstance(o, Reject) for o in outcomes)
        accepted += [o.model_dump(mode="json") for o in outcomes if isinstance(o, PersonaRecord)]
        if not isinstance(outcomes[-1], PersonaRecord):
            short.append(i)
            short_reasons.update(o.reason for o in outcomes if isinstance(o, Reject))
        elif (line := widening(cfg, i, base[i], outcomes)) is not None:
            widened.append(line)
        yield outcomes
    ctx.extra.update(pool_summary(cfg.seed, ctx.indices(), accepted))
    ctx.extra["pool"] = {
        "requested": len(ctx.indices()),
        "accepted": len(accepted),
        "rejected": rejected,
        "attempted": attempted,
        "short_slots": short,
        "widened": dict(sorted(Counter(w["step"] for w in widened).items())),
        "widened_slots": widened,
    }
    if short:
        ctx.fail(short_message(cfg, len(accepted), len(ctx.indices()), short, short_reasons))
    ctx.say(distribution_table(ctx.extra["distribution"]))
    for w in widened:
        ctx.say(
            f"slot {w['slot']} widened ({w['step']}): {w['from']} -> {w['to']} after "
            f"{w['draws'] - 1} failed draws"
        )


def short_message(
    cfg: PersonasConfig, made: int, asked: int, short: list[int], reasons: Counter[str]
) -> str:
    """The one line of a pool that could not be filled: the slots, the rule that bounded their
    draws (``draws`` per stratum, ``widen``) and what rejected them."""
    steps = WIDEN_STEPS[: WIDEN_STEPS.index(cfg.widen) + 1] if cfg.widen != "none" else ()
    bound = (
        f"{cfg.draws} at their own nationality and age band and {cfg.draws} at each widening "
        f"step up to widen={cfg.widen} ({', '.join(steps)})"
        if steps
        else f"{cfg.draws} at their own nationality and age band, never widened (widen=none)"
    )
    top = ", ".join(f"{r} {n}" for r, n in reasons.most_common(3))
    return (
        f"the persona pool has {made} of {asked} personas: slot(s) "
        f"{', '.join(map(str, short[:10]))} failed all their draws of facts ({bound}); "
        f"every bio must pass the text gates (language={cfg.language}, at most {BIO_CHARS} "
        f"characters) and agree with its facts, and theirs failed: {top} (rejects.jsonl says "
        f"why; raise draws or widen, or use a larger model)"
    )


def distribution_table(dist: dict[str, dict[str, int]]) -> Any:
    from rich.table import Table

    table = Table(title="persona pool", show_header=True)
    table.add_column("field")
    table.add_column("counts")
    for field, counts in dist.items():
        table.add_row(
            field, ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
        )
    return table
