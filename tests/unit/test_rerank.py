"""``rerank``: permutation validation (dropped, added, rewritten, duplicated ids), the re-ask and
the reject naming the difference, duplicate removal and renumbering, ungrounded last, the
embedding dedup's agreement, the pools reader, and the generator end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import read_jsonl
from fakes import FakeEmbedder

from gen.engine.runner import RunContext, run_config
from gen.errors import InputError
from gen.formats.ranking import (
    agreement,
    agreement_summary,
    call,
    components,
    embedding_pairs,
    permutation_problems,
    resolve,
    supported,
)
from gen.generators.rerank import RerankConfig, read_pools
from gen.llm import scripted_llm
from gen.llm.attempts import AttemptFailure
from gen.paths import EXAMPLES
from gen.schemas.rerank import RerankDraft, rerank_draft
from gen.templates import Prompts

POOLS = EXAMPLES / "rerank" / "pools.jsonl"
TEXTS = [
    "Set a timer for the pasta.",
    "Start a ten minute pasta timer.",
    "Suggest a sauce.",
    "Book a taxi.",
]


def draft(
    ids: list[int],
    texts: list[str] | None = None,
    dup: dict[int, int] | None = None,
    ungrounded: tuple[int, ...] = (),
) -> RerankDraft:
    texts = texts or [TEXTS[i - 1] if 1 <= i <= len(TEXTS) else "new" for i in ids]
    return RerankDraft.model_validate(
        {
            "ranking": [
                {
                    "id": i,
                    "text": t,
                    "duplicate_of": (dup or {}).get(i),
                    "grounded": i not in ungrounded,
                }
                for i, t in zip(ids, texts, strict=True)
            ],
            "reason": "r",
        }
    )


@pytest.mark.parametrize(
    ("answer", "problems"),
    [
        (draft([2, 1, 3, 4]), []),
        (draft([2, 1, 3]), ["dropped [4]"]),
        (draft([2, 1, 3, 4, 5]), ["added [5] (there are candidates 1 to 4)"]),
        (draft([2, 1, 3, 3]), ["dropped [4]", "listed [3] more than once"]),
        (
            draft([1, 2, 3, 4], [TEXTS[0], "Start a 10-minute pasta timer.", TEXTS[2], TEXTS[3]]),
            ["rewrote 2: 'Start a ten minute pasta timer.' -> 'Start a 10-minute pasta timer.'"],
        ),
        (
            draft(
                [1, 2, 3, 4], [TEXTS[1], TEXTS[0], TEXTS[2], TEXTS[3]]
            ),  # texts swapped between ids
            [
                "rewrote 1: 'Set a timer for the pasta.' -> 'Start a ten minute pasta timer.'; "
                "2: 'Start a ten minute pasta timer.' -> 'Set a timer for the pasta.'"
            ],
        ),
    ],
    ids=["exact", "dropped", "added", "duplicated", "rewritten", "swapped"],
)
def test_permutation_problems_name_every_difference(
    answer: RerankDraft, problems: list[str]
) -> None:
    assert permutation_problems(TEXTS, answer) == problems


def test_the_schema_pins_count_and_whole_candidates_for_grammar_backends() -> None:
    schema = rerank_draft(tuple(TEXTS)).model_json_schema()
    ranking = schema["properties"]["ranking"]
    assert (ranking["minItems"], ranking["maxItems"]) == (4, 4)
    entries = ranking["items"]["anyOf"]
    assert [
        (e["properties"]["id"]["const"], e["properties"]["text"]["const"]) for e in entries
    ] == list(zip([1, 2, 3, 4], TEXTS, strict=True))
    assert all(set(e["required"]) == {"id", "text", "duplicate_of", "grounded"} for e in entries)
    assert entries[0]["properties"]["duplicate_of"]["anyOf"][0]["enum"] == [2, 3, 4]  # never itself
    assert "reason" in schema["required"]
    # pydantic itself does not enforce them: a backend that ignores the schema reaches the check
    loose = rerank_draft(tuple(TEXTS)).model_validate(
        {"ranking": [{"id": 9, "text": "x", "duplicate_of": None, "grounded": True}], "reason": "x"}
    )
    assert permutation_problems(TEXTS, loose) == [
        "dropped [1, 2, 3, 4]",
        "added [9] (there are candidates 1 to 4)",
    ]


def test_call_reasks_with_the_difference_then_accepts() -> None:
    answers = [draft([2, 1, 3]).model_dump_json(), draft([2, 1, 4, 3]).model_dump_json()]
    llm = scripted_llm(answers)
    counted: list[str] = []
    got, calls = call(
        llm,
        Prompts(),
        "C cooks pasta.",
        TEXTS,
        seed=lambda a: 7 + a,
        attempts=3,
        max_tokens=512,
        count=counted.append,
    )
    assert (
        calls == 2
        and [r.id for r in got.ranking] == [2, 1, 4, 3]
        and counted == ["rerank.dropped_ids"]
    )
    reask = llm.calls[1]["messages"]
    assert reask[-2] == {"role": "assistant", "content": answers[0]}
    assert reask[-1]["content"].startswith(
        "Your list is not the candidates as given: dropped [4]. List all 4"
    )
    assert [c["seed"] for c in llm.calls] == [7, 8]


def test_call_rejects_after_its_attempts_naming_the_difference() -> None:
    bad = draft(
        [1, 2, 3, 4], [TEXTS[0], TEXTS[1], "Suggest a pesto sauce.", TEXTS[3]]
    ).model_dump_json()
    with pytest.raises(AttemptFailure) as e:
        call(
            scripted_llm([bad, bad]),
            Prompts(),
            "c",
            TEXTS,
            seed=lambda a: a,
            attempts=2,
            max_tokens=512,
            count=lambda _: None,
        )
    assert (e.value.reason, e.value.attempts) == ("not_a_permutation", 2)
    assert (
        e.value.detail == "rewrote 3: 'Suggest a sauce.' -> 'Suggest a pesto sauce.'"
        and e.value.raw == bad
    )
    with pytest.raises(AttemptFailure) as e:
        call(
            scripted_llm(["oops"] * 9),
            Prompts(),
            "c",
            TEXTS,
            seed=lambda a: a,
            attempts=2,
            max_tokens=512,
            count=lambda _: None,
        )
    assert e.value.reason == "invalid_output"


def test_resolve_removes_duplicates_keeps_the_best_ranked_and_puts_ungrounded_last() -> None:
    # ranked 3, 2, 1, 4; 1 and 2 mean the same (2 ranks higher, so 1 goes); 4 is ungrounded
    res = resolve(draft([3, 2, 1, 4], dup={1: 2}, ungrounded=(3,)), 4)
    assert res.order == [2, 1, 0, 3] and res.removed == [(0, 1)] and res.kept == [1, 3, 2]
    assert res.groups == [[0, 1]]
    # chains join into one group; the protected candidate (a candidate set's positive) stands for it
    res = resolve(draft([4, 3, 2, 1], dup={3: 2, 2: 1}), 4, protect=0)
    assert res.removed == [(2, 0), (1, 0)] and res.kept == [3, 0]
    counted: list[str] = []
    res = resolve(draft([1, 2, 3, 4], dup={1: 1, 2: 9}), 4, count=counted.append)
    assert res.removed == [] and counted == ["rerank.bad_duplicate_of"] * 2
    assert components(5, [(0, 3), (3, 4)]) == [0, 1, 2, 0, 0]


def test_embedding_dedup_and_agreement() -> None:
    texts = [
        "start the pasta timer now",
        "start the pasta timer",
        "book a taxi",
        "book a taxi now please",
    ]
    pairs = embedding_pairs(FakeEmbedder(), texts, 0.85)
    assert pairs == [(0, 1)]  # 4/sqrt(20) = 0.894; the taxis share 3/sqrt(15) = 0.775
    counts = agreement(4, [[0, 1], [2, 3]], pairs)
    assert counts == {"both": 1, "llm_only": 1, "embedding_only": 0, "neither": 4}
    summary = agreement_summary(__import__("collections").Counter(counts))
    assert summary["agree_share"] == round(5 / 6, 4) and summary["flagged_jaccard"] == 0.5


def test_pools_reader_reads_the_example_and_names_bad_lines(tmp_path: Path) -> None:
    pools = read_pools(POOLS)
    assert pools[0].pool_id == "seg-1" and len(pools[0].candidates) == 5
    for rows, needle in [
        ([{"pool_id": "a", "candidates": []}], ":1: candidates: List should have at least 1 item"),
        (
            [{"pool_id": "a", "candidates": ["x"], "extra": 1}],
            ":1: extra: Extra inputs are not permitted",
        ),
        (
            [{"pool_id": "a", "candidates": [{"text": "x", "id": "1"}, {"text": "y", "id": "1"}]}],
            ":1: candidates: id '1' is given twice",
        ),
        (
            [{"pool_id": "a", "candidates": ["x"]}, {"pool_id": "a", "candidates": ["y"]}],
            ":2: pool_id: 'a' repeats line 1",
        ),
        ([[1, 2]], ":1: expected a JSON object, got list"),
    ]:
        path = tmp_path / "p.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        with pytest.raises(InputError) as e:
            read_pools(path)
        assert str(e.value).startswith(str(path)) and needle in str(e.value), str(e.value)


def rerank_reply(dups: dict[int, int], ungrounded: tuple[int, ...] = ()) -> Any:
    def reply(messages: list[dict[str, str]], seed: int) -> str:
        req = messages[-1]["content"]
        if req.startswith("Your list is not"):
            req = next(
                m["content"] for m in reversed(messages) if "Candidates, numbered:" in m["content"]
            )
        texts = re.findall(
            r"^(\d+)\. (?:\[[^\]]*\] )?(.*)$", req.rsplit("Candidates, numbered:", 1)[1], re.M
        )
        ranking = [
            {
                "id": int(i),
                "text": t,
                "duplicate_of": dups.get(int(i)),
                "grounded": int(i) not in ungrounded,
            }
            for i, t in reversed(texts)
        ]
        return json.dumps({"ranking": ranking, "reason": "most useful first"})

    return reply


def test_rerank_generator_renumbers_the_kept_candidates_and_reports_agreement(
    tmp_path: Path,
) -> None:
    cfg = RerankConfig(
        input=str(POOLS),
        cache_dir=None,
        progress="off",
        dedup_similarity=0.6,
        confirm_similarity=0.6,  # the bag-of-words fake puts the two timers at 0.64
    )
    out = tmp_path / "run"
    ctx = RunContext("rerank", cfg, out).use(
        llm=scripted_llm(rerank_reply({1: 2}, ungrounded=(5,)), sampling=cfg.llm),
        embedder=FakeEmbedder(),
    )
    result = run_config("rerank", cfg, out, ctx=ctx, quiet=True)
    assert (result.accepted, result.rejected) == (1, 0)
    rec = read_jsonl(out / "rerank.jsonl")[0]
    # the reranker reversed the pool; 1 duplicates 2 (2 ranks higher: 1 goes); 5 (a taxi) is
    # ungrounded: last
    assert [c["input_id"] for c in rec["ranked"]] == ["4", "3", "2", "5"]
    assert [c["id"] for c in rec["ranked"]] == [1, 2, 3, 4]
    assert rec["ranked"][-1]["grounded"] is False and rec["ranked"][0]["category"] == "translation"
    assert rec["removed"] == [
        {
            "input_id": "1",
            "text": "Set a timer for the pasta, which needs about 10 minutes.",
            "duplicate_of": "2",
        }
    ]
    assert rec["order"] == ["5", "4", "3", "2", "1"] and rec["attempts"] == 1
    assert ["1", "2"] in rec["embedding_duplicates"]
    assert rec["agreement"]["both"] == 1
    summary = result.manifest["rerank"]["agreement"]
    assert summary["pairs"] == 10 and summary["both"] == 1
    assert result.manifest["prompts"].keys() == {"rerank/rerank.jinja"}


def test_rerank_generator_rejects_a_pool_it_cannot_get_back_whole(tmp_path: Path) -> None:
    pools = tmp_path / "pools.jsonl"
    pools.write_text(
        json.dumps({"pool_id": "p", "context": "x", "candidates": ["a b", "c d"]}) + "\n",
        encoding="utf-8",
    )
    cfg = RerankConfig(input=str(pools), cache_dir=None, progress="off", attempts=2)
    out = tmp_path / "run"
    bad = json.dumps(
        {
            "ranking": [
                {"id": 1, "text": "a b", "duplicate_of": None, "grounded": True},
                {"id": 1, "text": "a b", "duplicate_of": None, "grounded": True},
            ],
            "reason": "r",
        }
    )
    ctx = RunContext("rerank", cfg, out).use(
        llm=scripted_llm([bad, bad], sampling=cfg.llm), embedder=FakeEmbedder()
    )
    result = run_config("rerank", cfg, out, ctx=ctx, quiet=True)
    rej = read_jsonl(out / "rejects.jsonl")
    assert result.accepted == 0 and [r["reason"] for r in rej] == ["not_a_permutation"]
    assert rej[0]["detail"] == "pool p: dropped [2]; listed [1] more than once (after 2 calls)"
    assert result.manifest["validators"] == {"rerank.dropped_ids": 2, "rerank.repeated_ids": 2}


def test_supported_clears_the_duplicate_calls_the_embedding_does_not_hold() -> None:
    # 2, 3 and 4 called duplicates of 1; 3 of itself (resolve counts that); only (0, 1) is held
    answer = draft([1, 2, 3, 4], dup={2: 1, 3: 3, 4: 1})
    held, cleared = supported(answer, [(1, 0)])
    assert cleared == [(3, 0)]
    assert [r.duplicate_of for r in held.ranking] == [None, 1, 3, None]
    assert [r.duplicate_of for r in answer.ranking] == [None, 1, 3, 1]  # the answer is unchanged
    assert supported(answer, [(0, 1), (0, 3)])[1] == []


def test_rerank_keeps_candidates_the_reranker_calls_duplicates_without_support(
    tmp_path: Path,
) -> None:
    """SmolLM2-135M calls every candidate a duplicate of the first: only the call the embedding
    confirms removes a candidate; the others stay, listed as unconfirmed (before: a pool of one)."""
    pools = tmp_path / "pools.jsonl"
    texts = ["start the pasta timer now", "start the pasta timer", "book a taxi", "suggest a sauce"]
    pools.write_text(
        json.dumps({"pool_id": "p", "context": "C cooks pasta.", "candidates": texts}) + "\n",
        encoding="utf-8",
    )
    cfg = RerankConfig(input=str(pools), cache_dir=None, progress="off")
    out = tmp_path / "run"
    ctx = RunContext("rerank", cfg, out).use(
        llm=scripted_llm(rerank_reply({2: 1, 3: 1, 4: 1}), sampling=cfg.llm),
        embedder=FakeEmbedder(),
    )
    result = run_config("rerank", cfg, out, ctx=ctx, quiet=True)
    rec = read_jsonl(out / "rerank.jsonl")[0]
    # the reranker reversed the pool, so of the two timers (fake cosine 0.89) 2 ranks higher and
    # stays
    assert [c["text"] for c in rec["ranked"]] == [texts[3], texts[2], texts[1]]
    assert rec["removed"] == [{"input_id": "1", "text": texts[0], "duplicate_of": "2"}]
    assert rec["unconfirmed_duplicates"] == [["4", "1"], ["3", "1"]]
    # the agreement still measures the reranker's own calls against the embedding's
    # (the fake puts the timers under dedup_similarity=0.9: the embedding flags no pair)
    assert rec["agreement"] == {"both": 0, "llm_only": 6, "embedding_only": 0, "neither": 0}
    assert result.manifest["validators"]["rerank.unconfirmed_duplicates"] == 2
