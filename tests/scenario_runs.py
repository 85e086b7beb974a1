"""Scenarios in tests: the ``scenarios`` settings a test runs with (no cache, no progress bar), and
one good scenario (skeleton, situations, camera and speech of a bank scenario) that passes every
stage rule. Shared by the tests of the rules and of the generator run end to end."""

from __future__ import annotations

from typing import Any

from gen.generators.scenarios import ScenariosConfig
from gen.generators.scenarios.skeleton import Skeleton


def settings(**kw: Any) -> ScenariosConfig:
    return ScenariosConfig(**{"cache_dir": None, "progress": "off", **kw})


SK = Skeleton(
    "sc-01",
    "bank",
    None,
    "object_in_hand",
    "current",
    "workshop",
    "single_referent",
    "easy",
    "seconds",
)
SIT = {
    "earlier": {
        "name": "claw hammer",
        "technique": ["swing from the elbow", "choke up on the grip"],
        "state": ["flat striking face", "nail half driven"],
    },
    "now": {
        "name": "hand plane",
        "technique": ["push along the grain", "set a shallow blade"],
        "state": ["curled shavings", "smooth edge"],
    },
}
GOOD_CAMERA = {
    "turn_1_image": "Right hand around a wooden handle with a heavy steel head, one face flat and "
    "the other split into "
    "two curved prongs, raised above a board.",
    "turn_2_image": "Both hands pushing a low cast body with a wooden knob at the front along the "
    "edge of a pine "
    "board; thin curls of wood spill out of a slot on top.",
}
GOOD_SPEECH = {
    "turn_1_user": "How hard should I swing this?",
    "turn_2_user": "Am I pushing this the right way?",
    "turn_3_repair_prompt": "I mean the hand plane I'm holding now, not the claw hammer.",
    "turn_3_repair_prompt_deictic": "I mean what's in my hands right now.",
}
