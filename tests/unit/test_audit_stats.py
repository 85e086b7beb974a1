"""The audit's statistics against hand-computed values: position's chi-square, length's binomial,
Wilson intervals, Holm, the power line, the severity rules and the tells they grade (effect,
interval, size), the choice-only classifier and the most-central tell, the k-NN search, and the
leakage check's template phrases. Banks are built in code here; the fixture banks are tested in
``test_audit.py``.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from audit_runs import FIX, expected, run_audit, triples, write_jsonl

from gen.engine.runner import run_config
from gen.generators.audit import AuditConfig
from gen.generators.audit.checks.duplicates import knn
from gen.generators.audit.checks.leakage import leakage as check_leakage
from gen.generators.audit.checks.length import length as check_length
from gen.generators.audit.checks.position import position as check_position
from gen.generators.audit.checks.shortcut import central_credit, shortcut, shortcut_cv
from gen.generators.audit.data import AuditData
from gen.generators.audit.registry import check_keys
from gen.generators.audit.report import cell
from gen.schemas.mcq import MCQ

CHECKS = check_keys()


# -------------------------------------------------------------------------- the statistics, by hand


def mcq(item_id: str, options: list[str], answer: int, qtype: str = "t", **kw: Any) -> MCQ:
    return MCQ(
        item_id=item_id,
        question_type=qtype,
        question="Which one?",
        options=options,
        answer=answer,
        line=0,
        **kw,
    )


def cfg(**kw: Any) -> AuditConfig:
    return AuditConfig(input="x", **kw)


def test_position_chi_square_by_hand() -> None:
    items = [
        mcq(f"i{j}", ["w", "x", "y", "z"], a)
        for j, a in enumerate([0] * 10 + [1] * 10 + [2] * 10 + [3] * 30)
    ]
    res = check_position(AuditData(items=items), cfg())
    # expected 15 each: ((10-15)^2 * 3 + (30-15)^2) / 15 = 20.0; chi2(3) survival at 20 = 1.7e-4
    (f,) = res.findings
    assert f.numbers["chi2"] == 20.0 and f.numbers["p"] == pytest.approx(1.7e-4, rel=0.01)
    assert f.numbers["positions"] == ["d"] and len(f.items) == 30


def test_length_binomial_by_hand() -> None:
    import math

    long, short = "a much longer option text", "tiny"
    items = [
        mcq(f"i{j}", [long if j < 12 else short, "mid one", "mid two", "mid six"], 0)
        for j in range(20)
    ]
    res = check_length(AuditData(items=items), cfg(alpha=0.05))
    p = sum(math.comb(20, k) * 0.25**k * 0.75 ** (20 - k) for k in range(12, 21))
    row = res.stats["per_question_type"]["t"]
    assert row["pick_longest_accuracy"] == 0.6 and row["chance"] == 0.25
    longest = next(t for t in res.stats["tells"] if t["tell"] == "pick the longest")
    assert longest["p"] == pytest.approx(p, rel=1e-3) and longest["effect"] == 35.0
    tells = [f for f in res.findings if f.kind == "longest_option_tell"]
    assert len(tells) == 1 and tells[0].items == [f"i{j}" for j in range(12)]
    ratios = {f.items[0]: f.kind for f in res.findings if f.kind.startswith("answer_much")}
    assert ratios == {
        **{f"i{j}": "answer_much_longer" for j in range(12)},
        **{f"i{j}": "answer_much_shorter" for j in range(12, 20)},
    }


# ------------------------------------------------------------- tells: effect, interval, Holm, power


def test_wilson_interval_by_hand_and_holm_by_hand() -> None:
    from gen.generators.audit.stats import holm, wilson

    z = 1.959963984540054  # the 97.5 % normal quantile
    for k, n in ((43, 90), (0, 20), (20, 20), (26_000, 100_000)):
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z / (1 + z * z / n) * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
        assert wilson(k, n) == pytest.approx((centre - half, centre + half), abs=1e-9)
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> monotone
    # 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.2]) == [0.2] and holm([0.5, 0.6]) == [1.0, 1.0] and holm([]) == []


def _binom_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed term by term."""
    return sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))


