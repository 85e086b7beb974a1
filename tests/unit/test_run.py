"""The runner and the personas generator with a scripted LLM: counts, rejects, manifest, seeds."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import merge_and_compare, read_jsonl

from gen.engine.registry import REGISTRY
from gen.engine.runner import RunContext, derive_id, derive_seed, run_config, shard_range
from gen.generators.personas import PersonasConfig, bio_problems, sample_facts
from gen.llm import Cache, LlamaCppConfig, scripted_llm
from gen.paths import PROMPTS
from gen.schemas import Reject
from gen.schemas.personas import PersonaFacts, PersonaRecord

NAME = "personas"


def clean_bio(f: PersonaFacts) -> str:
    return (
        f"{f.first_name} works as {f.occupation.lower()} and lives in {f.home_city}. "
        f"Free time goes to {', '.join(f.interests)}."
    )


def wrong_age_bio(f: PersonaFacts) -> str:
    return clean_bio(f).replace(" works as", f" is a {f.age + 7}-year-old who works as", 1)


def facts_of(messages: list[dict[str, str]], facts: list[PersonaFacts]) -> PersonaFacts:
    user = messages[-1]["content"] if messages[-1]["role"] == "user" else messages[1]["content"]
    (match,) = [f for f in facts if f"- Name: {f.name}\n" in user]
    return match


def bio_script(facts: list[PersonaFacts], write: Callable[[PersonaFacts, int], Any]):
    """A scripted backend answering each bio prompt with ``write(facts, seed)``."""

    def script(messages, seed):
        out = write(facts_of(messages, facts), seed)
        if isinstance(out, tuple):
            return (json.dumps({"bio": out[0]}), out[1])
        return json.dumps({"bio": out})

    return script


def run_scripted(out_dir: Path, script, **cfg: Any):
    # one draw of facts per slot: a failed slot is one reject (test_personas tests redraws)
    settings = PersonasConfig(
        **{"cache_dir": None, "progress": "off", "draws": 1, "widen": "none", **cfg}
    )
    ctx = RunContext(NAME, settings, out_dir)
    ctx.use(llm=scripted_llm(script, cache=ctx.cache))
    return run_config(NAME, settings, out_dir, ctx=ctx), ctx


def test_clean_bios_are_all_accepted(tmp_path: Path, check_run_folder) -> None:
    facts = sample_facts(0, 6)
    for f in facts:  # the fake's bios must themselves be clean, or this test proves nothing
        assert bio_problems(f, clean_bio(f)) == []
    result, ctx = run_scripted(tmp_path, bio_script(facts, lambda f, s: clean_bio(f)), n=6)
    assert (result.requested, result.accepted, result.rejected) == (6, 6, 0)
    check_run_folder(tmp_path, NAME, 6, hydra=False)
    records = [PersonaRecord.model_validate(r) for r in read_jsonl(tmp_path / "personas.jsonl")]
    assert [r.persona_id for r in records] == [f.persona_id for f in facts]
    for r, f in zip(records, facts, strict=True):
        assert r.model_dump(exclude={"bio"}) == f.model_dump()  # the LLM never changes facts
        assert r.bio == clean_bio(f)
    assert len(ctx.llm.calls) == 6


def test_mixed_run_reconciles(tmp_path: Path, check_run_folder) -> None:
    n, attempts = 7, 2
    facts = sample_facts(0, n)
    bad = {f.persona_id for f in facts[::2]}  # indices 0, 2, 4, 6 always contradict

    def write(f, seed):
        return wrong_age_bio(f) if f.persona_id in bad else clean_bio(f)

    result, ctx = run_scripted(tmp_path, bio_script(facts, write), n=n, attempts=attempts)
    assert (result.accepted, result.rejected) == (n - len(bad), len(bad))
    assert result.accepted + result.rejected == result.requested == n
    manifest = check_run_folder(tmp_path, NAME, n, hydra=False)
    assert manifest["counts"]["rejects_by_reason"] == {"contradiction": len(bad)}
    assert manifest["counts"]["rejects_by_stage"] == {"bio": len(bad)}
    rejects = [Reject.model_validate(r) for r in read_jsonl(tmp_path / "rejects.jsonl")]
    assert [r.index for r in rejects] == [0, 2, 4, 6]
    for r in rejects:
        f = facts[r.index]
        assert r.record_id == f.persona_id
        assert (r.stage, r.reason) == ("bio", "contradiction")
        assert r.raw == wrong_age_bio(f)
        assert f"states age {f.age + 7}" in r.detail
    # every bad persona got ``attempts`` fresh seeds; every good one a single call
    assert len(ctx.llm.calls) == len(bad) * attempts + (n - len(bad))
    seeds = [c["seed"] for c in ctx.llm.calls]
    assert len(set(seeds)) == len(seeds)
    assert manifest["validators"] == {"bio.contradiction": len(bad) * attempts}


def test_second_attempt_can_rescue(tmp_path: Path) -> None:
    facts = sample_facts(0, 3)
    first_seeds = {derive_seed(0, NAME, i, "bio", 0) for i in range(3)}

    def write(f, seed):
        return wrong_age_bio(f) if seed in first_seeds else clean_bio(f)

    result, ctx = run_scripted(tmp_path, bio_script(facts, write), n=3)
    assert (result.accepted, result.rejected) == (3, 0)
    assert len(ctx.llm.calls) == 6
    assert result.manifest["validators"] == {"bio.contradiction": 3}


def test_truncation_is_a_reject(tmp_path: Path) -> None:
    facts = sample_facts(0, 3)

    def script(messages, seed):
        f = facts_of(messages, facts)
        if f.persona_id == facts[1].persona_id:
            return ('{"bio": "' + f.first_name + " repeats " * 20, "length")
        return json.dumps({"bio": clean_bio(f)})

    result, ctx = run_scripted(tmp_path, script, n=3)
    assert (result.accepted, result.rejected) == (2, 1)
    (reject,) = read_jsonl(tmp_path / "rejects.jsonl")
    assert (reject["index"], reject["stage"], reject["reason"]) == (1, "bio", "truncated")
    assert reject["raw"].startswith('{"bio": "' + facts[1].first_name)
    assert result.manifest["counts"]["rejects_by_reason"] == {"truncated": 1}


def test_invalid_output_is_a_reject(tmp_path: Path) -> None:
    # Too short for Bio (min_length=40) every time: invalid after the LLM's attempts.
    result, ctx = run_scripted(tmp_path, lambda m, s: '{"bio": "Hi."}', n=2, attempts=1)
    assert (result.accepted, result.rejected) == (0, 2)
    reasons = {r["reason"] for r in read_jsonl(tmp_path / "rejects.jsonl")}
    assert reasons == {"invalid_output"}
    assert all(r["raw"] == '{"bio": "Hi."}' for r in read_jsonl(tmp_path / "rejects.jsonl"))
    assert len(ctx.llm.calls) == 2 * LlamaCppConfig().attempts


def test_backend_error_is_a_reject_not_a_crash(tmp_path: Path) -> None:
    def down(messages, seed):
        raise ConnectionError("no server")

    result, _ = run_scripted(tmp_path, down, n=2, attempts=1)
    assert (result.accepted, result.rejected) == (0, 2)
    assert result.manifest["counts"]["rejects_by_reason"] == {"backend_error": 2}


def test_manifest_contents(tmp_path: Path) -> None:
    facts = sample_facts(3, 4)
    result, ctx = run_scripted(tmp_path, bio_script(facts, lambda f, s: clean_bio(f)), n=4, seed=3)
    manifest = json.loads((tmp_path / "manifest.json").read_text(encoding="utf-8"))
    assert manifest == json.loads(json.dumps(result.manifest))
    assert manifest["generator"] == NAME
    assert manifest["seed"] == 3
    assert manifest["config"]["n"] == 4 and manifest["config"]["seed"] == 3
    bio_sha = hashlib.sha256((PROMPTS / "personas" / "bio.jinja").read_bytes()).hexdigest()
    assert manifest["prompts"] == {"personas/bio.jinja": bio_sha}
    packages = manifest["packages"]
    for pkg in ("python", "pydantic", "instructor", "hydra-core", "jinja2", "faker"):
        assert packages.get(pkg), pkg
    assert manifest["counts"] == {
        "requested": 4,
        "indices_done": 4,
        "accepted": 4,
        "rejected": 0,
        "rejects_by_reason": {},
        "rejects_by_stage": {},
    }
    assert manifest["llm"]["backend"] == "scripted"
    usage = manifest["llm_usage"]
    assert usage["calls"] == 4 and usage["cache_hits"] == 0 and usage["completion_tokens"] > 0
    outputs = manifest["outputs"]
    assert set(outputs) == {"personas.jsonl", "rejects.jsonl"}
    for name, digest in outputs.items():
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == digest
    assert manifest["shard"] == {"shard": 0, "num_shards": 1, "indices": [0, 4]}
    assert sum(manifest["distribution"]["nationality"].values()) == 4
    assert sum(manifest["distribution"]["gender"].values()) == 4
    assert manifest["distinct_occupations"] == len({f.occupation for f in facts})
    assert set(manifest["git"]) == {"commit", "dirty"}
    assert manifest["embedder"] is None  # never built, never loaded
    assert manifest["wall_seconds"] >= 0


def test_rerun_with_cache_is_identical_and_all_hits(tmp_path: Path) -> None:
    facts = sample_facts(0, 4)
    cache = tmp_path / "cache"
    counter = {"n": 0}

    def write(f, seed):  # a different answer on every real call: only the cache can repeat it
        counter["n"] += 1
        return clean_bio(f) + f" Call {counter['n']}."

    first, _ = run_scripted(tmp_path / "a", bio_script(facts, write), n=4, cache_dir=str(cache))
    second, ctx = run_scripted(tmp_path / "b", bio_script(facts, write), n=4, cache_dir=str(cache))
    assert (tmp_path / "a" / "personas.jsonl").read_bytes() == (
        tmp_path / "b" / "personas.jsonl"
    ).read_bytes()
    usage = second.manifest["llm_usage"]
    assert usage["calls"] == usage["cache_hits"] == 4
    assert ctx.llm.calls == []
    assert isinstance(ctx.cache, Cache) and ctx.cache.path == cache / "llm.sqlite"


def test_shards_concatenate_to_the_whole(tmp_path: Path) -> None:
    n = 7
    facts = sample_facts(0, n)
    script = bio_script(facts, lambda f, s: wrong_age_bio(f) if s % 3 == 0 else clean_bio(f))
    whole, _ = run_scripted(tmp_path / "whole", script, n=n)
    parts_rec, parts_rej = b"", b""
    for shard in range(3):
        res, _ = run_scripted(tmp_path / f"s{shard}", script, n=n, shard=shard, num_shards=3)
        assert res.requested == len(shard_range(n, shard, 3))
        parts_rec += (tmp_path / f"s{shard}" / "personas.jsonl").read_bytes()
        parts_rej += (tmp_path / f"s{shard}" / "rejects.jsonl").read_bytes()
    assert parts_rec == (tmp_path / "whole" / "personas.jsonl").read_bytes()
    assert parts_rej == (tmp_path / "whole" / "rejects.jsonl").read_bytes()
    assert whole.accepted + whole.rejected == n


def test_persona_pool_sets_n(tmp_path: Path) -> None:
    facts = sample_facts(0, 6)
    result, _ = run_scripted(tmp_path, bio_script(facts, lambda f, s: clean_bio(f)), persona_pool=6)
    assert result.requested == 6 and result.accepted == 6


def test_a_generator_that_skips_an_index_fails_the_run(tmp_path: Path, monkeypatch) -> None:
    """One outcome per index is enforced, and a short run leaves no final files."""
    import dataclasses

    original = REGISTRY[NAME]

    def short(cfg, ctx):
        items = list(original.fn(cfg, ctx))
        yield from items[:-1]

    monkeypatch.setitem(REGISTRY, NAME, dataclasses.replace(original, fn=short))
    facts = sample_facts(0, 3)
    with pytest.raises(RuntimeError, match="2 outcomes for 3 indices"):
        run_scripted(tmp_path, bio_script(facts, lambda f, s: clean_bio(f)), n=3)
    assert not (tmp_path / "personas.jsonl").exists()
    assert not (tmp_path / "manifest.json").exists()


# --------------------------------------------------------------------------- seeds and shards


def test_derive_seed_is_deterministic_and_spread() -> None:
    assert derive_seed(0, "personas", 1) == derive_seed(0, "personas", 1)
    # pinned: changing the derivation silently invalidates every cache and every dataset
    expected = int.from_bytes(hashlib.sha256(b"0/personas/1").digest()[:8], "big") & 0x7FFFFFFF
    assert derive_seed(0, "personas", 1) == expected
    seeds = {
        derive_seed(s, name, i, part)
        for s in (0, 1)
        for name in ("personas", "digital")
        for i in range(50)
        for part in ("bio", "facts")
    }
    assert len(seeds) == 2 * 2 * 50 * 2
    assert all(0 <= s < 2**31 for s in seeds)


def test_derive_id_is_deterministic_hex32() -> None:
    a = derive_id(0, "personas", 1)
    assert a == derive_id(0, "personas", 1)
    assert a == hashlib.sha256(b"id/0/personas/1").hexdigest()[:32]
    assert len(a) == 32 and all(c in "0123456789abcdef" for c in a)
    assert a != derive_id(1, "personas", 1) != derive_id(0, "personas", 2)
    assert len({derive_id(0, "personas", i) for i in range(1000)}) == 1000


@pytest.mark.parametrize("n", [0, 1, 5, 7, 10, 101])
@pytest.mark.parametrize("k", [1, 2, 3, 4, 8])
def test_shard_ranges_concatenate_to_range_n(n: int, k: int) -> None:
    parts = [shard_range(n, s, k) for s in range(k)]
    assert [i for p in parts for i in p] == list(range(n))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1  # balanced


def test_context_seeds_and_ids(tmp_path: Path) -> None:
    cfg = PersonasConfig(seed=4, n=10, shard=1, num_shards=3, cache_dir=None)
    ctx = RunContext(NAME, cfg, tmp_path)
    assert ctx.indices() == shard_range(10, 1, 3)
    assert ctx.seed(2, "bio", 0) == derive_seed(4, NAME, 2, "bio", 0)
    assert ctx.record_id(2) == derive_id(4, NAME, 2)
    assert ctx.cache is None


def test_context_map_keeps_order(tmp_path: Path) -> None:
    ctx = RunContext(NAME, PersonasConfig(cache_dir=None), tmp_path)
    llm = scripted_llm([], sampling=LlamaCppConfig(concurrency=4))
    ctx.use(llm=llm)
    assert ctx.map(lambda x: x * x, range(20)) == [x * x for x in range(20)]


def test_an_index_may_give_several_records_and_rejects(tmp_path: Path, monkeypatch) -> None:
    """A list outcome counts as one index; its records and rejects are all written and counted."""
    import dataclasses

    from gen.schemas import Reject

    original = REGISTRY[NAME]

    def many(cfg, ctx):
        for (item,) in original.fn(cfg, ctx):  # one draw of facts per slot: one outcome
            yield [
                item,
                item,
                Reject(record_id="r", index=0, stage="split", reason="planted", detail="x"),
            ]

    monkeypatch.setitem(REGISTRY, NAME, dataclasses.replace(original, fn=many))
    facts = sample_facts(0, 3)
    result, _ = run_scripted(tmp_path, bio_script(facts, lambda f, s: clean_bio(f)), n=3)
    counts = result.manifest["counts"]
    assert (counts["requested"], counts["indices_done"]) == (3, 3)
    assert (result.accepted, result.rejected) == (6, 3)
    assert counts["rejects_by_reason"] == {"planted": 3}
    assert len((tmp_path / "personas.jsonl").read_text().splitlines()) == 6


# --------------------------------------------------------------------------- merge


def _shards(tmp_path: Path, n: int, k: int, write=None, **cfg: Any) -> list[Path]:
    facts = sample_facts(cfg.get("seed", 0), n)
    script = bio_script(
        facts, write or (lambda f, s: wrong_age_bio(f) if f.age % 3 == 0 else clean_bio(f))
    )
    run_scripted(tmp_path / "whole", script, n=n, **cfg)
    for s in range(k):
        run_scripted(tmp_path / f"s{s}", script, n=n, shard=s, num_shards=k, **cfg)
    return [tmp_path / f"s{s}" for s in range(k)]


def test_merge_gives_the_unsharded_run(tmp_path: Path) -> None:
    """Three personas shards merge into the unsharded run: records, rejects, counts, validator
    counts and the facts' distribution (recomputed by the generator's merge hook)."""
    shards = _shards(tmp_path, 9, 3)
    merged = merge_and_compare(tmp_path / "whole", shards, tmp_path / "m")
    assert merged["counts"]["rejected"] > 0 and merged["counts"]["indices_done"] == 9
    assert [s["indices"] for s in merged["merged"]["shards"]] == [[0, 3], [3, 6], [6, 9]]
    calls = [json.loads((s / "manifest.json").read_text())["llm_usage"]["calls"] for s in shards]
    assert merged["merged"]["llm_usage"]["calls"] == sum(calls) > 0


def test_manifest_keys_are_the_standard_ones_plus_the_generators_summaries(tmp_path: Path) -> None:
    """merge tells a generator's summaries from the runner's keys by MANIFEST_KEYS."""
    from gen.engine.manifest import MANIFEST_KEYS

    facts = sample_facts(0, 2)
    result, ctx = run_scripted(tmp_path, bio_script(facts, lambda f, s: clean_bio(f)), n=2)
    assert set(result.manifest) - set(ctx.extra) == MANIFEST_KEYS


def test_merge_refuses_overlaps_other_configs_and_unfinished_folders(tmp_path: Path) -> None:
    from gen.cli import validate_jobs
    from gen.errors import InputError, MissingInputError

    def validate(name: str, overrides: list[str]):  # the command's checks: config, then plan
        (job,) = validate_jobs(name, overrides, multirun=False)
        return job.plan

    shards = _shards(tmp_path, 4, 2)
    run_scripted(
        tmp_path / "other",
        bio_script(sample_facts(1, 4), lambda f, s: clean_bio(f)),
        n=4,
        seed=1,
        shard=1,
        num_shards=2,
    )
    with pytest.raises(InputError, match="shard 0 is given twice"):
        validate("merge", [f"input=[{shards[0]},{shards[0]}]"])
    with pytest.raises(InputError, match=r"different config \(seed\)"):
        validate("merge", [f"input=[{shards[0]},{tmp_path / 'other'}]"])
    with pytest.raises(MissingInputError, match="no manifest.json"):
        validate("merge", [f"input=[{shards[0]},{tmp_path}]"])
    assert validate("merge", [f"input=[{shards[1]},{shards[0]}]"]).n == 4  # any order


def test_merge_lists_what_it_cannot_merge(tmp_path: Path) -> None:
    """An output no rule joins (a binary file, a summary object whose keys clash) and no hook
    rebuilds is named in merged.not_merged, not silently dropped or overwritten."""
    import hashlib

    from gen.generators.merge import MergeConfig

    shards = _shards(tmp_path, 4, 2)
    for i, folder in enumerate(shards):
        (folder / "plot.png").write_bytes(bytes([i]))
        (folder / "stats.json").write_text(json.dumps({"mean": i}))
        (folder / "extra.csv").write_text(f"a,b\n{i},x\n")
        m = json.loads((folder / "manifest.json").read_text())
        for name in ("plot.png", "stats.json", "extra.csv"):
            m["outputs"][name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        (folder / "manifest.json").write_text(json.dumps(m))
    result = run_config(
        "merge",
        MergeConfig(input=[str(s) for s in shards], cache_dir=None, progress="off"),
        tmp_path / "m",
        quiet=True,
    )
    assert result.manifest["merged"]["not_merged"] == ["plot.png", "stats.json"]
    assert (tmp_path / "m" / "extra.csv").read_text() == "a,b\n0,x\n1,x\n"
    assert not (tmp_path / "m" / "plot.png").exists()


def test_the_api_refuses_a_bad_out_or_open_argument_with_one_line(tmp_path: Path) -> None:
    """Before: a raw FileExistsError from ``gen.run(out=<a file>)``, a TypeError from ``out=5``
    and ``gen.open(None)``. Now a ConfigError (a GenError) with a one-line message, and nothing
    written."""
    import gen
    from gen.errors import ConfigError, GenError

    afile = tmp_path / "afile"
    afile.write_text("x", encoding="utf-8")
    cases = [
        (lambda: gen.run("personas", n=1, out=afile), "out: .*afile is a file"),
        (lambda: gen.run("personas", n=1, out=afile / "sub"), "out: cannot make the run folder"),
        (lambda: gen.run("personas", n=1, out=5), "out: expected a folder's path .* got int"),
        (lambda: gen.run("personas", n=1, out=""), "out: expected a folder's path"),
        (lambda: gen.open(None), "gen.open: expected a folder's path .* got NoneType"),
        (lambda: gen.open(3.5), "gen.open: expected a folder's path .* got float"),
    ]
    for call, message in cases:
        with pytest.raises(ConfigError, match=message) as e:
            call()
        assert isinstance(e.value, GenError) and "\n" not in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
