"""Persona facts sampling, bio checks and related-persona sampling (no LLM)."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import persona_facts

from gen.engine.runner import derive_id
from gen.formats.people import feasible_relations, sample_related
from gen.generators.personas import (
    AGE_BANDS,
    NATIONALITIES,
    WIDEN_STEPS,
    bio_problems,
    sample_facts,
    slot_strata,
)
from gen.schemas.personas import PersonaFacts, PersonaRecord

FAMILY = {"parent", "child", "sibling"}


def _record(f: PersonaFacts) -> PersonaRecord:
    return PersonaRecord(**f.model_dump(), bio=f"{f.first_name} is a person.")


# --------------------------------------------------------------------------- sampling


def test_sample_facts_is_seeded() -> None:
    a = [f.model_dump() for f in sample_facts(7, 12)]
    b = [f.model_dump() for f in sample_facts(7, 12)]
    c = [f.model_dump() for f in sample_facts(8, 12)]
    assert a == b
    assert a != c
    assert {f["persona_id"] for f in a}.isdisjoint(f["persona_id"] for f in c)


def test_sample_facts_is_prefix_stable() -> None:
    small = sample_facts(3, 10)
    large = sample_facts(3, 20)
    assert [f.model_dump() for f in large[:10]] == [f.model_dump() for f in small]


def test_ids_are_derived_from_seed_and_index() -> None:
    facts = sample_facts(5, 4)
    assert [f.persona_id for f in facts] == [derive_id(5, "personas", i) for i in range(4)]


def test_names_and_ids_unique_at_scale() -> None:
    facts = sample_facts(0, 3000)
    assert len(facts) == 3000
    assert len({f.name for f in facts}) == 3000
    assert len({f.persona_id for f in facts}) == 3000


def test_spread_of_a_small_pool() -> None:
    facts = sample_facts(11, 64)
    assert len({f.nationality for f in facts}) >= 25
    bands = {next(i for i, (lo, hi) in enumerate(AGE_BANDS) if lo <= f.age <= hi) for f in facts}
    assert bands == set(range(len(AGE_BANDS)))
    # no nationality dominates a pool that spans the rotation twice
    assert max(Counter(f.nationality for f in facts).values()) <= 2
    assert {f.gender for f in facts} >= {"female", "male"}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_facts_are_internally_consistent(seed: int) -> None:
    by_demonym = {n.demonym: n for n in NATIONALITIES}
    for f in sample_facts(seed, 96):
        nat = by_demonym[f.nationality]
        assert f.country == nat.country
        assert f.home_city in nat.cities
        assert f.home_address.endswith(f"{f.home_city}, {f.country}")
        assert f.name.startswith(f.first_name) and f.name.endswith(f.last_name)
        assert 18 <= f.age <= 82
        assert len(f.interests) == 3 == len(set(f.interests))
        assert set(nat.languages) <= set(f.languages)
        if f.status == "student":
            assert f.age <= 23 and f.school and f.employer is None
            assert f.occupation.endswith("student")
        elif f.status == "retired":
            assert f.age >= 67 and f.employer is None and f.occupation.startswith("retired ")
        else:
            assert f.employer and f.school is None
        assert f.name.isascii() or nat.locale not in ("ja_JP", "zh_CN")  # romanized names


# --------------------------------------------------------------------------- bio checks

CLEAN = (
    "Jonas is a 34-year-old software engineer at Müller GmbH in Berlin. "
    "He spends weekends hiking and plays chess with his friends."
)


def test_clean_bio_has_no_problems() -> None:
    assert bio_problems(persona_facts(), CLEAN) == []


def test_everyday_words_are_not_placeholders() -> None:
    bio = "Jonas is a software engineer in Berlin. His name comes from his grandfather."
    assert bio_problems(persona_facts(), bio) == []


@pytest.mark.parametrize(
    ("bio", "expected"),
    [
        (CLEAN.replace("34-year-old", "35-year-old"), "states age 35"),
        (CLEAN.replace("34-year-old", "aged 52"), "states age 52"),
        (CLEAN.replace("He spends", "She spends"), "pronouns ['she']"),
        (CLEAN.replace("his friends", "her friends"), "pronouns ['her']"),
        (CLEAN + " He lives in France.", "places the persona in France"),
        (CLEAN + " He is living in Madrid.", "places the persona in Madrid"),
        (CLEAN + " He is an Italian man.", "calls the persona Italian"),
        (CLEAN.replace("Jonas", "Thomas"), "does not name Jonas"),
        (CLEAN + " {{ first_name }}", "placeholder"),
        (CLEAN + " Lorem ipsum.", "placeholder"),
        ("NAME is a 34-year-old software engineer in Berlin.", "placeholder"),
        ("Jonas is 34 and lives in Berlin, where he enjoys hiking and chess.", "occupation"),
    ],
)
def test_planted_contradictions_are_found(bio: str, expected: str) -> None:
    problems = bio_problems(persona_facts(), bio)
    assert any(expected in p for p in problems), problems


def test_pronouns_by_gender() -> None:
    she = persona_facts(gender="female", first_name="Anna", name="Anna Becker")
    they = persona_facts(gender="non-binary", first_name="Kim", name="Kim Becker")
    bio = "{} is a software engineer in Berlin. {} likes chess."
    assert bio_problems(she, bio.format("Anna", "She")) == []
    assert any("pronouns ['he']" in p for p in bio_problems(she, bio.format("Anna", "He")))
    assert bio_problems(they, bio.format("Kim", "They")) == []


@pytest.mark.parametrize(
    "bio",
    [
        "Jonas is a 34-year-old software engineer in Berlin. His wife Maria loves her garden.",
        "Jonas is a software engineer in Berlin. He visits his mother every Sunday; she lives "
        "nearby.",
        "Jonas is a software engineer in Berlin. He has a daughter. She is five.",
        "Jonas is a software engineer in Berlin who cooks with his partner on weekends, and she "
        "bakes.",
    ],
)
def test_pronouns_of_other_people_are_fine(bio: str) -> None:
    assert bio_problems(persona_facts(), bio) == []


def test_a_wrong_pronoun_far_from_any_other_person_is_still_caught() -> None:
    bio = (
        "Jonas is a software engineer in Berlin. His wife is a nurse. He likes chess. "
        "She spends weekends hiking."
    )
    assert any("pronouns ['she']" in p for p in bio_problems(persona_facts(), bio))


def test_own_country_and_city_are_fine() -> None:
    assert (
        bio_problems(persona_facts(), CLEAN + " He was born in Germany and lives in Berlin.") == []
    )
    # another city of the persona's own country is not a contradiction of country
    assert not any(
        "Germany" in p for p in bio_problems(persona_facts(), CLEAN + " He grew up in Germany.")
    )


def test_student_and_retiree_must_be_called_so() -> None:
    student = persona_facts(
        status="student",
        occupation="law student",
        employer=None,
        school="University of Berlin",
        age=20,
    )
    ok = "Jonas studies law at the University of Berlin and loves chess."
    assert bio_problems(student, ok) == []
    assert any("occupation" in p for p in bio_problems(student, "Jonas loves chess and law books."))
    retired = persona_facts(status="retired", occupation="retired nurse", employer=None, age=70)
    assert bio_problems(retired, "Jonas is a retired nurse from Berlin who loves chess.") == []
    assert any(
        "occupation" in p for p in bio_problems(retired, "Jonas is a nurse who loves chess.")
    )


def test_occupation_matched_by_a_content_word() -> None:
    facts = persona_facts(occupation="Chief marketing officer")
    assert (
        bio_problems(facts, "Jonas leads marketing at Müller GmbH in Berlin and plays chess.") == []
    )
    # "chief" alone is a stop word and does not count
    assert any(
        "occupation" in p for p in bio_problems(facts, "Jonas is the chief of a chess club.")
    )


# --------------------------------------------------------------------------- relations


def _pool(seed: int = 4, n: int = 160) -> list[PersonaRecord]:
    return [_record(f) for f in sample_facts(seed, n)]


def _hand_pool() -> list[PersonaRecord]:
    """Ages from 16 to 80 over two nationalities, so every rule has cases on both sides."""
    out = []
    for i, age in enumerate(
        [16, 17, 18, 19, 22, 25, 30, 34, 36, 40, 45, 52, 55, 60, 63, 70, 75, 80]
    ):
        german = i % 2 == 0
        out.append(
            _record(
                persona_facts(
                    persona_id=f"{i:032x}",
                    name=f"P{i} X",
                    first_name=f"P{i}",
                    last_name="X",
                    age=age,
                    nationality="German" if german else "French",
                    country="Germany" if german else "France",
                    home_city="Berlin" if german else "Paris",
                    status="student" if age <= 22 else "retired" if age >= 67 else "working",
                )
            )
        )
    return out


def _check_relation(main: PersonaRecord, other: PersonaRecord, relation: str) -> None:
    diff = other.age - main.age
    if relation == "parent":
        assert diff >= 18, (main.age, other.age)
    if relation == "child":
        assert -diff >= 18, (main.age, other.age)
    if relation == "partner":
        assert main.age >= 18 and other.age >= 18
    if relation in FAMILY:
        assert main.nationality == other.nationality
    if relation == "classmate":
        assert main.status == other.status == "student"
    if relation == "co-worker":
        assert main.status == other.status == "working"


@pytest.mark.parametrize("pool_name", ["sampled", "hand"])
def test_sample_related_invariants(pool_name: str) -> None:
    pool = _pool() if pool_name == "sampled" else _hand_pool()
    seen: Counter[str] = Counter()
    for s in range(400):
        rng = random.Random(s)
        main, related = sample_related(pool, rng, k=5)
        assert len(related) == 5
        ids = [r.persona.persona_id for r in related]
        assert len(set(ids)) == 5 and main.persona_id not in ids
        relations = Counter(r.relation for r in related)
        assert relations["partner"] <= 1
        assert relations["parent"] <= 2
        assert relations["roommate"] <= 2
        for r in related:
            assert r.relation in feasible_relations(main, r.persona)
            _check_relation(main, r.persona, r.relation)
            seen[r.relation] += 1
    # the checks above really were exercised
    assert {"parent", "child", "partner", "sibling"} <= set(seen), seen


def test_sample_related_is_seeded() -> None:
    pool = _pool()
    a = sample_related(pool, random.Random(9))
    b = sample_related(pool, random.Random(9))
    assert a[0].persona_id == b[0].persona_id
    assert [(r.relation, r.persona.persona_id) for r in a[1]] == [
        (r.relation, r.persona.persona_id) for r in b[1]
    ]


def test_sample_related_with_given_main() -> None:
    pool = _hand_pool()
    main = pool[0]  # 16 years old: no partner, no co-workers, may have parents
    for s in range(100):
        got, related = sample_related(pool, random.Random(s), main=main)
        assert got is main
        assert all(r.relation != "partner" for r in related)
        for r in related:
            _check_relation(main, r.persona, r.relation)


def test_feasible_relations_rules() -> None:
    young = persona_facts(
        age=20, status="student", occupation="law student", employer=None, school="U"
    )
    old = persona_facts(age=50)
    assert "parent" in feasible_relations(young, old)
    assert "child" in feasible_relations(old, young)
    assert "partner" not in feasible_relations(young, old)
    assert feasible_relations(young, old) == ["neighbour", "parent"]
    foreign_old = persona_facts(age=50, nationality="French", country="France")
    assert not FAMILY & set(feasible_relations(young, foreign_old))
    minor = persona_facts(age=16)
    assert "partner" not in feasible_relations(minor, persona_facts(age=17))
    assert "partner" in feasible_relations(persona_facts(age=30), persona_facts(age=33))


def test_sample_related_needs_a_big_enough_pool() -> None:
    pool = _pool(n=5)
    with pytest.raises(ValueError, match="5"):
        sample_related(pool, random.Random(0), k=5)
    main, related = sample_related(_pool(n=6), random.Random(0), k=5)
    assert len(related) == 5


# --------------------------------------------------------------------- a pool of the size asked for


def _field(user: str, name: str) -> str:
    return user.split(f"- {name}: ", 1)[1].split("\n", 1)[0]


def pool_script(
    fails: Callable[[str, int], bool], spanish: Callable[[str, int], bool] = lambda n, a: False
):
    """A scripted bio writer: a clean bio from the prompt's own facts, one stating a wrong age
    when ``fails(name, seed)``, or one in Spanish (as the embedded model writes for some
    nationalities) when ``spanish(nationality, age)``."""
    import json

    def script(messages, seed):
        user = messages[-1]["content"]
        name = _field(user, "Name")
        first = user.split("Write a bio of two or three sentences about ", 1)[1].split(":", 1)[0]
        age = int(_field(user, "Age"))
        occupation = _field(user, "Occupation").split(" at ")[0]
        city = _field(user, "Lives in").split(",")[0]
        bio = (
            f"{first} works as {occupation.lower()} and lives in {city}. "
            f"Free time goes to {_field(user, 'Interests')}."
        )
        if fails(name, seed):
            bio = bio.replace(" works as", f" is a {age + 7}-year-old who works as", 1)
        if spanish(_field(user, "Nationality"), age):
            bio = (
                f"{first} vive en {city} con su familia y trabaja todos los días en la ciudad. "
                "Le gusta mucho cocinar, leer novelas y pasear por el parque los domingos."
            )
        return json.dumps({"bio": bio})

    return script


def run_pool(
    out: Path,
    fails: Callable[[str, int], bool],
    spanish: Callable[[str, int], bool] = lambda n, a: False,
    **cfg: Any,
):
    from gen.engine.runner import RunContext, run_config
    from gen.generators.personas import PersonasConfig
    from gen.llm import scripted_llm

    settings = PersonasConfig(**{"cache_dir": None, "progress": "off", "attempts": 2, **cfg})
    ctx = RunContext("personas", settings, out)
    ctx.use(llm=scripted_llm(pool_script(fails, spanish), cache=ctx.cache))
    return run_config("personas", settings, out, ctx=ctx), ctx


def test_a_pool_is_the_size_asked_for(tmp_path: Path) -> None:
    """Slots whose facts' bios all fail draw fresh facts (same nationality and age band) until
    accepted: the pool has exactly n personas, the failed draws are rejects, and the manifest
    says requested / accepted / rejected / attempted."""
    base = sample_facts(0, 10)
    bad = {base[2].name, base[7].name}  # these two draws fail every bio
    result, _ = run_pool(tmp_path / "a", lambda name, seed: name in bad, n=10)
    records = [
        PersonaRecord.model_validate_json(x)
        for x in (tmp_path / "a" / "personas.jsonl").read_text().splitlines()
    ]
    assert len(records) == 10 and result.exit_code == 0
    assert [r.persona_id for r in records][:2] == [base[0].persona_id, base[1].persona_id]
    redrawn = {2: records[2], 7: records[7]}
    for slot, r in redrawn.items():
        assert r.name not in {f.name for f in base}
        assert r.persona_id == derive_id(0, "personas", f"{slot}~1")
        assert (
            r.nationality,
            any(lo <= r.age <= hi and lo <= base[slot].age <= hi for lo, hi in AGE_BANDS),
        ) == (base[slot].nationality, True)
    assert len({r.name for r in records}) == 10
    rejects = [json.loads(x) for x in (tmp_path / "a" / "rejects.jsonl").read_text().splitlines()]
    assert [(x["index"], x["record_id"]) for x in rejects] == [
        (2, base[2].persona_id),
        (7, base[7].persona_id),
    ]
    assert result.manifest["pool"] == {
        "requested": 10,
        "accepted": 10,
        "rejected": 2,
        "attempted": 12,
        "short_slots": [],
        "widened": {},
        "widened_slots": [],
    }
    assert result.manifest["validators"]["pool.redrawn"] == 2
    # same seed, same pool
    run_pool(tmp_path / "b", lambda name, seed: name in bad, n=10)
    assert (tmp_path / "a" / "personas.jsonl").read_bytes() == (
        tmp_path / "b" / "personas.jsonl"
    ).read_bytes()


def test_a_pool_that_cannot_be_filled_says_how_many_were_made(tmp_path: Path) -> None:
    """With widening off (``widen=none``) a slot whose draws all fail leaves the pool short; the
    message names the rule that bounded its draws and what rejected them."""
    base = sample_facts(0, 6)

    def fails(name: str, seed: int) -> bool:
        return any(f.name == name for f in base[4:5]) or name not in {f.name for f in base}

    result, ctx = run_pool(tmp_path, fails, n=6, draws=3, widen="none")
    assert result.exit_code == 1
    assert result.error.startswith(
        "the persona pool has 5 of 6 personas: slot(s) 4 failed all their draws of facts (3 at "
        "their own nationality and age band, never widened (widen=none)); every bio must pass "
        "the text gates (language=en, at most 420 characters) and agree with its facts, and "
        "theirs failed: contradiction 3"
    )
    assert (
        result.manifest["pool"]["short_slots"] == [4] and result.manifest["pool"]["attempted"] == 8
    )
    assert result.manifest["exit_code"] == 1 and result.manifest["error"] == result.error


def test_a_pool_fails_only_when_every_widening_failed(tmp_path: Path) -> None:
    """A model that can write no bio at all: every slot spends its own draws and every widening
    step's, and the message says up to which step."""
    result, _ = run_pool(tmp_path, lambda name, seed: True, n=6, draws=2, attempts=1)
    assert result.exit_code == 1
    assert (
        "failed all their draws of facts (2 at their own nationality and age band and 2 at "
        "each widening step up to widen=any (band, language, region, any))" in result.error
    )
    pool = result.manifest["pool"]
    assert pool["short_slots"] == list(range(6)) and pool["widened"] == {}
    # each slot drew 2 of its own and 2 at every step it has candidates for (band, any: always)
    strata = [slot_strata(0, i, f, 2, "any") for i, f in enumerate(sample_facts(0, 6))]
    assert pool["attempted"] == sum(len(s) for s in strata)
    assert all(len(s) >= 2 + 2 + 2 for s in strata)


