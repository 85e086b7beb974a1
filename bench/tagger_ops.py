"""The text gates' tagger with blis's matrix product against numpy's (OpenBLAS), on a bench bank.

``gen.text.tagging`` runs spaCy's tagger with thinc's CPU ops but numpy's ``gemm``
(``_matmul_ops``). This bench tags the same texts both ways and reports the tagger's CPU time each
way (one BLAS thread) and every text whose Penn tags differ: the carrier heads the surface-form
gate reads (``gen.text.surface.carrier``, each distinct head once) and, with ``--whole``, the
whole options. A bank from ``bench/audit_scale.py`` (``--generate-only``) is the input.

Run from the repository root, on an idle machine:
    OPENBLAS_NUM_THREADS=1 python bench/tagger_ops.py /tmp/audit_scale/jsonl_100000_s0/bank.jsonl
        [--items 100000] [--whole] [--label L]
Results are merged into bench/results/tagger_ops.json (one row per bank, item count and label).
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from gen.text import tagging
from gen.text.surface import carrier
from gen.text.textaudit import FORM_OF_TYPE

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "tagger_ops.json"


def texts_of(bank: Path, items: int, whole: bool) -> list[str]:
    """The distinct carrier heads (and whole options, with ``whole``) of the first ``items``."""
    field = tagging.RECEPTIVE
    out: list[str] = []
    with bank.open() as f:
        for line in itertools.islice(f, items):
            r = json.loads(line)
            kind = FORM_OF_TYPE.get(r["question_type"], "prose")
            for o in r["options"]:
                c = carrier(o, kind)
                if c is not None:
                    out.append(tagging._head(c[0], c[1] + field))
                if whole:
                    out.append(o)
    return list(dict.fromkeys(out))


def tag_all(nlp: Any, ops: Any, texts: list[str]) -> tuple[list[tuple[str, ...]], float]:
    """Every text's Penn tags with ``ops`` in each of the pipeline's models, and the CPU seconds."""
    tagging.use_ops(nlp, ops)
    start = time.process_time()
    with tagging._running():
        docs = nlp.pipe(texts, batch_size=256, disable=["attribute_ruler", "lemmatizer"])
        out = [tuple(t.tag_ for t in d) for d in docs]
    return out, time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bank", type=Path)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--whole", action="store_true", help="whole options too")
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    from thinc.api import NumpyOps

    texts = texts_of(a.bank, a.items, a.whole)
    nlp = tagging.tagger()
    tagging.penn("warm up")
    blis, blis_s = tag_all(nlp, NumpyOps(), texts)
    matmul, matmul_s = tag_all(nlp, tagging._matmul_ops(), texts)
    differ = [(t, x, y) for t, x, y in zip(texts, blis, matmul, strict=True) if x != y]
    row = {
        "bank": str(a.bank),
        "items": a.items,
        "whole_options": a.whole,
        "label": a.label,
        "texts": len(texts),
        "tokens": sum(map(len, blis)),
        "blis_cpu_s": round(blis_s, 2),
        "matmul_cpu_s": round(matmul_s, 2),
        "speedup": round(blis_s / matmul_s, 2),
        "texts_whose_tags_differ": len(differ),
        "differences": [{"text": t, "blis": list(x), "matmul": list(y)} for t, x, y in differ[:20]],
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "load_before": round(os.getloadavg()[0], 2),
        "date": dt.date.today().isoformat(),
    }
    print(json.dumps({k: v for k, v in row.items() if k != "differences"}, indent=1))
    rows = json.loads(RESULTS.read_text()) if RESULTS.is_file() else []
    key = ("bank", "items", "whole_options", "label")
    rows = [r for r in rows if any(r.get(k) != row[k] for k in key)] + [row]
    RESULTS.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
