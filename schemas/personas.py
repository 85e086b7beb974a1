"""Personas: sampled facts (authoritative) plus an LLM-written bio checked against them."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gen.schemas import Hex32

Gender = Literal["female", "male", "non-binary"]
Status = Literal["working", "student", "retired"]
Relation = Literal[
    "partner",
    "parent",
    "child",
    "sibling",
    "friend",
    "co-worker",
    "roommate",
    "neighbour",
    "classmate",
]


class PersonaFacts(BaseModel):
    """What code samples. The LLM never changes these."""

    model_config = ConfigDict(extra="forbid")

    persona_id: Hex32
    """32 hex derived from the pool's seed and the persona's slot (a redraw:
    ``<slot>~<attempt>``)."""
    name: str
    """``first_name last_name``, unique in the pool."""
    first_name: str
    """Given name from the nationality's Faker locale (romanized where the locale's script is not
    Latin)."""
    last_name: str
    """Family name from the same locale."""
    gender: Gender
    """Sampled ``female``/``male``/``non-binary`` at 48/48/4; the bio's pronouns must agree."""
    age: int = Field(ge=16, le=100)
    """Years (16 to 100), drawn in one of ``personas/facts.yaml``'s age bands; a bio may not state
    another."""
    nationality: str
    """Demonym of the nationality drawn from ``personas/nationalities.yaml`` (a pool rotates through
    all)."""
    country: str
    """The nationality's country, as ``personas/nationalities.yaml`` names it."""
    home_city: str
    """A real city of that country, from the nationality's ``cities``."""
    home_address: str
    """``<street>, <home_city>, <country>`` with a street from the locale."""
    status: Status
    """``student`` (age 23 or under, 70 %), ``retired`` (67 or over, 75 %), else ``working``."""
    occupation: str
    """A Faker job (``retired <job>`` when retired, ``<field> student`` for a student); the bio must
    mention it."""
    employer: str | None = None
    """A company from the locale when ``working``; None otherwise."""
    school: str | None = None
    """``University of <city>`` or ``<city> Institute of Technology`` for a student; None
    otherwise."""
    interests: list[str]
    """Three distinct interests from ``personas/facts.yaml``."""
    languages: list[str]
    """The nationality's languages, plus English (75 % when missing) and a quarter of the time one
    more."""


class PersonaRecord(PersonaFacts):
    bio: str
    """The LLM's bio (at most 420 characters, whitespace collapsed), checked against the facts:
    names the first name and the occupation, states no other age, uses the gender's pronouns."""


BIO_CHARS = 420
"""A bio's length cap; a bio of exactly this length was cut there (the text gates count it)."""


class Bio(BaseModel):
    """What the LLM writes for a persona."""

    bio: str = Field(min_length=40, max_length=BIO_CHARS)


class RelatedPersona(BaseModel):
    model_config = ConfigDict(extra="forbid")

    relation: Relation
    """How this persona relates to the main persona."""
    persona: PersonaRecord
    """The related persona's full record, drawn from the same pool (never the main persona)."""