def test_power_line_by_hand() -> None:
    """40 items, chance 25 %, level 0.005 (alpha 0.01 over 2 tests), max_effect 5 points, power 80
    %."""
    from gen.generators.audit.stats import binom_critical, detectable_effect

    k_sig = next(k for k in range(41) if _binom_sf(k, 40, 0.25) <= 0.005)
    assert (k_sig, binom_critical(40, 0.25, 0.005)) == (
        18,
        18,
    )  # 18/40 right is the fewest significant
    k = max(
        k_sig, math.floor(0.30 * 40) + 1
    )  # and an effect above 5 points needs 13: the first binds
    lo, hi = 0.25, 1.0
    for _ in range(60):  # the true accuracy at which 18 or more of 40 come up 80 % of the time
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _binom_sf(k, 40, mid) >= 0.8 else (mid, hi)
    assert detectable_effect(40, 0.25, 0.005, 0.05, 0.8) == pytest.approx(hi - 0.25, abs=1e-9)
    assert round(100 * (hi - 0.25), 1) == 25.4
    # at 100k items the size rule binds: the smallest error is just above max_effect
    assert 5.0 < 100 * detectable_effect(100_000, 0.25, 0.005, 0.05, 0.8) < 5.4
    assert detectable_effect(3, 0.25, 0.005) is None  # 3 of 3 right is not significant at 0.005
    # the audit reports the same line: 40 items of one type, length's two tests -> alpha / 2
    items = [mcq(f"i{j}", ["a" * (3 + j % 4), "bb", "ccccc", "d"], j % 4) for j in range(40)]
    res = check_length(AuditData(items=items), cfg())
    assert {t["detectable_effect"] for t in res.stats["tells"]} == {25.4}


def _length_bank(n: int, k_longest: int, n_options: int = 3, qtype: str = "t") -> list[MCQ]:
    """``n`` items whose answer is the longest option in the first ``k_longest`` and the second
    longest in the others (never the shortest, whatever the option count)."""
    items = []
    for j in range(n):
        opts = [
            "x" * (10 + 5 * r) for r in range(n_options)
        ]  # lengths 10, 15, 20…: the last is longest
        a = n_options - 1 if j < k_longest else n_options - 2
        order = [
            (r + j) % n_options for r in range(n_options)
        ]  # spread the answers over the positions
        items.append(mcq(f"{qtype}{j}", [opts[r] for r in order], order.index(a), qtype=qtype))
    return items


def _tell_bank() -> list[MCQ]:
    """As in issue 22: 90 goal items where the longest option is right in 43 (47.8 % against
    33.3 %: +14.4 points, p = 0.003), next to two question types without a tell (six tests)."""
    return (
        _length_bank(90, 43, qtype="goal")
        + _length_bank(90, 0, 4, "belief")
        + _length_bank(90, 0, 4, "actions")
    )


def test_a_14_point_tell_on_90_items_is_at_least_a_warning() -> None:
    res = check_length(AuditData(items=_tell_bank()), cfg())
    (f,) = [f for f in res.findings if f.kind == "longest_option_tell"]
    assert f.severity == "warning" and f.numbers["effect"] == 14.4 and len(f.items) == 43
    assert f.numbers["rule"] == "uncorrected_and_large" and f.numbers["p_holm"] == pytest.approx(
        6 * f.numbers["p"], rel=0.01
    )
    # the old gate (alpha 0.01 after Bonferroni over the six tests) let it pass without a finding
    assert f.numbers["p"] > 0.01 / 6


def test_a_1_point_tell_on_100k_items_is_not_an_error() -> None:
    items = _length_bank(100_000, 34_334)  # 34.33 % against 33.33 %: +1.0 point, p ~ 1e-11
    res = check_length(AuditData(items=items), cfg())
    (f,) = [f for f in res.findings if f.kind == "longest_option_tell"]
    assert f.severity == "info" and f.numbers["rule"] == "significant_but_small"
    assert f.numbers["effect"] == 1.0 and f.numbers["p"] < 1e-9
    assert 5.0 < f.numbers["detectable_effect"] < 5.5  # what this size can call an error


