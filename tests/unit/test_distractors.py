"""Distractor sampling: percentile bands on a hand-built similarity structure, the greedy rule,
exclusions, thin-band rejects, the scalable mode against the exact one on random banks, and the
generator end to end (seeded determinism and sharding, WAGIBench's layout, one embedding per
distinct text)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import read_jsonl
from distractors_runs import HEX32, NAME, text_bank, write_bank

from gen.engine.runner import RunContext, run_config
from gen.formats.goals import load_goals, verbalise
from gen.generators.distractors import Band, DistractorsConfig, Sampler, matches
from gen.kinds.mcq import load_banks
from gen.paths import EXAMPLES
from gen.schemas.distractors import GOAL_TYPES, DistractorMCQ, GoalRow
from gen.templates import Prompts

SIMILAR, DISSIMILAR = Band("similar", 95, 99), Band("dissimilar", 0, 80)


class FakeEmbedder:
    """Unit vectors from a text -> vector table, else seeded random ones (d=16)."""

    def __init__(self, table: dict[str, np.ndarray] | None = None, d: int = 16):
        self.table, self.d, self.calls = table or {}, d, []

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        out = []
        for t in texts:
            if t in self.table:
                v = np.asarray(self.table[t], dtype=np.float32)
            else:
                seed = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)
                v = np.random.default_rng(seed).standard_normal(self.d).astype(np.float32)
            out.append(v / np.linalg.norm(v))
        return np.stack(out)

    def describe(self) -> dict[str, Any]:
        return {"backend": "fake"}


def run_distractors(out: Path, embedder: FakeEmbedder | None = None, **cfg: Any):
    config = DistractorsConfig(cache_dir=None, progress="off", **cfg)
    ctx = RunContext(NAME, config, out)
    ctx.use(embedder=embedder or FakeEmbedder())
    return run_config(NAME, config, out, ctx=ctx, quiet=True)


# --------------------------------------------------------------------------- a hand-built structure


def ladder(
    extra: list[tuple[float, int, int]] = (),
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Goal 0 is the reference; goals 1..100 have similarity s_k = -0.5 + k/100 to it (k = 0..99,
    so in a pool of these 100 the rank — and exact percentile 100·k/99 — is k) and pairwise
    similarity s_k·s_l (orthogonal residuals). ``extra``: (similarity, group, text code) goals."""
    sims = [-0.5 + k / 100 for k in range(100)] + [s for s, _, _ in extra]
    d = len(sims) + 1
    E = np.zeros((len(sims) + 1, d), dtype=np.float64)
    E[0, 0] = 1
    for k, s in enumerate(sims, 1):
        E[k, 0], E[k, k] = s, np.sqrt(1 - s * s)
    groups = np.arange(len(sims) + 1)
    texts = np.arange(len(sims) + 1)
    for k, (_, g, t) in enumerate(extra, 101):
        groups[k], texts[k] = g, t
    return E.astype(np.float32), groups, texts, np.array(sims)


def choices_of(sampler: Sampler, ref: int = 0) -> dict[str, Any]:
    (choices,) = list(sampler.run(range(ref, ref + 1)))
    return {c.band.name: c for c in choices}


def test_bands_on_a_hand_built_structure() -> None:
    E, groups, texts, sims = ladder()
    got = choices_of(Sampler(E, groups, texts, [SIMILAR, DISSIMILAR]))
    sim = got["similar"]
    # 95th percentile at rank 94.05, 99th at 98.01 of 0..99: ranks 95..98 are the band
    assert sim.candidates == 4 and sim.pool == 100
    assert set(sim.picks) <= {96, 97, 98, 99}  # goal k+1 has rank k
    assert sim.percentile == pytest.approx([100 * (p - 1) / 99 for p in sim.picks])
    assert sim.similarity == pytest.approx([sims[p - 1] for p in sim.picks], abs=1e-6)
    assert sim.thresholds == pytest.approx(
        (sims[94] + 0.05 * (sims[95] - sims[94]), sims[98] + 0.01 * (sims[99] - sims[98])), abs=1e-6
    )
    dis = got["dissimilar"]
    assert dis.candidates == 80 and set(dis.picks) <= set(range(1, 81))
    assert all(0 <= p <= 80 for p in dis.percentile)
    assert not sim.estimated and not dis.estimated


