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
    name: str
    first_name: str
    last_name: str
    gender: Gender
    age: int = Field(ge=16, le=100)
    nationality: str
    country: str
    home_city: str
    home_address: str
    status: Status
    occupation: str
    employer: str | None = None
    school: str | None = None
    interests: list[str]
    languages: list[str]


class PersonaRecord(PersonaFacts):
    bio: str


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
