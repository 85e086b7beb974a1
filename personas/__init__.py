"""Persona facts sampling (code owns every fact), bio checks, and related-persona sampling.

Names, streets and employers come from Faker's locale providers; the city lists below are
real cities, since several Faker locales invent city names ("Davidmouth").
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from schemas.persona import PersonaFacts, PersonaRecord, RelatedPersona, Relation


@dataclass(frozen=True)
class Nationality:
    demonym: str
    country: str
    locale: str
    languages: tuple[str, ...]
    cities: tuple[str, ...]
    romanized: bool = False
    """Faker's locale writes names in another script; use its romanized names."""


NATIONALITIES: tuple[Nationality, ...] = (
    Nationality("American", "United States", "en_US", ("English",), ("New York", "Seattle", "Chicago", "Austin", "Denver", "Boston")),
    Nationality("British", "United Kingdom", "en_GB", ("English",), ("London", "Manchester", "Bristol", "Leeds", "Glasgow")),
    Nationality("Irish", "Ireland", "en_IE", ("English", "Irish"), ("Dublin", "Cork", "Galway")),
    Nationality("Canadian", "Canada", "en_CA", ("English", "French"), ("Toronto", "Vancouver", "Montreal", "Calgary")),
    Nationality("Australian", "Australia", "en_AU", ("English",), ("Sydney", "Melbourne", "Brisbane", "Perth")),
    Nationality("Indian", "India", "en_IN", ("Hindi", "English"), ("Mumbai", "Bengaluru", "Delhi", "Pune", "Chennai")),
    Nationality("French", "France", "fr_FR", ("French",), ("Paris", "Lyon", "Marseille", "Toulouse", "Lille")),
    Nationality("German", "Germany", "de_DE", ("German",), ("Berlin", "Munich", "Hamburg", "Cologne", "Leipzig")),
    Nationality("Austrian", "Austria", "de_AT", ("German",), ("Vienna", "Graz", "Salzburg")),
    Nationality("Swiss", "Switzerland", "de_CH", ("German", "French"), ("Zurich", "Basel", "Bern")),
    Nationality("Spanish", "Spain", "es_ES", ("Spanish",), ("Madrid", "Barcelona", "Valencia", "Seville")),
    Nationality("Mexican", "Mexico", "es_MX", ("Spanish",), ("Mexico City", "Guadalajara", "Monterrey", "Puebla")),
    Nationality("Argentinian", "Argentina", "es_AR", ("Spanish",), ("Buenos Aires", "Córdoba", "Rosario")),
    Nationality("Colombian", "Colombia", "es_CO", ("Spanish",), ("Bogotá", "Medellín", "Cali")),
    Nationality("Italian", "Italy", "it_IT", ("Italian",), ("Rome", "Milan", "Naples", "Turin", "Bologna")),
    Nationality("Brazilian", "Brazil", "pt_BR", ("Portuguese",), ("São Paulo", "Rio de Janeiro", "Belo Horizonte", "Recife")),
    Nationality("Portuguese", "Portugal", "pt_PT", ("Portuguese",), ("Lisbon", "Porto", "Braga")),
    Nationality("Dutch", "Netherlands", "nl_NL", ("Dutch",), ("Amsterdam", "Rotterdam", "Utrecht", "The Hague")),
    Nationality("Swedish", "Sweden", "sv_SE", ("Swedish",), ("Stockholm", "Gothenburg", "Malmö")),
    Nationality("Danish", "Denmark", "da_DK", ("Danish",), ("Copenhagen", "Aarhus", "Odense")),
    Nationality("Finnish", "Finland", "fi_FI", ("Finnish",), ("Helsinki", "Tampere", "Turku")),
    Nationality("Polish", "Poland", "pl_PL", ("Polish",), ("Warsaw", "Kraków", "Gdańsk", "Wrocław")),
    Nationality("Czech", "Czech Republic", "cs_CZ", ("Czech",), ("Prague", "Brno", "Ostrava")),
    Nationality("Romanian", "Romania", "ro_RO", ("Romanian",), ("Bucharest", "Cluj-Napoca", "Iași")),
    Nationality("Turkish", "Turkey", "tr_TR", ("Turkish",), ("Istanbul", "Ankara", "Izmir")),
    Nationality("Indonesian", "Indonesia", "id_ID", ("Indonesian",), ("Jakarta", "Surabaya", "Bandung")),
    Nationality("Vietnamese", "Vietnam", "vi_VN", ("Vietnamese",), ("Hanoi", "Ho Chi Minh City", "Da Nang")),
    Nationality("Japanese", "Japan", "ja_JP", ("Japanese",), ("Tokyo", "Osaka", "Kyoto", "Yokohama"), romanized=True),
    Nationality("Chinese", "China", "zh_CN", ("Mandarin",), ("Beijing", "Shanghai", "Shenzhen", "Chengdu"), romanized=True),
    Nationality("Nigerian", "Nigeria", "yo_NG", ("Yoruba", "English"), ("Lagos", "Ibadan", "Abuja")),
    Nationality("Kenyan", "Kenya", "en_KE", ("Swahili", "English"), ("Nairobi", "Mombasa", "Kisumu")),
    Nationality("South African", "South Africa", "zu_ZA", ("Zulu", "English"), ("Johannesburg", "Durban", "Cape Town")),
)