def test_a_tie_across_the_band_edge_is_written_inside_the_band() -> None:
    """Two goals the embedder cannot tell apart (a case variant) share ranks 94 and 95 of a pool of
    101; the 95th percentile falls on them, so both are in the similar band. Each holds every
    percentile from 94 to 95, and the one written is the band's edge, not 94 (which put a
    "95–99" distractor at 94.77 on the shipped bank)."""
    E, groups, texts, sims = ladder([(-0.5 + 94 / 100, 500, 500)])
    sim = choices_of(Sampler(E, groups, texts, [SIMILAR], seed=0, distractors=6))["similar"]
    assert sim.pool == 101 and sim.candidates == 6  # ranks 94..99: the tied pair and 96..99
    assert {95, 101} <= set(sim.picks)
    assert all(95 <= p <= 99 for p in sim.percentile)
    at = dict(zip(sim.picks, sim.percentile, strict=True))
    assert at[95] == at[101] == pytest.approx(95) and at[99] == pytest.approx(99)


def test_greedy_rule_on_the_hand_built_structure() -> None:
    E, groups, texts, sims = ladder()
    for seed in range(12):
        got = choices_of(Sampler(E, groups, texts, [SIMILAR, DISSIMILAR], seed=seed))
        for name, band in (("similar", range(96, 100)), ("dissimilar", range(1, 81))):
            c = got[name]
            d1 = c.picks[0]
            s = {k: sims[k - 1] for k in band}
            # sim(D1, c) = s_D1 * s_c: D2 is the band's extreme on the other side of D1's sign
            rest = [k for k in band if k != d1]
            d2 = min(rest, key=lambda k: (s[d1] * s[k], k))
            d3 = min(
                (k for k in rest if k != d2), key=lambda k: (max(s[d1] * s[k], s[d2] * s[k]), k)
            )
            assert c.picks == [d1, d2, d3], (seed, name)
            assert c.pairwise[0][1] == pytest.approx(s[d1] * s[d2], abs=1e-5)


def test_first_pick_is_uniform_over_the_band() -> None:
    E, groups, texts, _ = ladder()
    firsts = [
        choices_of(Sampler(E, groups, texts, [SIMILAR], seed=seed))["similar"].picks[0]
        for seed in range(100)
    ]
    counts = np.bincount(firsts, minlength=100)[96:100]
    assert counts.sum() == 100 and counts.min() >= 12  # 4 candidates, ~25 each


def test_exclusions_group_and_duplicate_text() -> None:
    # two paraphrases in the reference's group and one duplicate of its text, all very similar
    E, groups, texts, _ = ladder([(0.97, 0, 1000), (0.96, 0, 1001), (0.98, 555, 0)])
    got = choices_of(Sampler(E, groups, texts, [SIMILAR, DISSIMILAR], exclude_same_group=True))
    assert got["similar"].pool == 100 and got["dissimilar"].pool == 100
    assert not {101, 102, 103} & set(got["similar"].picks)
    assert set(got["similar"].picks) <= {96, 97, 98, 99}
    # by default (the paper's pool) the same-script goals join the pool (and top it); the
    # duplicate never does
    loose = choices_of(Sampler(E, groups, texts, [SIMILAR, DISSIMILAR]))
    assert loose["similar"].pool == 102
    assert 103 not in loose["similar"].picks + loose["dissimilar"].picks


def test_no_two_options_share_a_text() -> None:
    # goals 97..99 share one text: only one of them may appear, so the band of 4 is too thin
    E, groups, texts, _ = ladder()
    texts[97:100] = 5000
    got = choices_of(Sampler(E, groups, texts, [SIMILAR]))
    assert got["similar"].picks is None and "distinct texts" in got["similar"].detail


def test_thin_band_is_a_reject_not_fewer_options() -> None:
    E, groups, texts, _ = ladder()
    got = choices_of(Sampler(E, groups, texts, [Band("narrow", 98, 99), DISSIMILAR]))
    assert got["narrow"].picks is None and got["narrow"].candidates == 1
    assert "has 1 candidates; 3 needed" in got["narrow"].detail
    assert got["dissimilar"].picks is not None and len(got["dissimilar"].picks) == 3


