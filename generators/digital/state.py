"""Sampling one bundle's global state (the moment, the cue); the state itself
(:class:`gen.formats.bundles.State`) is the bundle format's."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import TYPE_CHECKING

from gen.errors import InputError
from gen.readers import iter_jsonl
from gen.schemas import digital as S
from gen.schemas.digital import App
from gen.schemas.personas import RelatedPersona

if TYPE_CHECKING:
    from gen.generators.digital import DigitalConfig


def sample_datetime(rng: random.Random, cfg: DigitalConfig) -> dt.datetime:
    days = (cfg.date_end - cfg.date_start).days
    day = cfg.date_start + dt.timedelta(days=rng.randint(0, days))
    hour = rng.choices(range(24), weights=cfg.hour_weights)[0]
    return dt.datetime(day.year, day.month, day.day, hour, rng.randint(0, 59))


def load_cues(path: Path) -> list[dict[str, str]]:
    """Read a cue bank; a bad line is an InputError naming the file and line."""
    cues = []
    valid = ", ".join(a.value for a in App)
    for lineno, row in iter_jsonl(path):
        if not isinstance(row, dict) or not {"cue_id", "app", "cue"} <= row.keys():
            raise InputError(f"{path}:{lineno}: a cue needs the fields cue_id, app and cue")
        if not isinstance(row["app"], str) or row["app"] not in App.__members__:
            raise InputError(f"{path}:{lineno}: unknown app {row['app']!r} (choose from {valid})")
        if not isinstance(row["cue"], str) or not row["cue"].strip():
            raise InputError(f"{path}:{lineno}: empty cue text")
        cues.append({"cue_id": str(row["cue_id"]), "app": row["app"], "cue": str(row["cue"])})
    if not cues:
        raise InputError(f"{path}: the cue bank is empty")
    return cues


def pick_cue(
    rng: random.Random,
    cfg: DigitalConfig,
    cues: list[dict[str, str]],
    related: list[RelatedPersona],
) -> S.Cue | None:
    """Inline cue for every bundle, or a bank cue with probability cue_rate. A ``{person}``
    slot is filled with a related persona, so the cue's people are in the persona set."""
    person = rng.choice(related).persona
    draw = rng.random()
    pick = rng.random()
    if cfg.cue is not None:
        row = {"cue_id": "inline", "app": cfg.cue_app.value, "cue": cfg.cue}  # type: ignore[union-attr]
    else:
        usable = [c for c in cues if App(c["app"]) in cfg.apps]
        if not usable or draw >= cfg.cue_rate:
            return None
        row = usable[int(pick * len(usable))]
    named = "{person}" in row["cue"]
    text = row["cue"].replace("{person}", person.first_name)
    return S.Cue(
        cue_id=row["cue_id"], app=App(row["app"]), cue=text, person=person.name if named else None
    )