# Age bands sampled evenly in rotation so any pool spans them; within a band, uniform.
AGE_BANDS: tuple[tuple[int, int], ...] = ((18, 24), (25, 34), (35, 44), (45, 54), (55, 66), (67, 82))

INTERESTS = (
    "hiking", "cooking", "photography", "board games", "jazz", "football", "running", "yoga",
    "gardening", "baking", "cycling", "chess", "painting", "reading science fiction", "podcasts",
    "birdwatching", "rock climbing", "swimming", "video games", "knitting", "woodworking",
    "astronomy", "travel", "classical music", "film", "theatre", "tennis", "basketball",
    "sustainable energy", "environmental science", "language learning", "calligraphy",
    "home brewing", "pottery", "salsa dancing", "camping", "volunteering", "history",
    "fishing", "skiing", "surfing", "meditation", "vintage cars", "coding side projects",
    "interior design", "fashion", "stand-up comedy", "wine tasting", "k-pop", "anime",
    "marathon training", "bouldering", "street food", "urban sketching", "vinyl records",
)
EXTRA_LANGUAGES = ("Spanish", "French", "German", "Mandarin", "Japanese", "Italian", "Portuguese", "Arabic", "Korean")
STUDY_FIELDS = (
    "computer science", "nursing", "mechanical engineering", "law", "economics", "biology",
    "graphic design", "psychology", "architecture", "music", "history", "medicine",
    "environmental science", "business administration", "education", "physics",
)
_JP_WARDS = {"Tokyo": ("Shibuya", "Setagaya", "Shinjuku"), "Osaka": ("Kita", "Tennoji"),
             "Kyoto": ("Sakyo", "Nakagyo"), "Yokohama": ("Kohoku", "Naka")}
_CN_DISTRICTS = {"Beijing": ("Haidian", "Chaoyang"), "Shanghai": ("Xuhui", "Pudong"),
                 "Shenzhen": ("Nanshan", "Futian"), "Chengdu": ("Wuhou", "Jinjiang")}


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
        return f"{rng.randint(1, 5)}-{rng.randint(1, 30)}-{rng.randint(1, 20)} {rng.choice(_JP_WARDS[city])}"
    if nat.locale == "zh_CN":
        last = _seeded("zh_CN", seed).last_romanized_name()
        return f"No. {rng.randint(1, 300)} {last} Road, {rng.choice(_CN_DISTRICTS[city])} District"
    return " ".join(_seeded(nat.locale, seed).street_address().split())


