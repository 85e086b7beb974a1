"""Emotion Intensity Recognition (EgoIntrospect §4.2.2, appendices A.2 and G.1), from
``EmotionSegment`` lines: a within-user relative comparison.

For each participant and emotion label (the segment's main label, one of ``taxonomy``), the
segments are dealt with the seed into sets of up to ``k``; a set with fewer than ``k`` (a group of
one included) is filled with the same participant's segments of another emotion whose reason
differs from every reason in the set, as G.1 fills "when fewer than four valid clips are
available". ``min_group`` (1, the paper's rule) can ask for more of the target emotion: a smaller
group, or a last set under it, is then refused.
Questions alternate between the strongest and the weakest of the set (balanced, as the paper's
44/44); the answer is the segment the participant rated highest or lowest, which must be the only
one with that rating (else the other direction is asked, and a set tied both ways is refused).
Options read ``Label: reason``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from gen.formats.mcq import Positions
from gen.formats.timelines import fmt_time
from gen.generators.introspect.common import Built, Draft, Refusal, positions, rng_for, shuffled
from gen.schemas.introspect import EmotionSegment
from gen.text.gates import key

if TYPE_CHECKING:
    from gen.generators.introspect import IntrospectConfig

QUESTIONS = {
    "highest": "Which of these moments did the user feel most strongly?",
    "lowest": "Which of these moments did the user feel least strongly?",
}


def option(s: EmotionSegment) -> str:
    return f"{s.labels[0]}: {s.reason}"


def build(segments: list[EmotionSegment], cfg: IntrospectConfig) -> list[Built]:
    out: list[Built] = []
    places = positions(cfg.seed)
    taxonomy = {key(x): x for x in cfg.taxonomy}
    groups: dict[tuple[str, str], list[EmotionSegment]] = defaultdict(list)
    by_participant: dict[str, list[EmotionSegment]] = defaultdict(list)
    for s in segments:
        by_participant[s.participant].append(s)
        label = taxonomy.get(key(s.labels[0]))
        if label is None:
            out.append(
                Refusal(
                    s.segment_id,
                    "input",
                    "label_not_in_taxonomy",
                    f"main label {s.labels[0]!r} is not one of the {len(cfg.taxonomy)} labels",
                )
            )
            continue
        groups[(s.participant, label)].append(s)
    turn = 0
    for (participant, label), group in sorted(groups.items()):
        if len(group) < cfg.min_group:
            out.append(
                Refusal(
                    f"{participant}/{label}",
                    "grouping",
                    "group_too_small",
                    f"{len(group)} {label} segment(s) of {participant}, need {cfg.min_group}",
                )
            )
            continue
        rng, _ = rng_for(cfg.seed, "intensity", participant, label)
        order = sorted(group, key=lambda s: s.segment_id)
        rng.shuffle(order)
        sets = [order[i : i + cfg.k] for i in range(0, len(order), cfg.k)]
        if (
            len(sets) > 1 and len(sets[-1]) < cfg.min_group
        ):  # too few of the emotion left for a comparison
            out.append(
                Refusal(
                    f"{participant}/{label}/" + "+".join(s.segment_id for s in sets[-1]),
                    "grouping",
                    "leftover_segments",
                    f"{len(sets[-1])} {label} segment(s) left after sets of {cfg.k}",
                )
            )
            sets = sets[:-1]
        for members in sets:
            direction = ("highest", "lowest")[turn % 2]
            turn += 1
            out.append(
                question(
                    participant, label, members, by_participant[participant], direction, cfg, places
                )
            )
    return out


def question(
    participant: str,
    label: str,
    members: list[EmotionSegment],
    everyone: list[EmotionSegment],
    direction: str,
    cfg: IntrospectConfig,
    places: Positions,
) -> Built:
    src = f"{participant}/{label}/" + "+".join(s.segment_id for s in members)
    rng, seed = rng_for(cfg.seed, "intensity", src)
    chosen = list(members)
    reasons = {key(s.reason) for s in chosen}
    fill = [
        s
        for s in sorted(everyone, key=lambda s: s.segment_id)
        if key(s.labels[0]) != key(label) and key(s.reason) not in reasons and s not in chosen
    ]
    while len(chosen) < cfg.k and fill:
        pick = fill.pop(rng.randrange(len(fill)))
        if key(pick.reason) in reasons:
            continue
        chosen.append(pick)
        reasons.add(key(pick.reason))
    if len(chosen) < cfg.k:
        return Refusal(
            src,
            "filling",
            "too_few_segments",
            f"{len(chosen)} segments of {participant} with distinct reasons, need {cfg.k}",
        )
    ratings = [s.intensity for s in chosen]
    for d in (direction, "lowest" if direction == "highest" else "highest"):
        target = max(ratings) if d == "highest" else min(ratings)
        if ratings.count(target) == 1:
            direction = d
            break
    else:
        return Refusal(
            src,
            "answer",
            "tied_intensity",
            f"ratings {ratings}: neither the highest nor the lowest is unique",
        )
    best = ratings.index(max(ratings) if direction == "highest" else min(ratings))
    ordered = [chosen[best], *(s for j, s in enumerate(chosen) if j != best)]
    options, origins, answer = shuffled(
        [option(s) for s in ordered],
        [f"segment:{s.segment_id}" for s in ordered],
        rng,
        places,
        f"emotion_intensity_{direction}",
    )
    by_text = {option(s): s for s in ordered}
    clips = [
        f"{chr(65 + i)}. " + " / ".join(x.text for x in by_text[o].context)
        for i, o in enumerate(options)
    ]
    return Draft(
        f"emotion_intensity_{direction}",
        QUESTIONS[direction],
        options,
        answer,
        src,
        participant,
        origins=origins,
        visible={"context": "\n".join(c for c in clips if not c.endswith(". "))},
        privileged={
            "intensities": {str(i): by_text[o].intensity for i, o in enumerate(options)},
            "segments": {
                str(i): f"{by_text[o].segment_id} "
                f"{fmt_time(by_text[o].start)}-{fmt_time(by_text[o].end)}"
                for i, o in enumerate(options)
            },
            "target_label": label,
        },
        extra={"shuffle_seed": seed},
    )