def test_a_slot_the_model_cannot_write_widens_and_the_pool_fills(tmp_path: Path) -> None:
    """Issue 43.6: seed 7's slot 1 is Colombian, and the model writes Spanish for every
    Colombian (the language gate rejects it, in any age band): the slot's own draws and its
    neighbouring band's fail, then a nationality sharing its language fills it. The pool has
    all 12, the manifest and the funnel say which slot widened, how and why, and the same
    seed makes the same pool byte for byte."""
    base = sample_facts(7, 12)
    assert base[1].nationality == "Colombian"

    def colombian(nationality: str, age: int) -> bool:
        return nationality == "Colombian"

    result, ctx = run_pool(
        tmp_path / "a", lambda n, s: False, colombian, n=12, seed=7, draws=2, attempts=2
    )
    assert result.exit_code == 0, result.error
    records = [
        PersonaRecord.model_validate_json(x)
        for x in (tmp_path / "a" / "personas.jsonl").read_text().splitlines()
    ]
    assert len(records) == 12 and "Colombian" not in {r.nationality for r in records}
    band = next(b for b in AGE_BANDS if b[0] <= base[1].age <= b[1])
    filled = records[1]
    assert filled.nationality in {"Spanish", "Mexican", "Argentinian"}
    assert band[0] <= filled.age <= band[1]
    assert filled.persona_id == derive_id(7, "personas", "1~4")  # own 2, band 2, then language
    assert records[0].persona_id == base[0].persona_id and records[2:] == [
        PersonaRecord(**f.model_dump(), bio=r.bio)
        for f, r in zip(base[2:], records[2:], strict=True)
    ]
    pool = result.manifest["pool"]
    assert pool["widened"] == {"language": 1} and pool["short_slots"] == []
    # a Spanish bio trips the language gate, or first the surface-form one (Spanish words
    # tagged as English)
    spanish_gates = {"language", "surface_form"}
    (line,) = pool["widened_slots"]
    reasons = line.pop("reasons")
    assert line == {
        "slot": 1,
        "step": "language",
        "from": f"Colombian {band[0]}-{band[1]}",
        "to": f"{filled.nationality} {band[0]}-{band[1]}",
        "draws": 5,
    }
    assert sum(reasons.values()) == 4 and "language" in reasons and set(reasons) <= spanish_gates
    validators = result.manifest["validators"]
    assert validators["pool.widened.band"] == 1 and validators["pool.widened.language"] == 1
    assert validators["pool.redrawn"] == 4
    assert sum(validators.get(f"bio.gate.{g}", 0) for g in spanish_gates) == 8
    rejects = [json.loads(x) for x in (tmp_path / "a" / "rejects.jsonl").read_text().splitlines()]
    assert [x["index"] for x in rejects] == [1] * 4
    assert Counter(x["reason"] for x in rejects) == reasons
    assert result.manifest["distribution"]["nationality"].get("Colombian") is None
    # same seed, same pool; a rerun replays the same choices
    run_pool(tmp_path / "b", lambda n, s: False, colombian, n=12, seed=7, draws=2, attempts=2)
    for name in ("personas.jsonl", "rejects.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_widened_pool_resumes_from_the_cache(tmp_path: Path) -> None:
    """A killed run rerun into its folder replays every call from the cache: the widened slot's
    failed draws and the draw that filled it included, so the pool is the same, byte for byte."""

    def colombian(nationality: str, age: int) -> bool:
        return nationality == "Colombian"

    cache = str(tmp_path / "cache")
    first, _ = run_pool(
        tmp_path / "run", lambda n, s: False, colombian, n=12, seed=7, draws=2, cache_dir=cache
    )
    kept = {
        name: (tmp_path / "run" / name).read_bytes() for name in ("personas.jsonl", "rejects.jsonl")
    }
    for name in kept:  # as a killed run leaves its folder: no final files
        (tmp_path / "run" / name).unlink()
    again, ctx = run_pool(
        tmp_path / "run", lambda n, s: False, colombian, n=12, seed=7, draws=2, cache_dir=cache
    )
    assert first.manifest["pool"]["widened"] == {"language": 1}
    assert again.manifest["pool"] == first.manifest["pool"]
    usage = again.manifest["llm_usage"]
    assert usage["calls"] == usage["cache_hits"] > 12 and ctx.llm.calls == []
    for name, data in kept.items():
        assert (tmp_path / "run" / name).read_bytes() == data


def test_a_stratum_failing_in_one_band_widens_to_the_neighbouring_band(tmp_path: Path) -> None:
    """The nearest widening first: a slot whose nationality fails only in its own age band is
    filled by the same nationality in the neighbouring band nearer its age."""
    base = sample_facts(7, 12)
    k = next(i for i, b in enumerate(AGE_BANDS) if b[0] <= base[1].age <= b[1])

    def own_band(nationality: str, age: int) -> bool:
        return nationality == "Colombian" and AGE_BANDS[k][0] <= age <= AGE_BANDS[k][1]

    result, _ = run_pool(tmp_path, lambda n, s: False, own_band, n=12, seed=7, draws=2)
    assert result.exit_code == 0
    filled = PersonaRecord.model_validate_json(
        (tmp_path / "personas.jsonl").read_text().splitlines()[1]
    )
    near = min(
        (j for j in (k - 1, k + 1) if 0 <= j < len(AGE_BANDS)),
        key=lambda j: min(abs(base[1].age - a) for a in AGE_BANDS[j]),
    )
    assert filled.nationality == "Colombian"
    assert AGE_BANDS[near][0] <= filled.age <= AGE_BANDS[near][1]
    assert result.manifest["pool"]["widened"] == {"band": 1}


@pytest.mark.parametrize("seed", [0, 5, 7])
def test_slot_strata_widen_nearest_first(seed: int) -> None:
    """Each slot's draws: its own stratum ``draws`` times, then each step's candidates in turn;
    a step never repeats an earlier step's nationality, and the order is seeded."""
    by_name = {n.demonym: n for n in NATIONALITIES}
    for slot, f in enumerate(sample_facts(seed, 40)):
        strata = slot_strata(seed, slot, f, 3, "any")
        assert strata == slot_strata(seed, slot, f, 3, "any")
        own = by_name[f.nationality]
        assert [s.step for s in strata[:3]] == [""] * 3
        assert {s.nationality for s in strata[:3]} == {own}
        assert all(s.band[0] <= f.age <= s.band[1] for s in strata[:3])
        steps = [s.step for s in strata]
        assert steps == sorted(steps, key=lambda x: ("", *WIDEN_STEPS).index(x))
        assert steps.count("band") == 3 and steps.count("any") == 3
        seen: dict[str, str] = {}
        for s in strata[3:]:
            nat = s.nationality
            if s.step == "band":
                assert nat == own and s.band != strata[0].band
                assert abs(AGE_BANDS.index(s.band) - AGE_BANDS.index(strata[0].band)) == 1
                continue
            assert s.band == strata[0].band and nat != own
            assert seen.setdefault(nat.demonym, s.step) == s.step
            if s.step == "language":
                assert set(nat.languages) & set(own.languages)
            if s.step == "region":
                assert nat.region == own.region
        assert slot_strata(seed, slot, f, 3, "none") == strata[:3]
        assert slot_strata(seed, slot, f, 3, "band") == strata[:6]


def test_a_digital_run_stops_when_its_pool_is_short(tmp_path: Path) -> None:
    from gen.engine.runner import RunContext, run_config
    from gen.errors import GenError
    from gen.generators.digital import DigitalConfig
    from gen.llm import scripted_llm

    settings = DigitalConfig(
        n=1, persona_pool=6, cache_dir=None, progress="off", pool_dir=str(tmp_path / "pools")
    )
    ctx = RunContext("digital", settings, tmp_path / "run").use(
        llm=scripted_llm(pool_script(lambda n, s: True))
    )
    with pytest.raises(GenError, match="the persona pool has 0 of 6 personas") as info:
        run_config("digital", settings, tmp_path / "run", ctx=ctx)
    assert info.value.exit_code == 1
    sub = json.loads((tmp_path / "pools" / "seed0-n6" / "manifest.json").read_text())
    assert sub["parent"] == str(tmp_path / "run") and sub["exit_code"] == 1


def test_bios_pass_the_shared_text_gates_first(tmp_path: Path) -> None:
    """A bio cut off mid-sentence, or echoing the prompt's labels, is regenerated (counted per
    gate); when every attempt fails the reject's reason is the gate's name."""
    import json

    from gen.engine.runner import RunContext
    from gen.generators.personas import PersonasConfig, write_bio
    from gen.llm import scripted_llm

    facts = sample_facts(0, 1)[0]
    first = facts.first_name
    clean = (
        f"{first} works as {facts.occupation.lower()} in {facts.home_city} and enjoys long walks."
    )
    cut = (
        f"{first} works as {facts.occupation.lower()} in {facts.home_city} "
        "and enjoys long walks with her"
    )
    labelled = (
        f"{first} works as {facts.occupation.lower()}. Interests: hiking, cooking and reading."
    )
    outputs = iter([cut, labelled, clean])
    settings = PersonasConfig(cache_dir=None, progress="off")
    ctx = RunContext("personas", settings, tmp_path).use(
        llm=scripted_llm(lambda messages, seed: json.dumps({"bio": next(outputs)}))
    )
    record = write_bio(ctx, facts, 0, attempts=3, max_tokens=200)
    assert record.bio == clean  # type: ignore[union-attr]
    assert ctx.stats["bio.gate.truncated_text"] == 1 and ctx.stats["bio.gate.fewshot_marker"] == 1
    outputs = iter([cut, cut])
    reject = write_bio(ctx, facts, 0, attempts=2, max_tokens=200, draw=1)
    assert (reject.stage, reject.reason, reject.raw) == ("bio", "truncated_text", cut)  # type: ignore[union-attr]
