"""Goal-conditioned bundles: the app whose state prompts a goal of each action type
(``GOAL_APPS``), the cue a goal sets, and the checks that the bundle's key-only state points to its
goal without stating it.

A cue is what *prompts* a goal, as the paper's are ("Tahir just sent a message asking if Rosie has
been fed"; an appointment for directions; a list for shopping): a message, an appointment, a list
or a shared link that names the goal's most specific word (the thing, place, person or language it
is about), never the goal's own action: not its query, its reminder's task, its message's text, nor
the app that performs it (a Search cue was the search already done). Naming the thing is not
restating: the run of content words around the cue word ("Clue Rivals Edition") is left out of
the test, so a one-word goal ("toothpaste") and the paper's own D* examples pass it.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gen.engine.runner import RunContext
from gen.formats.wagibench import app_view, render_bundle
from gen.schemas import digital as S
from gen.schemas.digital import App
from gen.schemas.personas import RelatedPersona
from gen.text.words import content_words

if TYPE_CHECKING:
    from gen.generators.digital import DigitalConfig


GOAL_APPS: dict[str, list[App]] = {
    "communication": [App.Calendar],
    "translate": [App.Messaging],
    "temporal_attention": [App.Messaging],
    "find_directions": [App.Calendar],
    "entertain": [App.Messaging],
    "search": [App.Messaging],
    "store_memory": [App.Messaging],
    "shop": [App.Notes],
    "guided_activity": [App.Calendar],
    "control_environment": [],
}
"""Which app's state prompts a goal of each action type: plans with the person to write to, an
appointment at the place or for the activity (Calendar); a message asking about the thing, sharing
a link to it, or written in the language to translate (Messaging); a list (Notes). ``search`` with
``source: timeline`` (the user's own history) takes Notes instead. An empty list: no digital
context."""

ACTION_FIELDS: dict[str, tuple[str, ...]] = {
    "search": ("query", "query_item"),
    "find_directions": ("to",),
    "communication": ("content",),
    "temporal_attention": ("content",),
    "store_memory": ("content",),
    "shop": ("content",),
    "entertain": ("content",),
    "guided_activity": ("content",),
    "translate": (),
    "control_environment": ("target", "value"),
}
"""The fields that *are* a goal's action (what the user would type or say to the phone); the
key-only state must not hold most of their words (``cue_action_max``). ``translate`` has none: its
language is what the cue is written in."""

WORD_FIELDS: dict[str, tuple[str, ...]] = {
    "search": ("query_item",),
    "find_directions": ("to",),
    "communication": ("content",),
    "temporal_attention": ("content",),
    "store_memory": ("content",),
    "shop": ("content",),
    "entertain": ("content",),
    "guided_activity": ("content",),
    "translate": ("src_language",),
    "control_environment": ("target",),
}
"""Where a goal's cue word is taken from: the thing a search is about, the place, the content."""


def action_text(goal: Any) -> str:
    return " ".join(str(getattr(goal, f, "") or "") for f in ACTION_FIELDS.get(goal.type, ()))


_BOUNDARY = re.compile(
    r"\b(?:of|for|with|from|in|on|at|to|into|about|by|and|or|is|are|was|called)\b|[,;:?!.()]", re.I
)
COMMON_SHARE = 0.02
"""A word used by more than this share of the bank's goals ("videos", "shop") names no one goal."""


def cue_word(goal: Any, df: Counter[str], goals: int = 0) -> str | None:
    """The goal's most specific word. Its word fields (its action fields when those have none:
    "yesterday") are cut into phrases at prepositions and punctuation; each phrase's head is its
    last content word ("a white cotton shirt" -> shirt), or its rarest when the head is common in
    the bank (``COMMON_SHARE`` of ``goals``: "cute kitten videos" -> kitten); the word is the head
    fewest of the bank's goals use (``df``), the first phrase's on a tie."""
    text = " ".join(str(getattr(goal, f, "") or "") for f in WORD_FIELDS.get(goal.type, ()))
    if not content_words(text):
        text = action_text(goal)
    common = max(2.0, COMMON_SHARE * goals)
    heads: list[str] = []
    for phrase in _BOUNDARY.split(text):
        words = content_words(phrase)
        if words:
            head = words[-1]
            heads.append(head if df[head] <= common else min(reversed(words), key=lambda w: df[w]))
    if not heads:
        return None
    best = min(heads, key=lambda w: df[w])
    found = re.search(rf"(?<![\w']){re.escape(best)}(?![\w'])", text, re.I)
    return found.group(0) if found else best


def request_words(goal: Any, word: str | None = None) -> set[str]:
    """The goal's action words (its :data:`ACTION_FIELDS`) beyond what it is about: the run of
    content words around its cue ``word`` (default: :func:`cue_word` on no bank counts: "Clue
    Rivals Edition", "paper towels", "post office") is left out, since a cue must name it (the
    paper's D* for "how to play Clue Rivals Edition" is a calendar event "Playing Clue Rivals
    Edition with Kaito"). A one-word goal ("toothpaste", "Costco") has none left: naming its thing
    cannot restate it."""
    words = set(content_words(action_text(goal)))
    word = (word or cue_word(goal, Counter()) or "").casefold()
    fields = [*WORD_FIELDS.get(goal.type, ()), *ACTION_FIELDS.get(goal.type, ())]
    for f in fields:  # the run stays inside the field that names the thing (a query_item)
        tokens = re.findall(r"[a-z0-9][a-z0-9'-]*", str(getattr(goal, f, "") or "").casefold())
        if word in tokens:
            k = tokens.index(word)
            lo, hi = k, k + 1
            while lo > 0 and content_words(tokens[lo - 1]):
                lo -= 1
            while hi < len(tokens) and content_words(tokens[hi]):
                hi += 1
            return words - set(tokens[lo:hi])
    return words - {word}


def action_share(goal: Any, state: str, word: str | None = None) -> float:
    """Share of the goal's request words (:func:`request_words`: its action beyond the thing its
    cue ``word`` names) that the state's text holds; 0 when there are none."""
    words = request_words(goal, word)
    if not words:
        return 0.0
    held = set(content_words(state))
    return len(words & held) / len(words)


# ------------------------------------------------------------------------- goal-conditioned bundles


@dataclass
class GoalIndex:
    """A goal bank's goals, verbalised and embedded once per run (for the specificity check)."""

    bank: Any
    texts: list[str]
    vectors: Any
    groups: list[str]
    df: Counter[str]
    """How many of the bank's goals use each content word (the cue word is the goal's rarest)."""


def goal_index(ctx: RunContext, bank: Any) -> GoalIndex:
    from gen.formats.goals import verbalise

    texts = [verbalise(r, ctx.prompts) for r in bank.rows]
    df: Counter[str] = Counter(w for t in texts for w in set(content_words(t)))
    return GoalIndex(bank, texts, ctx.embedder.encode(texts), [r.group for r in bank.rows], df)


def goal_app(cfg: DigitalConfig, goal: Any, rng: random.Random) -> App | None:
    """The app whose state must prompt ``goal`` (the documented mapping and its refinement),
    among the run's apps; None when the goal needs no digital context."""
    apps = list(cfg.goal_apps.get(goal.type, []))
    if goal.type == "search" and goal.source == "timeline" and apps == GOAL_APPS["search"]:
        apps = [App.Notes]
    apps = [a for a in apps if a in cfg.apps]
    return rng.choice(apps) if apps else None


def goal_cue(
    ctx: RunContext,
    cfg: DigitalConfig,
    row: Any,
    related: list[RelatedPersona],
    rng: random.Random,
    df: Counter[str] | None = None,
    size: int = 0,
) -> tuple[S.Cue | None, S.GoalRef]:
    """The cue a goal sets (the app, the person a message comes from, the goal's word it names, and
    the seed its app's cue prompt is given), and the bundle's reference to its goal. ``df`` and
    ``size``: the bank's word counts and goals (:func:`cue_word`)."""
    tag = row.client_tag or row.goal_id
    if row.goal is None:  # a free-text goal: no structure to pick an app from
        return None, S.GoalRef(goal_id=row.goal_id, client_tag=tag, group=row.group, app=None)
    app = goal_app(cfg, row.goal, rng)
    person = rng.choice(related).persona if app is App.Messaging else None
    word = cue_word(row.goal, df if df is not None else Counter(), size)
    ref = S.GoalRef(
        goal_id=row.goal_id,
        client_tag=tag,
        group=row.group,
        app=app,
        person=person.name if person else None,
        word=word if app is not None else None,
    )
    if app is None:
        return None, ref
    seed = ctx.prompts.env.get_template(GOAL_CUE).render(
        g=row.goal.model_dump(),
        app=app.value,
        person=person.first_name if person else None,
        word=word,
    )
    return S.Cue(
        cue_id=row.goal_id,
        app=app,
        cue=" ".join(seed.split()),
        person=person.name if person else None,
    ), ref


GOAL_CUE = "digital/goal_cue.jinja"


def goal_problem(
    ctx: RunContext, cfg: DigitalConfig, bundle: S.DigitalBundle, goals: GoalIndex, index: int
) -> tuple[str, str] | None:
    """Why a goal-conditioned bundle fails its goal (reason, detail), or None: the cue item is in
    the app's key list; the person it comes from and the goal's word are in it
    (``cue_misses_goal_entity``); the key-only state does not state the goal's action (at most
    ``cue_action_max`` of its request words, the words beyond the thing the cue names:
    ``cue_states_goal``); and it points to this goal more than to
    the bank's others (``cue_rank_max``: ``cue_not_specific``). A state that restated its goal
    would pass the last test best: the second comes first, so restating is rejected, not
    rewarded."""
    assert bundle.goal is not None and bundle.goal.app is not None
    app = bundle.goal.app
    keys = app_view(bundle, app.value, key_only=True)
    if not keys:
        return "cue_not_in_key_list", f"the {app.value} app has no key item"
    text = json.dumps(keys, ensure_ascii=False).casefold()
    goal = goals.bank.rows[index].goal
    if (
        bundle.goal.person
        and bundle.goal.person.casefold() not in text
        and bundle.goal.person.split()[0].casefold() not in text
    ):
        return (
            "cue_misses_goal_entity",
            f"{bundle.goal.person} (the cue's person) is not in the cue item",
        )
    word = bundle.goal.word
    if word and not re.search(rf"(?<![\w']){re.escape(word.casefold())}(?![\w'])", text):
        return "cue_misses_goal_entity", f"the goal's word {word!r} is not in the cue item"
    key_state = render_bundle(bundle, key_only=True)
    share = action_share(goal, key_state, bundle.goal.word)
    bundle.goal.action_share = round(share, 3)
    if share > cfg.cue_action_max:
        return "cue_states_goal", (
            f"the key-only state holds {share:.0%} of the goal's action words "
            f"({action_text(goal)!r}; cue_action_max={cfg.cue_action_max})"
        )
    import numpy as np

    v = np.asarray(ctx.embedder.encode([key_state]))[0]
    sims = np.asarray(goals.vectors) @ v
    own = sims[index]
    group = goals.groups[index]
    others = [j for j in range(len(sims)) if j != index and goals.groups[j] != group]
    rank = 1 + int(sum(sims[j] > own for j in others))
    bundle.goal.rank = rank
    if rank > cfg.cue_rank_max:
        best = max(others, key=lambda j: sims[j])
        return "cue_not_specific", (
            f"the key-only state ranks its goal {rank} of {len(others) + 1} (cue_rank_max="
            f"{cfg.cue_rank_max}); closest: {goals.texts[best]!r} ({sims[best]:.3f} vs {own:.3f})"
        )
    return None
