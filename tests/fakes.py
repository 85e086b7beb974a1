"""Stand-ins the unit tests share where the real component is not the point: an embedder whose
cosines follow shared words."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np


class FakeEmbedder:
    """Bag of words, hashed into 256 dimensions, L2-normalised: rewording one word of an item
    keeps the cosine near 1; items with other words are far apart."""

    dim = 256

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in re.findall(r"\w+", t.lower()):
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self.dim] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)

    def describe(self) -> dict[str, Any]:
        return {"backend": "fake", "model": "bag-of-words"}
