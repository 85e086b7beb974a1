"""Bio checks: what a persona's bio must agree with in its facts (pronouns, age, nationality,
occupation)."""

from __future__ import annotations

import re

from gen.generators.personas.facts import NATIONALITIES
from gen.schemas.personas import PersonaFacts

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
