"""Real shard folders to merge: a personas run cut into shards, made with a scripted LLM."""

from __future__ import annotations

import json
from pathlib import Path

from gen.engine.runner import RunContext, run_config
from gen.generators.personas import PersonasConfig, sample_facts
from gen.llm import scripted_llm


def personas_shards(folder: Path, n: int = 4, k: int = 2, seed: int = 0) -> list[Path]:
    """``k`` finished shard folders of one ``personas`` run of ``n`` (every bio clean)."""
    facts = sample_facts(seed, n)

    def script(messages, _seed):
        user = messages[-1]["content"] if messages[-1]["role"] == "user" else messages[1]["content"]
        (f,) = [f for f in facts if f"- Name: {f.name}\n" in user]
        return json.dumps(
            {
                "bio": f"{f.first_name} works as {f.occupation.lower()} and lives in "
                f"{f.home_city}. Free time goes to {', '.join(f.interests)}."
            }
        )

    shards = []
    for s in range(k):
        out = folder / f"s{s}"
        cfg = PersonasConfig(
            seed=seed, n=n, shard=s, num_shards=k, cache_dir=None, progress="off", draws=1
        )
        ctx = RunContext("personas", cfg, out)
        ctx.use(llm=scripted_llm(script))
        run_config("personas", cfg, out, ctx=ctx, quiet=True)
        shards.append(out)
    return shards
