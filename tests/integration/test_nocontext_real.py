"""nocontext on the real embedded GGUF: both modes through the CLI on a handful of items, the
in-process log-likelihoods against llama-cpp-python's own full evaluation, and scoring through
llama-cpp-python's OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from gen.kinds.mcq import load_banks
from gen.schemas.mcq import LETTERS

pytestmark = pytest.mark.integration
EGOTOM = Path("/work/shared/data/egotom_paper")
LABEL = "SmolLM2-135M-Instruct.Q4_1"


def _bank(path: Path) -> Path:
    rows = [
        {
            "item_id": "g1",
            "question_type": "goal",
            "question": "What is C's future goal?",
            "options": [
                "To bake bread for dinner.",
                "To repair a bicycle tyre.",
                "To paint the fence.",
            ],
            "answer": 0,
            "visible": {"context": "C kneads dough."},
            "privileged": {},
        },
        {
            "item_id": "b1",
            "question_type": "belief",
            "question": "What does C most likely believe?",
            "options": [
                "C believes the soup needs salt.",
                "C believes the door is locked.",
                "C believes the plant needs water.",
                "C believes the car is clean.",
            ],
            "answer": 2,
            "visible": {"context": "C looks at a dry plant."},
            "privileged": {},
        },
        {
            "item_id": "a1",
            "question_type": "actions",
            "question": "What will C most likely do next?",
            "options": [
                "C picks up the phone and calls a friend.",
                "C closes the laptop.",
                "C opens the fridge and takes milk.",
                "C sweeps the floor.",
            ],
            "answer": 1,
            "visible": {"context": "C finishes typing."},
            "privileged": {},
        },
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


@pytest.mark.parametrize("mode", ["generate", "loglik"])
def test_both_modes_on_the_real_model(tmp_path: Path, run_gen, check_run_folder, mode: str) -> None:
    bank = _bank(tmp_path / "items.jsonl")
    out = tmp_path / "run"
    r = run_gen(
        "nocontext",
        f"input={bank}",
        f"mode={mode}",
        "max_tokens=24",
        f"hydra.run.dir={out}",
        "progress=plain",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    manifest = check_run_folder(out, "nocontext", 3)
    records = _read(out / "nocontext.jsonl")
    assert [x["item_id"] for x in records] == ["g1", "b1", "a1"]
    for rec in records:
        answers = rec["answers"][LABEL]
        assert len(answers) == 3 and rec["shuffles"] == 3
        n = rec["n_options"]
        assert len({a["order"].index(rec["answer"]) for a in answers}) == 3  # balanced positions
        for a in answers:
            assert sorted(a["order"]) == list(range(n))
            if a["letter"] is not None:
                assert a["choice"] == a["order"][LETTERS.index(a["letter"])]
                assert a["correct"] == (a["choice"] == rec["answer"])
            else:
                assert mode == "generate" and a["correct"] is False
            if mode == "generate":
                assert isinstance(a["raw"], str) and a["scores"] is None
            else:
                assert a["raw"] is None and len(a["scores"]) == n
                assert all(math.isfinite(s) and s < 0 for s in a["scores"])
        assert rec["correct"][LABEL] == sum(a["correct"] for a in answers)
        assert rec["kept"] == (rec["correct"][LABEL] <= 2)
    kept_ids = [x["item_id"] for x in records if x["kept"]]
    assert [i.item_id for i in load_banks(out)[0].items] == kept_ids
    assert len(_read(out / "removed.jsonl")) == 3 - len(kept_ids)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["models"][LABEL]["accuracy"]["answers"] == 9
    assert summary["throughput"]["items_per_second"] > 0
    assert manifest["nocontext"] == summary
    assert "items/s" in r.stdout  # the table at the end


@pytest.mark.skipif(not EGOTOM.is_dir(), reason="EgoToM CSVs are not on this machine")
def test_egotom_folder_sample(tmp_path: Path, run_gen) -> None:
    out = tmp_path / "run"
    r = run_gen(
        "nocontext",
        f"input={EGOTOM}",
        "sample=2",
        "mode=loglik",
        "shuffles=1",
        "max_correct=0",
        f"hydra.run.dir={out}",
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    kept = sorted(p.name for p in (out / "kept").iterdir())
    assert kept == sorted(p.name for p in EGOTOM.glob("egotom_*_shuffled.csv"))
    records = _read(out / "nocontext.jsonl")
    assert len(records) == 2
    assert sum(len(b.items) for b in load_banks(out)) == sum(r["kept"] for r in records)


def test_loglik_matches_a_full_evaluation(gguf_path: Path) -> None:
    """Our scorer decodes the shared prefix once and asks for logits only where needed; it must
    give what a logits_all model evaluating each whole text gives."""
    from llama_cpp import Llama

    from gen.llm import LlamaCppConfig, make_llm

    llm = make_llm(LlamaCppConfig(n_ctx=2048))
    prompt = "Question: What does C most likely believe?\nAnswer:"
    conts = [" C believes the plant needs water.", " C believes the door is locked.", " yes"]
    ours = llm.loglik(prompt, conts)
    ref = Llama(model_path=str(gguf_path), n_ctx=2048, logits_all=True, verbose=False)
    ctx_ids = ref.tokenize(prompt.encode())
    for cont, got in zip(conts, ours, strict=True):
        whole = ref.tokenize((prompt + cont).encode())
        k = next(i for i, (a, b) in enumerate(zip(ctx_ids + [-1], whole, strict=False)) if a != b)
        ref.reset()
        ref.eval(whole)
        lp = Llama.logits_to_logprobs(ref.scores[: len(whole)])
        expected = sum(float(lp[p - 1][whole[p]]) for p in range(k, len(whole)))
        assert got.tokens == len(whole) - k
        # llama.cpp's sums depend on how a text is cut into batches (prefix once vs the whole text):
        # 0.004 apart on a CI machine. A wrong token (off by one, a missing BOS) moves it by a whole
        # token's log-probability.
        assert got.logprob == pytest.approx(expected, abs=2e-2)
    # chat messages with an opened answer: scored inside the GGUF's chat template
    msgs = [
        {"role": "user", "content": "Which is true? a) the sky is blue b) the sky is green"},
        {"role": "assistant", "content": "Answer 1:"},
    ]
    chat = llm.loglik(msgs, [" a) the sky is blue", " b) the sky is green"])
    assert all(s.tokens > 0 and s.logprob < 0 for s in chat)
    assert llm.loglik(msgs, [" a) the sky is blue", " b) the sky is green"]) == chat
    # the model is left in a clean state for ordinary generation
    text = llm.complete(
        [{"role": "user", "content": "Say hello."}], seed=1, max_tokens=8, temperature=0
    )
    assert isinstance(text, str) and text.strip()


def test_loglik_through_llama_cpp_python_server(
    llama_cpp_python_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The completions echo+logprobs path against a real server. llama-cpp-python 0.3.36's
    server shifts prompt log-probabilities by one token (abetlen/llama-cpp-python#1983), so only
    the plumbing is compared with the in-process scorer: which tokens are the continuation.
    (That server also sorts the whole vocabulary in Python for every echoed token: slow, so
    the prompt here is short.)"""
    from gen.llm import LlamaCppConfig, OpenAIConfig, make_llm

    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # only ever the loopback address, directly
    served = make_llm(OpenAIConfig(base_url=llama_cpp_python_server, model="local", max_retries=0))
    local = make_llm(LlamaCppConfig(n_ctx=2048))
    prompt = "Question: What will C do next?\nAnswer:"
    conts = [" a) C closes the laptop.", " b) C sweeps."]
    remote = served.loglik(prompt, conts)
    ours = local.loglik(prompt, conts)
    assert [s.tokens for s in remote] == [s.tokens for s in ours]
    assert all(math.isfinite(s.logprob) and s.logprob < 0 for s in remote)
