"""Exact inner-product search over embeddings (cosine similarity on normalised vectors), the one
place FAISS is imported: the audit's near-duplicates, a bank's de-duplication and the distractor
sampler's similarity band all search an :func:`ip_index`."""

from __future__ import annotations

from typing import Any

import numpy as np

from gen.extras import need


def ip_index(vectors: Any) -> Any:
    """A FAISS exact inner-product index holding ``vectors`` (rows; float32, made contiguous)."""
    need("search", "the search over embeddings")
    import faiss  # here: gen --help and the generators that never search do not load FAISS

    base = np.ascontiguousarray(vectors, dtype=np.float32)
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(base)
    return index


def swig_ptr(array: np.ndarray) -> Any:
    """FAISS's raw pointer to a numpy array (for its low-level calls)."""
    import faiss

    return faiss.swig_ptr(array)