def sample_facts(seed: int, n: int) -> list[PersonaFacts]:
    """Facts for personas 0..n-1. Person i depends only on (seed, i) and the names of
    persons before it, so a larger pool extends a smaller one and shards agree."""
    from gen.run import derive_id, derive_seed

    nat_cycle = len(NATIONALITIES)
    used_names: set[str] = set()
    out = []
    for i in range(n):
        rng = random.Random(derive_seed(seed, "personas", i, "facts"))
        # Rotate through seeded permutations so every block of the pool spans all
        # nationalities and age bands.
        nat_perm = list(range(nat_cycle))
        random.Random(derive_seed(seed, "personas", "nat-block", i // nat_cycle)).shuffle(nat_perm)
        nat = NATIONALITIES[nat_perm[i % nat_cycle]]
        band_perm = list(range(len(AGE_BANDS)))
        random.Random(derive_seed(seed, "personas", "age-block", i // len(AGE_BANDS))).shuffle(band_perm)
        lo, hi = AGE_BANDS[band_perm[i % len(AGE_BANDS)]]
        age = rng.randint(lo, hi)
        gender = rng.choices(("female", "male", "non-binary"), weights=(48, 48, 4))[0]
        first, last = _unique_name(nat, gender, rng, used_names)
        city = rng.choice(nat.cities)
        street_seed = derive_seed(seed, "personas", i, "street")
        job_fake = _seeded("en_US", derive_seed(seed, "personas", i, "job"))
        employer = school = None
        if age <= 23 and rng.random() < 0.7:
            status, field = "student", rng.choice(STUDY_FIELDS)
            occupation = f"{field} student"
            school = f"University of {city}" if rng.random() < 0.6 else f"{city} Institute of Technology"
        elif age >= 67 and rng.random() < 0.75:
            status = "retired"
            occupation = f"retired {_job(job_fake).lower()}"
        else:
            status = "working"
            occupation = _job(job_fake)
            employer = _company(nat, derive_seed(seed, "personas", i, "employer"))
        languages = list(nat.languages)
        if "English" not in languages and rng.random() < 0.75:
            languages.append("English")
        if rng.random() < 0.25:
            extra = rng.choice([x for x in EXTRA_LANGUAGES if x not in languages])
            languages.append(extra)
        out.append(PersonaFacts(
            persona_id=derive_id(seed, "personas", i),
            name=f"{first} {last}", first_name=first, last_name=last, gender=gender, age=age,
            nationality=nat.demonym, country=nat.country, home_city=city,
            home_address=f"{_street(nat, city, rng, street_seed)}, {city}, {nat.country}",
            status=status, occupation=occupation, employer=employer, school=school,
            interests=rng.sample(INTERESTS, 3), languages=languages,
        ))
    return out


def _company(nat: Nationality, seed: int) -> str:
    if nat.romanized:
        fake = _seeded(nat.locale, seed)
        return f"{fake.last_romanized_name()} {random.Random(seed).choice(('Holdings', 'Trading Co.', 'Systems', 'Group'))}"
    return _seeded(nat.locale, seed).company()


def _unique_name(nat: Nationality, gender: str, rng: random.Random, used: set[str]) -> tuple[str, str]:
    for attempt in range(50):
        fake = _seeded(nat.locale, rng.randrange(2**31))
        pick = gender if gender != "non-binary" else rng.choice(("female", "male"))
        if nat.romanized:
            if nat.locale == "ja_JP":
                first = fake.first_romanized_name_female() if pick == "female" else fake.first_romanized_name_male()
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
_AGE = re.compile(r"\b(\d{1,3})[- ](?:year|yr)s?[- ]old\b|\baged? (\d{1,3})\b|\bage of (\d{1,3})\b", re.I)
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
        if re.search(rf"\b(?:lives|living|based|resides|residing|born|grew up)\s+in\s+(?:the\s+)?{re.escape(nat.country.lower())}\b", lowered):
            problems.append(f"places the persona in {nat.country}")
        for city in nat.cities:
            if city != facts.home_city and re.search(rf"\b(?:lives|living|based|resides|residing)\s+in\s+{re.escape(city.lower())}\b", lowered):
                problems.append(f"places the persona in {city}")
        if re.search(rf"\b(?:is|a|an)\s+(?:\w+\s+)?{re.escape(nat.demonym.lower())}\s+(?:man|woman|person|citizen|national)\b", lowered):
            problems.append(f"calls the persona {nat.demonym}")
    return problems


# Someone a wrong-gender pronoun may refer to ("His wife Maria loves her garden").
_OTHERS = {
    "she": {"wife", "mother", "mom", "mum", "daughter", "sister", "girlfriend", "grandmother",
            "grandma", "aunt", "niece", "fiancée", "fiancee", "woman", "girl", "lady"},
    "he": {"husband", "father", "dad", "son", "brother", "boyfriend", "grandfather", "grandpa",
           "uncle", "nephew", "fiancé", "fiance", "man", "boy"},
}
_OTHERS_ANY = {"partner", "friend", "colleague", "boss", "neighbour", "neighbor", "child", "kid",
               "spouse", "parent", "cousin", "roommate", "flatmate", "mentor", "client", "patient"}
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _unanchored_pronouns(bio: str, wrong: set[str]) -> list[str]:
    """Wrong-gender pronouns with nobody else to refer to: no person noun of that gender (or a
    neutral one) earlier in the same sentence or in the sentence before."""
    if not wrong:
        return []
    feminine = "she" in wrong
    anchors = (_OTHERS["she" if feminine else "he"] | _OTHERS_ANY)
    found: set[str] = set()
    previous: list[str] = []
    for sentence in _SENTENCE.split(bio):
        words = [w.lower() for w in _WORD.findall(sentence)]
        for i, w in enumerate(words):
            if w in wrong and not any(x.rstrip("s") in anchors or x in anchors
                                      for x in previous + words[:i]):
                found.add(w)
        previous = words
    return sorted(found)


_STOP = {"services", "other", "general", "chief", "senior", "retired", "student"}
_STATUS_WORDS = {"student": {"student", "studies", "studying", "university", "school"},
                 "retired": {"retired", "retiree", "retirement"}}


def _mentions_occupation(facts: PersonaFacts, words: set[str]) -> bool:
    """A bio must name the job by one of its content words, and a student or retiree as such."""
    if facts.status in _STATUS_WORDS and not words & _STATUS_WORDS[facts.status]:
        return False
    content = {w.lower() for w in _WORD.findall(facts.occupation) if len(w) >= 4} - _STOP
    return not content or bool(words & content)


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


_WEIGHTS: dict[str, float] = {"partner": 3, "parent": 3, "child": 3, "sibling": 3, "co-worker": 2.5,
                              "classmate": 2.5, "friend": 2, "roommate": 1.5, "neighbour": 1}
_AT_MOST = {"partner": 1, "parent": 2, "roommate": 2}


def sample_related(pool: Sequence[PersonaRecord], rng: random.Random, k: int = 5,
                   main: PersonaRecord | None = None) -> tuple[PersonaRecord, list[RelatedPersona]]:
    """A main persona and ``k`` others from ``pool``, each with an age-consistent relation."""
    if len(pool) < k + 1:
        raise ValueError(f"a persona pool of {len(pool)} cannot give a main persona and {k} related ones")
    main = main or rng.choice(list(pool))
    others = rng.sample([p for p in pool if p.persona_id != main.persona_id], k)
    taken: dict[str, int] = {}
    related = []
    for other in others:
        options = [r for r in feasible_relations(main, other) if taken.get(r, 0) < _AT_MOST.get(r, 99)]
        relation = rng.choices(options, weights=[_WEIGHTS[r] for r in options])[0]
        taken[relation] = taken.get(relation, 0) + 1
        related.append(RelatedPersona(relation=relation, persona=other))
    return main, related
