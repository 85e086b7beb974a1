"""What makes two bank items the same, in words: the id every lock states.

**Item ids are content hashes**: the first 32 hex digits of SHA-256 over the canonical JSON
(sorted keys, no spaces, UTF-8) of the item's *identity*, which leaves out every run-specific
field, so the same item has the same id on every machine and from every seed. Each kind declares
its identity (:meth:`gen.kinds.Kind.identity`): MCQ kinds hash what the candidate sees, order-free,
plus the answer text (:mod:`gen.kinds.mcq`); digital bundles the bundle without seed-derived ids
and stats (:mod:`gen.kinds.digital`); scenarios their visible channels
(:mod:`gen.kinds.scenarios`).
"""

from __future__ import annotations

ITEM_ID = (
    "first 32 hex of SHA-256 of the canonical JSON of the item's identity (see "
    "generators/bank/identity.py): MCQ: question_type, question, visible fields, sorted options, "
    "answer text; digital: the bundle without seed-derived ids and stats; scenarios: the visible "
    "channels (context image, camera frames, user turns, repair prompts), not the gold or the "
    "target"
)
"""How ids are made, in words, for every lock."""
