"""Persona pool (WAGIBench G.1): facts sampled by code, a bio by the LLM that must agree with them.

Code owns every fact: nationality (Faker locales for ~30 nationalities; the city lists are real
cities, since several Faker locales invent city names), age band, name, address, occupation,
interests, languages (the tables are data: ``personas/``). The LLM writes a bio, which is checked
against the facts. A pool has exactly the size asked for: when every bio of a slot's facts fails,
fresh facts are drawn for that slot (``draws``). Digital bundles take a main persona and related
personas (with age-consistent relations) from a pool made here and reused by (seed, size, LLM).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, RootModel

from gen.gates import Gates, Language
from gen.llm.attempts import AttemptFailure, retry
from gen.paths import PERSONAS
from gen.people import persona_id
from gen.readers import read_yaml_model
from gen.registry import generator
from gen.runner import CommonConfig, Plan, RunContext, derive_seed
from gen.schemas import Reject
from gen.schemas.personas import (
    BIO_CHARS,
    Bio,
    Gender,
    PersonaFacts,
    PersonaRecord,
    Status,
)


@dataclass(frozen=True)
class Nationality:
    demonym: str
    country: str
    locale: str
    languages: tuple[str, ...]
    cities: tuple[str, ...]
    romanized: bool = False
    """Faker's locale writes names in another script; use its romanized names."""


class _Data(BaseModel):
    """``personas/facts.yaml``: the lists a persona's facts are drawn from."""

    model_config = ConfigDict(extra="forbid")

    age_bands: list[tuple[int, int]] = Field(min_length=1)
    interests: list[str] = Field(min_length=3)
    extra_languages: list[str] = Field(min_length=1)
    study_fields: list[str] = Field(min_length=1)
    jp_wards: dict[str, tuple[str, ...]]
    cn_districts: dict[str, tuple[str, ...]]


def _read_data() -> tuple[tuple[Nationality, ...], _Data]:
    """The persona material that is data, not code: ``personas/`` (package data)."""
    nats = read_yaml_model(PERSONAS / "nationalities.yaml", _Nationalities, "nationalities").root
    return tuple(Nationality(**n.model_dump()) for n in nats), read_yaml_model(
        PERSONAS / "facts.yaml", _Data, "facts"
    )


class _NationalityRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    demonym: str
    country: str
    locale: str
    languages: tuple[str, ...] = Field(min_length=1)
    cities: tuple[str, ...] = Field(min_length=1)
    romanized: bool = False


class _Nationalities(RootModel[list[_NationalityRow]]):
    pass


NATIONALITIES, _DATA = _read_data()
AGE_BANDS: tuple[tuple[int, int], ...] = tuple(_DATA.age_bands)
"""Sampled evenly in rotation so any pool spans them; within a band, uniform."""
INTERESTS = tuple(_DATA.interests)
EXTRA_LANGUAGES = tuple(_DATA.extra_languages)
STUDY_FIELDS = tuple(_DATA.study_fields)
_JP_WARDS = _DATA.jp_wards
_CN_DISTRICTS = _DATA.cn_districts


def _fakers():
    from faker import Faker

    return {nat.locale: Faker(nat.locale) for nat in NATIONALITIES}


_FAKERS: dict | None = None


def _faker(locale: str):
    global _FAKERS
    if _FAKERS is None:
        _FAKERS = _fakers()
    return _FAKERS[locale]


def _job(fake) -> str:
    """Faker's English job titles, with its inverted forms ("Engineer, civil") put right."""
    job = fake.job()
    if ", " in job:
        head, tail = job.split(", ", 1)
        job = f"{tail} {head.lower()}"
    return job[0].upper() + job[1:]


def _seeded(locale: str, seed: int):
    fake = _faker(locale)
    fake.seed_instance(seed)
    return fake


def _street(nat: Nationality, city: str, rng: random.Random, seed: int) -> str:
    if nat.locale == "ja_JP":
        block = f"{rng.randint(1, 5)}-{rng.randint(1, 30)}-{rng.randint(1, 20)}"
        return f"{block} {rng.choice(_JP_WARDS[city])}"
    if nat.locale == "zh_CN":
        last = _seeded("zh_CN", seed).last_romanized_name()
        return f"No. {rng.randint(1, 300)} {last} Road, {rng.choice(_CN_DISTRICTS[city])} District"
    return " ".join(_seeded(nat.locale, seed).street_address().split())