def test_tiny_pools_reject_every_band(tmp_path: Path) -> None:
    bank = write_bank(tmp_path / "bank.jsonl", text_bank(3))
    result = run_distractors(tmp_path / "run", input=str(bank), distractors=1)
    assert result.accepted + result.rejected == 6
    rejects = read_jsonl(tmp_path / "run" / "rejects.jsonl")
    assert rejects and all(r["reason"] == "too_few_candidates" for r in rejects)
    one = write_bank(tmp_path / "one.jsonl", text_bank(1))
    result = run_distractors(tmp_path / "one", input=str(one))
    assert (
        result.rejected == 2
        and "pool of 0 goals" in read_jsonl(tmp_path / "one" / "rejects.jsonl")[0]["detail"]
    )


def test_more_mcqs_per_kind_use_fresh_distractors() -> None:
    E, groups, texts, _ = ladder()
    got = list(Sampler(E, groups, texts, [DISSIMILAR], mcqs_per_kind=3).run(range(0, 1)))[0]
    assert [c.j for c in got] == [0, 1, 2]
    picked = [p for c in got for p in c.picks]
    assert len(set(picked)) == 9
    assert [c.candidates for c in got] == [80, 77, 74]


def test_matches_finds_all_equal_pairs() -> None:
    a, b = np.array([3, 1, 3, 9]), np.array([1, 3, 3, 7, 1])
    rows, cols = matches(a, b)
    assert sorted(zip(rows.tolist(), cols.tolist(), strict=True)) == [
        (0, 1),
        (0, 2),
        (1, 0),
        (1, 4),
        (2, 1),
        (2, 2),
    ]


# --------------------------------------------------------------------------- random banks