def test_no_tell_on_1000_items_gives_nothing_above_info(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    words = [
        "pick",
        "cup",
        "walk",
        "door",
        "open",
        "box",
        "wash",
        "plate",
        "sit",
        "read",
        "book",
        "fold",
        "towel",
        "and",
        "then",
        "near",
        "table",
        "sink",
        "chair",
        "shoe",
        "lid",
        "mop",
        "rag",
        "bowl",
    ]
    rows = []
    for j in range(1000):
        opts = [
            " ".join(rng.choice(words, int(rng.integers(6, 8)))).capitalize() + "."
            for _ in range(4)
        ]
        context = [" ".join(rng.choice(words, 20)) for _ in range(3)]
        rows.append(
            {
                "item_id": f"q{j:04d}",
                "question_type": "next",
                "question": "What will C do next?",
                "options": opts,
                "answer": int(rng.integers(4)),
                "group": f"clip{j // 2}",
                "visible": {"context": context},
            }
        )
    bank = write_jsonl(tmp_path / "bank.jsonl", rows)
    # word salad fails the text gates (repetition, no verb after C): that is the text check's job;
    # and its random contexts name random options, so some items have the answer as the odd one
    # out: check 18 flags each such item whatever the bank's rate (test_audit_context_options)
    checks = [k for k in CHECKS if k not in ("text", "context_options")]
    result, findings, report = run_audit(tmp_path / "out", bank, embeddings=False, checks=checks)
    assert [f for f in findings if f["severity"] != "info"] == [] and result.exit_code == 0
    tells = [t for c in report["checks"] for t in c["stats"].get("tells", [])]
    assert (
        len(tells) == 7
    )  # overlap, position, longest, shortest, classifier, most central, context states
    assert all(t["effect"] < 5 and t["severity"] is None for t in tells)


def test_severity_rules_in_order() -> None:
    from gen.generators.audit.stats import Tell, judge

    def verdict(
        k: int, n: int, chance: float, p: float, family: int = 1
    ) -> tuple[str | None, str | None]:
        tells = judge(
            [Tell({}, k, n, chance, p)] + [Tell({}, 0, 10, 0.5, 1.0)] * (family - 1),
            alpha=0.01,
            max_effect=5.0,
            warn_p=0.05,
            power=0.8,
        )
        return tells[0].severity, tells[0].rule

    assert verdict(80, 200, 0.25, 1e-6) == ("error", "significant_and_large")
    assert verdict(80, 200, 0.25, 0.02) == (
        "warning",
        "interval_above_max_effect",
    )  # interval [+8.5, +21.9]
    assert verdict(43, 90, 1 / 3, 0.003, family=6) == (
        "warning",
        "uncorrected_and_large",
    )  # Holm p 0.018
    assert verdict(26_000, 100_000, 0.25, 1e-12) == ("info", "significant_but_small")
    assert verdict(10, 40, 0.25, 0.56) == (None, None)
    assert verdict(12, 40, 0.25, 0.12) == (None, None)  # +5 points on 40 items: too small to tell
    assert verdict(12, 40, 0.25, 0.02) == (
        None,
        None,
    )  # exactly max_effect is not above it (float noise)
    # Holm rather than Bonferroni: p 0.004 and 0.006 in a family of two are both errors (Holm p
    # 0.008
    # each), where Bonferroni's 0.01 / 2 would pass the second
    pair = judge(
        [Tell({}, 80, 200, 0.25, 0.004), Tell({}, 80, 200, 0.25, 0.006)],
        alpha=0.01,
        max_effect=5.0,
        warn_p=0.05,
        power=0.8,
    )
    assert [(t.severity, t.p_holm) for t in pair] == [("error", 0.008), ("error", 0.008)]


def test_report_carries_effects_rules_and_power_in_md_and_json(tmp_path: Path) -> None:
    rows = [
        {
            "item_id": it.item_id,
            "question_type": it.question_type,
            "question": "Which?",
            "options": it.options,
            "answer": it.answer,
            "group": it.item_id,
        }
        for it in _tell_bank()
    ]
    bank = write_jsonl(tmp_path / "bank.jsonl", rows)
    result, findings, report = run_audit(
        tmp_path / "out", bank, checks=["length"], embeddings=False
    )
    (f,) = [f for f in findings if f["kind"] == "longest_option_tell"]
    (tell,) = [
        t
        for t in report["checks"][0]["stats"]["tells"]
        if t["tell"] == "pick the longest" and t["question_type"] == "goal"
    ]
    assert (tell["severity"], tell["rule"], tell["effect"], tell["effect_ci95"]) == (
        f["severity"],
        f["numbers"]["rule"],
        14.4,
        f["numbers"]["effect_ci95"],
    )
    assert report["power"][2] == {
        "question_type": "goal",
        "check": "length",
        "items": 90,
        "chance": 0.333,
        "detectable_effect": tell["detectable_effect"],
    }
    assert [p["question_type"] for p in report["power"]] == ["actions", "belief", "goal"]
    assert report["checks"][0]["options"] == {
        "length_ratio": 1.4,
        "min_items_per_test": 20,
        "alpha": 0.01,
        "max_effect": 5.0,
        "warn_p": 0.05,
        "power": 0.8,
    }
    md = (tmp_path / "out" / "audit.md").read_text()
    lo, hi = tell["effect_ci95"]
    assert (
        "| goal | pick the longest | binomial | 90 | 43 | 0.478 | 0.333 | 14.4 "
        f"| {cell(lo)}, {cell(hi)} | "
        f"{cell(tell['p'])} | {cell(tell['p_holm'])} | {cell(tell['detectable_effect'])} | "
        f"{f['severity']}: {tell['rule']} |"
    ) in md
    assert (
        f"| goal | length | 90 | 0.333 | {cell(tell['detectable_effect'])} |" in md
        and "## Power" in md
    )
    assert "uncorrected_and_large: p=0.00" in f["what"]
    assert result.exit_code == 0  # a warning: fail_on=error passes; bank add gates the same way


def test_bank_add_gates_on_the_tell_severities(tmp_path: Path) -> None:
    roles = tmp_path / "roles.yaml"
    roles.write_text(
        "id: item_id\nquestion: question\noptions: options\nanswer: answer\n"
        "question_type: question_type\ngroup: group\n"
    )
    rows = [
        {
            "item_id": it.item_id,
            "question_type": it.question_type,
            "question": f"Which one, {j}?",
            "options": it.options,
            "answer": it.answer,
            "group": it.item_id,
        }
        for j, it in enumerate(_tell_bank())
    ]
    bank_file = write_jsonl(tmp_path / "batch.jsonl", rows)

    def add(name: str, fail_on: str) -> int:
        from gen.generators.bank import BankConfig

        settings = BankConfig(
            action="add",
            bank=str(tmp_path / name),
            input=str(bank_file),
            roles=str(roles),
            near_dup_sim=None,
            fail_on=fail_on,
            cache_dir=None,
            progress="off",
            audit_options={"embeddings": False, "checks": ["structure", "length"]},
        )
        return run_config("bank", settings, tmp_path / f"run_{name}", quiet=True).exit_code

    assert add("lenient", "error") == 0 and (tmp_path / "lenient" / "current").exists()
    assert add("strict", "warning") == 1 and not (tmp_path / "strict" / "current").exists()
    audit = json.loads((tmp_path / "run_strict" / "audit" / "audit.json").read_text())
    assert [(f["kind"], f["severity"]) for f in audit["findings"]] == [
        ("longest_option_tell", "warning")
    ]


def test_shortcut_finds_a_word_tell_and_not_random_labels() -> None:
    rng = np.random.default_rng(3)
    verbs = [
        "fold",
        "wash",
        "sort",
        "paint",
        "fix",
        "stack",
        "clean",
        "label",
        "carry",
        "mend",
        "pack",
        "dry",
    ]
    nouns = [
        "shirts",
        "plates",
        "books",
        "chairs",
        "bikes",
        "boxes",
        "lamps",
        "rugs",
        "cups",
        "tools",
        "coats",
        "pots",
    ]
    items = []
    for j in range(60):
        opts = [
            f"{v} the {n}"
            for v, n in zip(
                rng.choice(verbs, 4, replace=False),
                rng.choice(nouns, 4, replace=False),
                strict=True,
            )
        ]
        a = int(rng.integers(4))
        if (
            j < 45
        ):  # the tell: the key says "carefully", a distractor says "quickly" (same length class)
            opts[a] = f"carefully {opts[a]}"
            opts[(a + 1) % 4] = f"quickly {opts[(a + 1) % 4]}"
        items.append(mcq(f"i{j:02d}", opts, a, group=f"g{j}"))
    c = cfg()
    out = shortcut_cv(items, c, seed=0)
    assert out["correct"][:45].mean() > 0.9 and out["weights"][0][0] == "word:carefully"
    shuffled = [it.model_copy(update={"answer": int(rng.integers(4))}) for it in items[45:] * 4]
    shuffled = [
        it.model_copy(update={"item_id": f"r{j}", "group": f"r{j}"})
        for j, it in enumerate(shuffled)
    ]
    control = shortcut_cv(shuffled, c, seed=0)
    assert control["correct"].mean() < 0.4


def test_shortcut_sees_the_surface_the_word_features_drop() -> None:
    """An answer that alone ends without a period (Ego4D narrations end bare, a model's rewrites end
    with one) or starts in lower case: the classifier's words lose punctuation and case, its
    surface features keep them."""
    rng = np.random.default_rng(5)
    verbs = [
        "folds",
        "washes",
        "sorts",
        "paints",
        "fixes",
        "stacks",
        "cleans",
        "labels",
        "carries",
        "mends",
    ]
    nouns = [
        "shirts",
        "plates",
        "books",
        "chairs",
        "bikes",
        "boxes",
        "lamps",
        "rugs",
        "cups",
        "tools",
    ]

    def bank(mark: str) -> list[MCQ]:
        items = []
        for j in range(60):
            pads = rng.choice(
                ["", " now", " again", " slowly", " with care", " one by one"], 4
            )  # lengths vary
            opts = [
                f"C {v} the {n}{p}."
                for v, n, p in zip(
                    rng.choice(verbs, 4, replace=False),
                    rng.choice(nouns, 4, replace=False),
                    pads,
                    strict=True,
                )
            ]
            a = int(rng.integers(4))
            opts[a] = opts[a][:-1] if mark == "bare" else opts[a][0].lower() + opts[a][1:]
            items.append(mcq(f"i{j:02d}", opts, a, group=f"g{j}"))
        return items

    for mark, features in (("bare", {"ends_bare", "end_odd"}), ("lower", {"lower_start"})):
        out = shortcut_cv(bank(mark), cfg(), seed=0)
        assert out["correct"].mean() > 0.9, mark
        assert out["weights"][0][0] in features, (mark, out["weights"][:3])


def test_an_answer_the_distractors_borrow_from_is_the_most_central_option() -> None:
    """Wrong options each written from the answer (one word of it kept) make the answer the hub of
    its set: "pick the most central" finds it; the same options with the answer moved to a random
    other slot do not."""
    rng = np.random.default_rng(11)
    verbs = [
        "folds",
        "washes",
        "sorts",
        "paints",
        "fixes",
        "stacks",
        "cleans",
        "labels",
        "carries",
        "mends",
    ]
    nouns = [
        "shirts",
        "plates",
        "books",
        "chairs",
        "bikes",
        "boxes",
        "lamps",
        "rugs",
        "cups",
        "tools",
    ]
    places = ["kitchen", "garage", "attic", "porch", "hall", "shed", "office", "yard"]
    items, control = [], []
    for j in range(60):
        v, n, pl = (
            rng.choice(verbs, 4, replace=False),
            rng.choice(nouns, 4, replace=False),
            rng.choice(places, 4, replace=False),
        )
        answer = f"C {v[0]} the {n[0]} in the {pl[0]}."
        wrong = [
            f"C {v[1]} the {n[0]} in the {pl[1]}.",
            f"C {v[2]} the {n[2]} in the {pl[0]}.",
            f"C {v[0]} the {n[3]} in the {pl[3]}.",
        ]  # each keeps one of the answer's words
        a = int(rng.integers(4))
        opts = wrong[:a] + [answer] + wrong[a:]
        items.append(mcq(f"i{j:02d}", opts, a, group=f"g{j}"))
        control.append(mcq(f"c{j:02d}", opts, (a + 1 + int(rng.integers(3))) % 4, group=f"g{j}"))
    # options tied at the top (no two share a word): chance by construction, never listed
    tied = [
        mcq(
            f"t{j:02d}",
            ["C eats an apple.", "A dog barks.", "Rain falls outside.", "Someone sings."],
            j % 4,
            group=f"t{j}",
        )
        for j in range(20)
    ]
    assert {central_credit(t) for t in tied} == {0.25}
    res = shortcut(AuditData(items=items + tied), cfg())
    tell = next(t for t in res.stats["tells"] if t["tell"] == "pick the most central")
    assert tell["severity"] == "error"
    (f,) = [f for f in res.findings if f.kind == "central_answer_tell"]
    assert f.items == [it.item_id for it in items]  # the answer alone on top; no tied item
    res = shortcut(AuditData(items=control), cfg())
    tell = next(t for t in res.stats["tells"] if t["tell"] == "pick the most central")
    assert tell["hits"] == 0 and not any(f.kind == "central_answer_tell" for f in res.findings)


def test_knn_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(300, 16)).astype(np.float32)
    a[150] = a[20] + 0.01  # a near pair
    a /= np.linalg.norm(a, axis=1, keepdims=True)
    b = rng.normal(size=(50, 16)).astype(np.float32)
    b /= np.linalg.norm(b, axis=1, keepdims=True)
    sims = a @ a.T - 2 * np.eye(300)  # not itself
    got_sims, got_ids = knn(a, None, 3, block=64)
    np.testing.assert_allclose(got_sims, -np.sort(-sims, axis=1)[:, :3], atol=1e-5)
    assert got_ids[20, 0] == 150 and got_ids[150, 0] == 20
    assert not (got_ids == np.arange(300)[:, None]).any()
    cross_sims, cross_ids = knn(a, b, 2, block=64)
    np.testing.assert_allclose(cross_sims, -np.sort(-(a @ b.T), axis=1)[:, :2], atol=1e-5)
    np.testing.assert_array_equal(cross_ids[:, 0], (a @ b.T).argmax(axis=1))


