"""Goal-conditioned bundles: the app a goal of each action type needs (``GOAL_APPS``), the cue a
goal sets, and the checks that the bundle's key-only state points to its goal."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gen.generators.digital.export import app_view, render_bundle
from gen.runner import RunContext
from gen.schemas import digital as S
from gen.schemas.digital import App
from gen.schemas.personas import RelatedPersona

if TYPE_CHECKING:
    from gen.generators.digital import DigitalConfig


GOAL_APPS: dict[str, list[App]] = {
    "communication": [App.Messaging], "translate": [App.Messaging],
    "temporal_attention": [App.Calendar], "find_directions": [App.Maps, App.Calendar],
    "entertain": [App.Music, App.Videos], "search": [App.Search], "store_memory": [App.Notes],
    "shop": [App.Notes, App.Search], "guided_activity": [App.Videos, App.Search], "control_environment": [],
}
"""Which app's state makes a goal of each action type inferable. Code refines two: ``entertain``
takes Music for audio and Videos for vision; ``search`` with ``source: timeline`` (the user's own
history) takes Notes or Messaging instead of Search. An empty list: no digital context."""



# --------------------------------------------------------------------------- goal-conditioned bundles


@dataclass
class GoalIndex:
    """A goal bank's goals, verbalised and embedded once per run (for the specificity check)."""

    bank: Any
    texts: list[str]
    vectors: Any
    groups: list[str]


def goal_index(ctx: RunContext, bank: Any) -> GoalIndex:
    from gen.generators.distractors import verbalise

    texts = [verbalise(r, ctx.prompts) for r in bank.rows]
    return GoalIndex(bank, texts, ctx.embedder.encode(texts), [r.group for r in bank.rows])


def goal_app(cfg: DigitalConfig, goal: Any, rng: random.Random) -> App | None:
    """The app whose state must make ``goal`` inferable (the documented mapping and its two
    refinements), among the run's apps; None when the goal needs no digital context."""
    apps = list(cfg.goal_apps.get(goal.type, []))
    if goal.type == "entertain" and len(apps) > 1:
        apps = [a for a in apps if a is (App.Music if goal.modality == "audio" else App.Videos)] or apps
    if goal.type == "search" and goal.source == "timeline" and apps == GOAL_APPS["search"]:
        apps = [App.Notes, App.Messaging]
    apps = [a for a in apps if a in cfg.apps]
    return rng.choice(apps) if apps else None


def goal_cue(ctx: RunContext, cfg: DigitalConfig, row: Any, related: list[RelatedPersona],
             rng: random.Random) -> tuple[S.Cue | None, S.GoalRef]:
    """The cue a goal sets (the app and the seed its cue prompt is given; a person the goal
    names becomes a related persona), and the bundle's reference to its goal."""
    tag = row.client_tag or row.goal_id
    if row.goal is None:  # a free-text goal: no structure to pick an app from
        return None, S.GoalRef(goal_id=row.goal_id, client_tag=tag, group=row.group, app=None)
    app = goal_app(cfg, row.goal, rng)
    person = rng.choice(related).persona if row.goal.type in ("communication", "translate") else None
    ref = S.GoalRef(goal_id=row.goal_id, client_tag=tag, group=row.group, app=app,
                    person=person.name if person else None)
    if app is None:
        return None, ref
    seed = ctx.prompts.env.get_template(GOAL_CUE).render(
        g=row.goal.model_dump(), app=app.value, person=person.first_name if person else None)
    return S.Cue(cue_id=row.goal_id, app=app, cue=" ".join(seed.split()),
                 person=person.name if person else None), ref


GOAL_CUE = "digital/goal_cue.jinja"
_WORD = re.compile(r"[a-z0-9']+")
_COMMON = {"the", "a", "an", "of", "to", "at", "in", "on", "for", "and", "my", "me", "with", "from"}


def goal_problem(ctx: RunContext, cfg: DigitalConfig, bundle: S.DigitalBundle, goals: GoalIndex,
                 index: int) -> tuple[str, str] | None:
    """Why a goal-conditioned bundle fails its goal (reason, detail), or None: the cue item is in
    the app's key list; a person or place the goal names appears in it; the key-only state points
    to this goal more than to others of the bank (``cue_rank_max``)."""
    assert bundle.goal is not None and bundle.goal.app is not None
    app = bundle.goal.app
    keys = app_view(bundle, app.value, key_only=True)
    if not keys:
        return "cue_not_in_key_list", f"the {app.value} app has no key item"
    text = json.dumps(keys, ensure_ascii=False).casefold()
    goal = goals.bank.rows[index].goal
    if bundle.goal.person and bundle.goal.person.casefold() not in text \
            and bundle.goal.person.split()[0].casefold() not in text:
        return "cue_misses_goal_entity", f"{bundle.goal.person} (the goal's person) is not in the cue item"
    if goal.type == "find_directions":
        words = [w for w in _WORD.findall(goal.to.casefold()) if w not in _COMMON and len(w) > 2]
        if words and not any(re.search(rf"\b{re.escape(w)}\b", text) for w in words):
            return "cue_misses_goal_entity", f"no word of the place {goal.to!r} is in the cue item"
    import numpy as np

    v = np.asarray(ctx.embedder.encode([render_bundle(bundle, key_only=True)]))[0]
    sims = np.asarray(goals.vectors) @ v
    own = sims[index]
    group = goals.groups[index]
    others = [j for j in range(len(sims)) if j != index and goals.groups[j] != group]
    rank = 1 + int(sum(sims[j] > own for j in others))
    bundle.goal.rank = rank
    if rank > cfg.cue_rank_max:
        best = max(others, key=lambda j: sims[j])
        return "cue_not_specific", (f"the key-only state ranks its goal {rank} of {len(others) + 1} (cue_rank_max="
                                    f"{cfg.cue_rank_max}); closest: {goals.texts[best]!r} ({sims[best]:.3f} vs {own:.3f})")
    return None