def sample_facts(seed: int, n: int) -> list[PersonaFacts]:
    """Facts for personas 0..n-1. Person i depends only on (seed, i) and the names of
    persons before it, so a larger pool extends a smaller one and shards agree."""
    nat_cycle = len(NATIONALITIES)
    used_names: set[str] = set()
    out = []
    for i in range(n):
        # Rotate through seeded permutations so every block of the pool spans all
        # nationalities and age bands.
        nat_perm = list(range(nat_cycle))
        random.Random(derive_seed(seed, "personas", "nat-block", i // nat_cycle)).shuffle(nat_perm)
        band_perm = list(range(len(AGE_BANDS)))
        random.Random(derive_seed(seed, "personas", "age-block", i // len(AGE_BANDS))).shuffle(
            band_perm
        )
        out.append(
            person_facts(
                seed,
                i,
                NATIONALITIES[nat_perm[i % nat_cycle]],
                AGE_BANDS[band_perm[i % len(AGE_BANDS)]],
                used_names,
            )
        )
    return out


def redraw_facts(
    seed: int, slot: int, attempt: int, base: PersonaFacts, names: set[str]
) -> PersonaFacts:
    """Fresh facts for pool ``slot`` after its earlier draws' bios all failed: the slot's
    nationality and age band (the pool keeps its spread), everything else drawn anew from
    (seed, slot, attempt); the name differs from every name in ``names`` (grown in place)."""
    nat = next(n for n in NATIONALITIES if n.demonym == base.nationality)
    band = next(b for b in AGE_BANDS if b[0] <= base.age <= b[1])
    return person_facts(seed, f"{slot}~{attempt}", nat, band, names)


def person_facts(
    seed: int, key: int | str, nat: Nationality, band: tuple[int, int], used_names: set[str]
) -> PersonaFacts:
    """One persona's facts from (seed, key); ``used_names`` keeps names unique (grown in place)."""
    rng = random.Random(derive_seed(seed, "personas", key, "facts"))
    lo, hi = band
    age = rng.randint(lo, hi)
    gender: Gender = rng.choices(("female", "male", "non-binary"), weights=(48, 48, 4))[0]
    first, last = _unique_name(nat, gender, rng, used_names)
    city = rng.choice(nat.cities)
    street_seed = derive_seed(seed, "personas", key, "street")
    job_fake = _seeded("en_US", derive_seed(seed, "personas", key, "job"))
    employer = school = None
    status: Status
    if age <= 23 and rng.random() < 0.7:
        status, field = "student", rng.choice(STUDY_FIELDS)
        occupation = f"{field} student"
        school = (
            f"University of {city}" if rng.random() < 0.6 else f"{city} Institute of Technology"
        )
    elif age >= 67 and rng.random() < 0.75:
        status = "retired"
        occupation = f"retired {_job(job_fake).lower()}"
    else:
        status = "working"
        occupation = _job(job_fake)
        employer = _company(nat, derive_seed(seed, "personas", key, "employer"))
    languages = list(nat.languages)
    if "English" not in languages and rng.random() < 0.75:
        languages.append("English")
    if rng.random() < 0.25:
        extra = rng.choice([x for x in EXTRA_LANGUAGES if x not in languages])
        languages.append(extra)
    return PersonaFacts(
        persona_id=persona_id(seed, key),
        name=f"{first} {last}",
        first_name=first,
        last_name=last,
        gender=gender,
        age=age,
        nationality=nat.demonym,
        country=nat.country,
        home_city=city,
        home_address=f"{_street(nat, city, rng, street_seed)}, {city}, {nat.country}",
        status=status,
        occupation=occupation,
        employer=employer,
        school=school,
        interests=rng.sample(INTERESTS, 3),
        languages=languages,
    )


def _company(nat: Nationality, seed: int) -> str:
    if nat.romanized:
        fake = _seeded(nat.locale, seed)
        kind = random.Random(seed).choice(("Holdings", "Trading Co.", "Systems", "Group"))
        return f"{fake.last_romanized_name()} {kind}"
    return _seeded(nat.locale, seed).company()


def _unique_name(
    nat: Nationality, gender: str, rng: random.Random, used: set[str]
) -> tuple[str, str]:
    for attempt in range(50):
        fake = _seeded(nat.locale, rng.randrange(2**31))
        pick = gender if gender != "non-binary" else rng.choice(("female", "male"))
        if nat.romanized:
            if nat.locale == "ja_JP":
                first = (
                    fake.first_romanized_name_female()
                    if pick == "female"
                    else fake.first_romanized_name_male()
                )
            else:
                first = fake.first_romanized_name()
            last = fake.last_romanized_name()
        else:
            first = fake.first_name_female() if pick == "female" else fake.first_name_male()
            last = fake.last_name()
        name = f"{first} {last}"
        if attempt >= 40:  # the locale's name space is exhausted: disambiguate
            name = f"{first} {chr(65 + attempt - 40)}. {last}"
            first = f"{first} {chr(65 + attempt - 40)}."
        if name not in used:
            used.add(name)
            return first, last
    raise RuntimeError("could not find a unique name")  # 26 initials per name: unreachable


# --------------------------------------------------------------------------- bio checks

_PRONOUNS = {
    "male": {"she", "her", "hers", "herself"},
    "female": {"he", "him", "his", "himself"},
    "non-binary": set(),
}
_AGE = re.compile(
    r"\b(\d{1,3})[- ](?:year|yr)s?[- ]old\b|\baged? (\d{1,3})\b|\bage of (\d{1,3})\b", re.I
)
_WORD = re.compile(r"[A-Za-z']+")
# Only an upper-case NAME is a placeholder; "her name is ..." is ordinary prose.
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\[name\]|<name>|lorem ipsum|(?-i:\bNAME\b)|\bbio\s*:", re.I)


def bio_problems(facts: PersonaFacts, bio: str) -> list[str]:
    """Ways a bio contradicts its sampled facts; empty when it is consistent."""
    problems = []
    if facts.first_name.split()[0].lower() not in bio.lower():
        problems.append(f"does not name {facts.first_name}")
    if _PLACEHOLDER.search(bio):
        problems.append("contains placeholder text")
    for m in _AGE.finditer(bio):
        stated = int(next(g for g in m.groups() if g))
        if stated != facts.age:
            problems.append(f"states age {stated}, persona is {facts.age}")
    words = {w.lower() for w in _WORD.findall(bio)}
    if not _mentions_occupation(facts, words):
        problems.append(f"does not mention the occupation ({facts.occupation})")
    wrong = _unanchored_pronouns(bio, _PRONOUNS[facts.gender])
    if wrong:
        problems.append(f"uses pronouns {wrong} for a {facts.gender} persona")
    lowered = bio.lower()
    for nat in NATIONALITIES:
        if nat.country == facts.country:
            continue
        if re.search(
            r"\b(?:lives|living|based|resides|residing|born|grew "
            rf"up)\s+in\s+(?:the\s+)?{re.escape(nat.country.lower())}\b",
            lowered,
        ):
            problems.append(f"places the persona in {nat.country}")
        for city in nat.cities:
            if city != facts.home_city and re.search(
                rf"\b(?:lives|living|based|resides|residing)\s+in\s+{re.escape(city.lower())}\b",
                lowered,
            ):
                problems.append(f"places the persona in {city}")
        if re.search(
            rf"\b(?:is|a|an)\s+(?:\w+\s+)?{re.escape(nat.demonym.lower())}\s+(?:man|woman|person|citizen|national)\b",
            lowered,
        ):
            problems.append(f"calls the persona {nat.demonym}")
    return problems


# Someone a wrong-gender pronoun may refer to ("His wife Maria loves her garden").
_OTHERS = {
    "she": {
        "wife",
        "mother",
        "mom",
        "mum",
        "daughter",
        "sister",
        "girlfriend",
        "grandmother",
        "grandma",
        "aunt",
        "niece",
        "fiancée",
        "fiancee",
        "woman",
        "girl",
        "lady",
    },
    "he": {
        "husband",
        "father",
        "dad",
        "son",
        "brother",
        "boyfriend",
        "grandfather",
        "grandpa",
        "uncle",
        "nephew",
        "fiancé",
        "fiance",
        "man",
        "boy",
    },
}
_OTHERS_ANY = {
    "partner",
    "friend",
    "colleague",
    "boss",
    "neighbour",
    "neighbor",
    "child",
    "kid",
    "spouse",
    "parent",
    "cousin",
    "roommate",
    "flatmate",
    "mentor",
    "client",
    "patient",
}
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _unanchored_pronouns(bio: str, wrong: set[str]) -> list[str]:
    """Wrong-gender pronouns with nobody else to refer to: no person noun of that gender (or a
    neutral one) earlier in the same sentence or in the sentence before."""
    if not wrong:
        return []
    feminine = "she" in wrong
    anchors = _OTHERS["she" if feminine else "he"] | _OTHERS_ANY
    found: set[str] = set()
    previous: list[str] = []
    for sentence in _SENTENCE.split(bio):
        words = [w.lower() for w in _WORD.findall(sentence)]
        for i, w in enumerate(words):
            if w in wrong and not any(
                x.rstrip("s") in anchors or x in anchors for x in previous + words[:i]
            ):
                found.add(w)
        previous = words
    return sorted(found)


_STOP = {"services", "other", "general", "chief", "senior", "retired", "student"}
_STATUS_WORDS = {
    "student": {"student", "studies", "studying", "university", "school"},
    "retired": {"retired", "retiree", "retirement"},
}


def _mentions_occupation(facts: PersonaFacts, words: set[str]) -> bool:
    """A bio must name the job by one of its content words, and a student or retiree as such."""
    if facts.status in _STATUS_WORDS and not words & _STATUS_WORDS[facts.status]:
        return False
    content = {w.lower() for w in _WORD.findall(facts.occupation) if len(w) >= 4} - _STOP
    return not content or bool(words & content)


# --------------------------------------------------------------------------- the generator

PRONOUN = {"female": "she", "male": "he", "non-binary": "they"}
BIO_PROMPT = "personas/bio.jinja"


class PersonasConfig(CommonConfig):
    n: int = Field(50, ge=1, le=100_000)
    """Pool size (``persona_pool`` wins when set): WAGIBench's pool is 50 personas."""
    persona_pool: int | None = Field(None, ge=6, le=100_000)
    """Pool size; the documented form (``+persona_pool=50``); wins over ``n``."""
    attempts: int = Field(3, ge=1, le=10)
    """Fresh bios (new seeds) tried for one draw of facts before the draw is rejected;
    formerly ``bio_attempts``."""
    draws: int = Field(5, ge=1, le=50)
    """Draws of facts per pool slot: when every bio of a draw fails, the slot draws fresh
    facts (same nationality and age band) until one is accepted or this many were tried;
    formerly ``max_attempts``."""
    renamed: ClassVar[dict[str, str]] = {"bio_attempts": "attempts", "max_attempts": "draws"}
    bio_max_tokens: int = Field(200, ge=32)
    """Token cap of one bio."""
    language: Language = "en"
    """The language bios must be in (the text gates' language check)."""


def plan(cfg: PersonasConfig) -> Plan:
    """One index per slot of the pool (``persona_pool``, else ``n``)."""
    return Plan(cfg.persona_pool if cfg.persona_pool is not None else cfg.n)


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
        return Reject(
            record_id=facts.persona_id,
            index=index,
            stage=f.stage,
            reason=f.reason,
            detail=f.detail,
            raw=f.raw,
        )


def fill_slot(
    ctx: RunContext,
    cfg: PersonasConfig,
    index: int,
    base: PersonaFacts,
    names: set[str],
    count: Callable[[str], None] | None = None,
) -> list[PersonaRecord | Reject]:
    """Pool slot ``index``: its facts' bios, then fresh draws of facts until one is accepted or
    ``draws`` draws are spent; every failed draw is a reject row."""
    count = count or ctx.count
    out: list[PersonaRecord | Reject] = []
    facts = base
    for draw in range(cfg.draws):
        if draw:
            facts = redraw_facts(cfg.seed, index, draw, base, names)
            count("pool.redrawn")
        outcome = write_bio(
            ctx, facts, index, cfg.attempts, cfg.bio_max_tokens, draw, cfg.language, count
        )
        out.append(outcome)
        if isinstance(outcome, PersonaRecord):
            break
    return out


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
    }


@generator(
    "personas",
    config=PersonasConfig,
    records=PersonaRecord,
    kind="persona",
    merge=merge_shards,
    plan=plan,
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
        yield outcomes
    ctx.extra.update(pool_summary(cfg.seed, ctx.indices(), accepted))
    ctx.extra["pool"] = {
        "requested": len(ctx.indices()),
        "accepted": len(accepted),
        "rejected": rejected,
        "attempted": attempted,
        "short_slots": short,
    }
    if short:
        ctx.fail(
            f"the persona pool has {len(accepted)} of {len(ctx.indices())} personas: slot(s) "
            f"{', '.join(map(str, short[:10]))} failed all {cfg.draws} draws of facts "
            f"(rejects.jsonl says why; raise draws or use a larger model)"
        )
    ctx.say(distribution_table(ctx.extra["distribution"]))


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