def test_cross_item_leak_ignores_template_phrases() -> None:
    """A phrase every privileged text shares ("c believes that the") is the template, not a leak."""
    items = [
        mcq(
            f"i{j}",
            [f"C believes that the pot {j} is hot", f"C believes that the lid {j} is off"],
            0,
            visible={
                "context": "C believes that the story is long and C believes that the day is warm"
            },
        )
        for j in range(40)
    ]
    res = check_leakage(AuditData(items=items), cfg())
    assert [f for f in res.findings if f.kind != "answer_overlaps_context"] == []


def test_tom_like_record_truth_object_is_searched_by_key(tmp_path: Path) -> None:
    """``tom`` records keep the truth as an object in ``privileged``: each value is its own term."""
    row = json.loads((FIX / "clean.jsonl").read_text().splitlines()[0])
    row["privileged"]["truth"] = {
        "goal": "To tidy the whole flat",
        "actions": "C washes the big blue bowl at the sink",
    }
    row["visible"]["context"].append("03m:30s | C washes the big blue bowl at the sink.")
    bank = write_jsonl(tmp_path / "tom.jsonl", [row])
    _, findings, _ = run_audit(tmp_path / "out", bank, checks=["leakage"])
    assert triples(findings) == [
        (
            "privileged_in_visible",
            (row["item_id"],),
            ("visible.context", "privileged.truth.actions"),
        )
    ]


def test_a_nocontext_run_audits_its_kept_items_with_its_own_results(tmp_path: Path) -> None:
    run_dir = tmp_path / "nc"
    (run_dir / "kept").mkdir(parents=True)
    shutil.copy(FIX / "clean.jsonl", run_dir / "kept" / "clean.jsonl")
    shutil.copy(FIX / "nocontext_planted" / "nocontext.jsonl", run_dir / "nocontext.jsonl")
    _, findings, report = run_audit(tmp_path / "out", run_dir, checks=["structure", "blind"])
    assert next(c for c in report["checks"] if c["key"] == "blind")["status"] == "ran"
    assert triples(findings) == expected("blind")