def clustered(
    n: int, d: int = 24, seed: int = 0, group_size: int = 3
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    topics = rng.standard_normal((max(4, n // 60), d))
    groups = np.arange(n) // group_size
    centre = topics[rng.integers(0, len(topics), groups[-1] + 1)] + 0.8 * rng.standard_normal(
        (groups[-1] + 1, d)
    )
    E = centre[groups] + 0.3 * rng.standard_normal((n, d))
    return (E / np.linalg.norm(E, axis=1, keepdims=True)).astype(np.float32), groups


def pool_mask(groups: np.ndarray, ref: int, exclude_same_group: bool = True) -> np.ndarray:
    """The reference's pool: every other goal, or every goal of another group."""
    return groups != groups[ref] if exclude_same_group else np.arange(len(groups)) != ref


def exact_percentile(
    E: np.ndarray, groups: np.ndarray, ref: int, goal: int, exclude_same_group: bool = True
) -> float:
    row = E @ E[ref]
    pool = np.sort(row[pool_mask(groups, ref, exclude_same_group)])
    return 100 * np.searchsorted(pool, row[goal], "left") / (len(pool) - 1)


@pytest.mark.parametrize("exclude", [False, True])
def test_greedy_rule_holds_on_a_random_bank(exclude: bool) -> None:
    E, groups = clustered(600)
    sampler = Sampler(
        E, groups, np.arange(600), [SIMILAR, DISSIMILAR], seed=3, exclude_same_group=exclude
    )
    for choices in list(sampler.run(range(0, 600)))[::37]:
        for c in choices:
            ref = c.ref
            row = E @ E[ref]
            valid = pool_mask(groups, ref, exclude)
            lo, hi = np.percentile(row[valid], [c.band.lo, c.band.hi])
            cand = [k for k in np.flatnonzero(valid) if lo - 1e-6 <= row[k] <= hi + 1e-6]
            assert len(cand) == c.candidates
            assert c.picks[0] in cand
            for i in range(1, len(c.picks)):
                chosen = c.picks[:i]
                worst = {
                    k: max(float(E[k] @ E[j]) for j in chosen) for k in cand if k not in chosen
                }
                assert worst[c.picks[i]] <= min(worst.values()) + 1e-5
            for p, pct in zip(c.picks, c.percentile, strict=True):
                assert pct == pytest.approx(exact_percentile(E, groups, ref, p, exclude), abs=1e-6)


def test_scalable_mode_against_exact() -> None:
    n = 4000
    E, groups = clustered(n, seed=1)
    exact = Sampler(E, groups, np.arange(n), [SIMILAR, DISSIMILAR], exclude_same_group=True)
    approx = Sampler(
        E,
        groups,
        np.arange(n),
        [SIMILAR, DISSIMILAR],
        scalable=True,
        sample_size=1024,
        block_size=512,
        exclude_same_group=True,
    )
    refs = range(1000, 1400)
    inside, total, errors = 0, 0, []
    for choices in approx.run(refs):
        for c in choices:
            assert c.estimated and c.pool <= 1024 and c.picks is not None
            for p, est in zip(c.picks, c.percentile, strict=True):
                true = exact_percentile(E, groups, c.ref, p)
                errors.append(abs(true - est))
                inside += c.band.lo - 2 <= true <= c.band.hi + 2
                total += 1
    assert inside / total >= 0.99
    assert np.mean(errors) < 1.5  # a sample quantile's error, sqrt(q(1-q)/1024) ~ 1 point at most
    # the greedy rule holds exactly within the block's sample
    (choices,) = list(approx.run(range(1000, 1001)))
    sample = approx.block_sample(1000 // 512)
    c = choices[0]
    row = E[sample] @ E[1000]
    ok = groups[sample] != groups[1000]
    cand = [
        int(sample[k])
        for k in np.flatnonzero(ok & (row >= c.thresholds[0]) & (row <= c.thresholds[1]))
    ]
    assert len(cand) == c.candidates and set(c.picks) <= set(cand)
    worst = {
        k: max(float(E[k] @ E[c.picks[0]]), float(E[k] @ E[c.picks[1]]))
        for k in cand
        if k not in c.picks[:2]
    }
    assert worst[c.picks[2]] <= min(worst.values()) + 1e-5
    # and exact mode on the same bank is, well, exact
    for ex in list(exact.run(range(1000, 1003))):
        for c in ex:
            for p, pct in zip(c.picks, c.percentile, strict=True):
                assert pct == pytest.approx(exact_percentile(E, groups, c.ref, p), abs=1e-6)


def test_block_samples_cover_the_bank() -> None:
    E, groups = clustered(1000, seed=4)
    s = Sampler(
        E, groups, np.arange(1000), [DISSIMILAR], scalable=True, sample_size=200, block_size=200
    )
    samples = [s.block_sample(b) for b in range(5)]
    assert all(len(np.unique(x)) == 200 for x in samples)
    assert sorted(np.concatenate(samples).tolist()) == list(range(1000))  # disjoint, covering
    used = {p for choices in s.run(range(1000)) for c in choices for p in c.picks}
    # independent samples would leave 1/e of the bank out of every sample (at most 63 % used)
    assert len(used) > 800
    other = Sampler(
        E, groups, np.arange(1000), [DISSIMILAR], scalable=True, sample_size=200, seed=1
    )
    assert not np.array_equal(other.block_sample(0), samples[0])


def test_results_do_not_depend_on_which_references_run() -> None:
    E, groups = clustered(500, seed=2)
    for kwargs in ({}, {"scalable": True, "sample_size": 256, "block_size": 100}):
        s = Sampler(E, groups, np.arange(500), [SIMILAR, DISSIMILAR], row_budget=500 * 64, **kwargs)
        whole = list(s.run(range(0, 500)))
        parts = (
            list(s.run(range(0, 117))) + list(s.run(range(117, 350))) + list(s.run(range(350, 500)))
        )
        assert [[c.picks for c in x] for x in whole] == [[c.picks for c in x] for x in parts]
        assert [[c.percentile for c in x] for x in whole] == [
            [c.percentile for c in x] for x in parts
        ]


# --------------------------------------------------------------------------- the generator


def test_generator_end_to_end(tmp_path: Path) -> None:
    result = run_distractors(tmp_path / "run")
    rows = load_goals(EXAMPLES / "goals.jsonl").rows
    assert result.requested == len(rows) and result.rejected == 0
    records = [
        DistractorMCQ.model_validate(r) for r in read_jsonl(tmp_path / "run" / "distractors.jsonl")
    ]
    assert len(records) == 2 * len(rows)
    by_id = {r.goal_id: r for r in rows}
    texts = {r.goal_id: verbalise(r, Prompts()) for r in rows}
    for kind in ("similar", "dissimilar"):
        assert sum(r.question_type == kind for r in records) == len(rows)
    for rec in records:
        assert HEX32.match(rec.item_id) and len(rec.options) == 4
        ref = by_id[rec.reference_id]
        assert rec.options[rec.answer] == texts[ref.goal_id]
        assert rec.origins[rec.answer] == "reference" and rec.origins.count("distractor") == 3
        assert rec.group == ref.group and rec.visible == {}
        assert rec.privileged["structured_goal"] == ref.goal.model_dump()
        assert len(set(rec.options)) == 4
        for d in rec.distractors:
            assert (
                d.goal_id != ref.goal_id and d.text != texts[ref.goal_id]
            )  # same-script goals may be distractors
            assert rec.options[d.option] == d.text == texts[d.goal_id]
            assert rec.band[0] <= d.percentile <= rec.band[1]
            assert len(d.similarity_to_others) == 2
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["counts"]["indices_done"] == len(rows)
    assert manifest[NAME]["mode"] == "exact" and manifest[NAME]["bank"]["groups"] == 141
    assert {f"distractors/{t}.jinja" for t in GOAL_TYPES} <= set(manifest["prompts"])
    assert {"wagibench_mcq_similar.json", "wagibench_mcq_dissimilar.json"} <= set(
        manifest["outputs"]
    )
    # answers are spread over the four positions
    assert min(np.bincount([r.answer for r in records], minlength=4)) > len(records) / 8


def test_options_never_differ_only_in_case_or_spacing(tmp_path: Path) -> None:
    """ "Buy oat milk" and "buy  OAT milk" are one option to a reader: the variant is never a
    distractor of the other, nor both options of one MCQ. B, C and D are one vector, so the
    greedy rule would pick the variant (least like them) whenever it is a candidate; it failed so
    before texts were compared casefolded with spaces collapsed."""
    same = np.eye(16)[1]
    table = {"B goal": same, "C goal": same, "D goal": same}
    goals = ["Buy oat milk", "buy  OAT milk", "B goal", "C goal", "D goal"]
    bank = write_bank(
        tmp_path / "bank.jsonl",
        [{"goal_id": f"g{k}", "group": f"grp{k}", "text": t} for k, t in enumerate(goals)],
    )
    run_distractors(
        tmp_path / "run", FakeEmbedder(table), input=str(bank), bands={"all": (0.0, 100.0)}
    )
    records = [
        DistractorMCQ.model_validate(r) for r in read_jsonl(tmp_path / "run" / "distractors.jsonl")
    ]
    assert len(records) == 5
    for rec in records:
        assert len({" ".join(o.casefold().split()) for o in rec.options}) == 4, rec.options


def test_wagibench_layout(tmp_path: Path) -> None:
    run_distractors(tmp_path / "run")
    records = {r["item_id"]: r for r in read_jsonl(tmp_path / "run" / "distractors.jsonl")}
    rows = {r.goal_id: r for r in load_goals(EXAMPLES / "goals.jsonl").rows}
    prompts = Prompts()
    for kind in ("similar", "dissimilar"):
        data = json.loads((tmp_path / "run" / f"wagibench_mcq_{kind}.json").read_text())
        assert len(data) == len(rows)
        for item in data:
            assert set(item) == {"x", "y", "meta"}
            assert set(item["x"]) == {"client_tag", "context_window", "cues", "mcq_set"}
            assert (
                set(item["x"]["context_window"]) == {"start_s", "end_s"} and item["x"]["cues"] == []
            )
            rec = records[item["meta"]["item_id"]]
            assert item["meta"]["question_type"] == kind == rec["question_type"]
            assert item["y"] == rec["answer"] and len(item["x"]["mcq_set"]) == 4
            assert item["x"]["mcq_set"][item["y"]] == item["meta"]["structured_goal"]
            assert item["meta"]["client_tag"] == item["x"]["client_tag"] == rec["reference_id"]
            assert item["meta"]["scenario"]["shortname"] == rec["group"]
            for k, goal in enumerate(item["x"]["mcq_set"]):  # same order as the options
                row = GoalRow(goal_id="x", group="x", goal=goal)
                assert verbalise(row, prompts) == rec["options"][k]


def test_wagibench_layout_passes_client_tag_and_window(tmp_path: Path) -> None:
    rows = text_bank(40)
    rows[0] |= {"client_tag": "video_0042", "context_window": {"start_s": 12.5, "end_s": 30}}
    bank = write_bank(tmp_path / "bank.jsonl", rows)
    run_distractors(tmp_path / "run", input=str(bank), n=1, bands={"dissimilar": (0, 80)})
    (item,) = json.loads((tmp_path / "run" / "wagibench_mcq_dissimilar.json").read_text())
    assert item["x"]["client_tag"] == "video_0042" == item["meta"]["client_tag"]
    assert item["x"]["context_window"] == {"start_s": 12.5, "end_s": 30.0}
    assert {"text": "free goal number 0"} == item["meta"]["structured_goal"]


def test_thin_band_rejects_through_the_generator(tmp_path: Path) -> None:
    bank = write_bank(tmp_path / "bank.jsonl", text_bank(30))
    result = run_distractors(tmp_path / "run", input=str(bank))
    # a pool of 29: the 95-99 band holds one goal, the 0-80 band 23
    assert result.requested == 30 and result.rejected == 30 and result.accepted == 30
    rejects = read_jsonl(tmp_path / "run" / "rejects.jsonl")
    assert {r["stage"] for r in rejects} == {"similar"}
    assert {r["reason"] for r in rejects} == {"too_few_candidates"}
    assert all("3 needed" in r["detail"] and HEX32.match(r["record_id"]) for r in rejects)
    records = read_jsonl(tmp_path / "run" / "distractors.jsonl")
    assert {r["question_type"] for r in records} == {"dissimilar"}
    assert json.loads((tmp_path / "run" / "wagibench_mcq_similar.json").read_text()) == []
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["counts"]["rejects_by_reason"] == {"too_few_candidates": 30}


def test_seeded_determinism_and_shards(tmp_path: Path) -> None:
    bank = str(write_bank(tmp_path / "bank.jsonl", text_bank(150, group_size=2)))
    a = run_distractors(tmp_path / "a", input=bank, seed=4)
    b = run_distractors(tmp_path / "b", input=bank, seed=4)
    c = run_distractors(tmp_path / "c", input=bank, seed=5)
    for f in ("distractors.jsonl", "wagibench_mcq_similar.json", "wagibench_mcq_dissimilar.json"):
        assert a.manifest["outputs"][f] == b.manifest["outputs"][f]
    assert a.manifest["outputs"]["distractors.jsonl"] != c.manifest["outputs"]["distractors.jsonl"]
    whole = (tmp_path / "a" / "distractors.jsonl").read_text()
    shards = "".join(
        (
            run_distractors(tmp_path / f"s{k}", input=bank, seed=4, shard=k, num_shards=3).out_dir
            / "distractors.jsonl"
        ).read_text()
        for k in range(3)
    )
    assert shards == whole
    head = run_distractors(tmp_path / "h", input=bank, seed=4, n=20).out_dir / "distractors.jsonl"
    assert whole.startswith(head.read_text())


def test_scalable_mode_through_the_generator(tmp_path: Path) -> None:
    bank = str(write_bank(tmp_path / "bank.jsonl", text_bank(700)))
    result = run_distractors(
        tmp_path / "run", input=bank, n=50, mode="scalable", sample_size=300, block_size=64
    )
    assert result.rejected == 0 and result.accepted == 100
    records = read_jsonl(tmp_path / "run" / "distractors.jsonl")
    assert {r["percentile_mode"] for r in records} == {"estimated"}
    assert all(r["pool_size"] <= 300 for r in records)
    assert (
        result.manifest[NAME]["mode"] == "scalable" and result.manifest[NAME]["sample_size"] == 300
    )


def test_embeddings_once_per_distinct_text(tmp_path: Path) -> None:
    rows = text_bank(60) + [{"goal_id": "dup", "group": "other", "text": "free goal number 3"}]
    bank = write_bank(tmp_path / "bank.jsonl", rows)
    emb = FakeEmbedder()
    run_distractors(tmp_path / "run", emb, input=str(bank))
    (call,) = emb.calls
    assert len(call) == 60 == len(set(call))
    records = read_jsonl(tmp_path / "run" / "distractors.jsonl")
    ref3 = next(r for r in records if r["reference_id"] == "g00003")
    assert "dup" not in [d["goal_id"] for d in ref3["distractors"]]  # its text is the reference's


def test_load_banks_reads_the_run_folder(tmp_path: Path) -> None:
    run_distractors(tmp_path / "run")
    (bank,) = load_banks(tmp_path / "run")
    assert bank.format == "jsonl" and bank.path.name == "distractors.jsonl"
    first = read_jsonl(tmp_path / "run" / "distractors.jsonl")[0]
    item = bank.items[0]
    assert item.item_id == first["item_id"] and item.options == first["options"]
    assert item.answer_text == first["options"][first["answer"]] and item.context == ""
    assert item.group == first["group"] and item.question_type in ("similar", "dissimilar")
    assert item.privileged["privileged.reference_goal_id"] == first["reference_id"]
