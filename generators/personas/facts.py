"""Persona facts sampled by code: nationality, age band, name, address, occupation, interests and
languages, from the data tables in ``personas/``."""

from __future__ import annotations

import random
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, RootModel

from gen.engine.runner import derive_seed
from gen.formats.people import persona_id
from gen.paths import PERSONAS
from gen.readers import read_yaml_model
from gen.schemas.personas import Gender, PersonaFacts, Status


@dataclass(frozen=True)
class Nationality:
    demonym: str
    country: str
    locale: str
    languages: tuple[str, ...]
    cities: tuple[str, ...]
    region: str
    """The continent: with ``languages``, which nationalities a widened slot tries first."""
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
    region: str
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


WIDEN_STEPS = ("band", "language", "region", "any")
"""How far a pool slot whose draws of facts all failed may move from its nationality and age band,
nearest first: a neighbouring age band (same nationality), another nationality sharing a language
(same band), another of the same region, any other nationality (same band)."""


@dataclass(frozen=True)
class Stratum:
    """What one draw of a pool slot keeps: a nationality and an age band, and how far (``step``:
    ``""`` for the slot's own, else one of :data:`WIDEN_STEPS`) it is from the slot's first draw."""

    nationality: Nationality
    band: tuple[int, int]
    step: str = ""

    def label(self) -> str:
        return f"{self.nationality.demonym} {self.band[0]}-{self.band[1]}"


def slot_strata(seed: int, slot: int, base: PersonaFacts, draws: int, widen: str) -> list[Stratum]:
    """The stratum of each draw of pool ``slot`` (whose first draw is ``base``): ``draws`` draws
    of its own nationality and age band, then ``draws`` at each step of :data:`WIDEN_STEPS` up to
    ``widen`` (``"none"``: no widening) that has candidates, cycling through them. A step's
    candidates exclude the earlier steps' nationalities; their order is seeded by (seed, slot),
    so the draws of a slot depend on nothing else (slots are filled many at once)."""
    nat = next(n for n in NATIONALITIES if n.demonym == base.nationality)
    k = next(i for i, b in enumerate(AGE_BANDS) if b[0] <= base.age <= b[1])
    band = AGE_BANDS[k]
    out = [Stratum(nat, band)] * draws
    steps = WIDEN_STEPS[: WIDEN_STEPS.index(widen) + 1] if widen != "none" else ()
    rng = random.Random(derive_seed(seed, "personas", slot, "widen"))
    tried = {nat.demonym}
    for step in steps:
        if step == "band":
            # the neighbour nearer the person's age first: 34 (25-34) tries 35-44 before 18-24
            near = sorted(
                (j for j in (k - 1, k + 1) if 0 <= j < len(AGE_BANDS)),
                key=lambda j: min(abs(base.age - a) for a in AGE_BANDS[j]),
            )
            options = [Stratum(nat, AGE_BANDS[j], step) for j in near]
        else:
            others = [n for n in NATIONALITIES if n.demonym not in tried]
            if step == "language":
                others = [n for n in others if set(n.languages) & set(nat.languages)]
            elif step == "region":
                others = [n for n in others if n.region == nat.region]
            rng.shuffle(others)
            tried |= {n.demonym for n in others}
            options = [Stratum(n, band, step) for n in others]
        out += [options[d % len(options)] for d in range(draws)] if options else []
    return out


def redraw_facts(
    seed: int,
    slot: int,
    attempt: int,
    base: PersonaFacts,
    names: set[str],
    stratum: Stratum | None = None,
) -> PersonaFacts:
    """Fresh facts for pool ``slot`` after its earlier draws' bios all failed: ``stratum``'s
    nationality and age band (by default the slot's own, so the pool keeps its spread),
    everything else drawn anew from (seed, slot, attempt); the name differs from every name in
    ``names`` (grown in place)."""
    if stratum is None:
        nat = next(n for n in NATIONALITIES if n.demonym == base.nationality)
        band = next(b for b in AGE_BANDS if b[0] <= base.age <= b[1])
        stratum = Stratum(nat, band)
    return person_facts(seed, f"{slot}~{attempt}", stratum.nationality, stratum.band, names)


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
