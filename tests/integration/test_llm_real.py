"""The in-process backend on the embedded GGUF: an answer depends only on (prompt, seed), not
on which call ran before it — the KV-cache reuse of llama-cpp-python and the saved prefix
states must not leak into outputs (a stage re-asked with the same prompt, a run resumed from
the cache, a prompt resumed from an older call's prefix)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from gen.errors import LLMOutputError
from gen.llm import LlamaCppConfig, make_llm

pytestmark = pytest.mark.integration

SYSTEM = " ".join(f"Line {i}: C picks a cup and puts it on shelf {i}." for i in range(40))


@pytest.mark.parametrize("states", [0, 4])
def test_an_answer_depends_only_on_prompt_and_seed(gguf_path, states: int) -> None:
    llm = make_llm(
        LlamaCppConfig(n_ctx=2048, prefix_states=states), None
    )  # no cache: every call runs the model
    target = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "What does C do next? Answer in two sentences."},
    ]
    shared_prefix = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Say hi."}]
    unrelated = [{"role": "user", "content": "Name a colour."}]

    def ask() -> str:
        return llm.complete(target, seed=42, max_tokens=48, temperature=0.8)

    first = ask()
    assert ask() == first  # the same prompt right after itself (a re-ask)
    llm.complete(shared_prefix, seed=1, max_tokens=4)
    assert ask() == first  # after a prompt sharing its prefix
    llm.complete(unrelated, seed=1, max_tokens=4)
    before = llm.usage.prompt_tokens_reused
    assert ask() == first  # after an unrelated prompt
    resumed = llm.usage.prompt_tokens_reused - before
    # the system prompt (~600 tokens) comes back from a saved state, or is evaluated again
    assert (resumed > 500) == (states > 0), resumed
    u = llm.usage.as_dict()
    assert u["prompt_tokens_reported"] == u["prompt_tokens"] > u["prompt_tokens_evaluated"] > 0


def test_an_in_process_call_reports_where_its_time_went(gguf_path) -> None:
    """llama.cpp's own counters split an in-process call into prompt evaluation and generation,
    as llama-server's ``timings`` do: the manifest's time split has both parts."""
    from gen.timing import CLOCK

    llm = make_llm(LlamaCppConfig(n_ctx=2048), None)
    before = CLOCK.snapshot()
    llm.complete([{"role": "user", "content": SYSTEM + " Say hi."}], seed=3, max_tokens=16)
    after = CLOCK.snapshot()
    prompt = after.get("llm_prompt_evaluation", 0.0) - before.get("llm_prompt_evaluation", 0.0)
    generation = after.get("llm_generation", 0.0) - before.get("llm_generation", 0.0)
    calls = after["llm_calls"] - before.get("llm_calls", 0.0)
    # ~600 prompt tokens in a batch and up to 16 generated ones, both measured, within the call
    assert prompt > 0 and generation > 0
    assert prompt + generation <= calls * 1.05


class Plan(BaseModel):
    """What a structured call must fill: a day's plan."""

    title: str = Field(max_length=60)
    steps: list[str] = Field(min_length=2, max_length=4)
    minutes: int


def test_the_grammar_after_a_free_draw_keeps_every_output_in_the_schema(gguf_path) -> None:
    """llm.grammar=after (the default) draws a token without the grammar and redraws only one
    the grammar refuses: every structured reply still parses into the schema's shape, the
    grammar did refuse some free draws (so both paths ran); llm.grammar=first (llama-cpp-python's
    own chain) gives the same shapes. Its speed is measured in bench/, not here."""
    from gen.llm.llama_cpp import _GrammarAfter

    ask = [{"role": "user", "content": "Plan a short morning routine as JSON."}]
    refused = _GrammarAfter.refused
    for mode in ("first", "after"):
        llm = make_llm(LlamaCppConfig(n_ctx=2048, grammar=mode, max_tokens=160), None)
        assert ("grammar" in llm.identity) == (mode == "after")
        made = 0
        for seed in range(4):
            try:
                plan = llm.structured(ask, Plan, seed=seed)
            except LLMOutputError as e:  # the tiny model may ramble to max_tokens: still JSON
                assert e.reason in ("truncated", "invalid_output"), e
                continue
            made += 1
            assert 2 <= len(plan.steps) <= 4
        assert made >= 1, mode
        if mode == "first":
            assert _GrammarAfter.refused == refused  # its own chain: no free draw
    assert _GrammarAfter.refused > refused  # the grammar path ran, not only the free draw


def test_a_json_string_never_holds_a_raw_newline(gguf_path) -> None:
    """llama-cpp-python's JSON grammar lets a string hold a raw newline, which JSON forbids; the
    grammar after a free draw uses JSON's string characters: the newline is refused inside a
    string, a word is not."""
    import ctypes

    import llama_cpp
    from llama_cpp import Llama, LlamaGrammar, _internals

    from gen.llm.llama_cpp import ANY_CHAR, json_strings

    llama = Llama(model_path=str(gguf_path), n_ctx=512, verbose=False)
    schema = '{"type": "object", "properties": {"bio": {"type": "string"}}, "required": ["bio"]}'
    grammar = LlamaGrammar.from_json_schema(schema, verbose=False)
    assert ANY_CHAR in grammar._grammar  # what the fix replaces is still there

    def allowed(text: str, token: bytes) -> bool:
        g = llama_cpp.llama_sampler_init_grammar(
            llama._model.vocab, text.encode(), grammar._root.encode()
        )
        for t in llama.tokenize(b'{"bio": "abc', add_bos=False, special=False):
            llama_cpp.llama_sampler_accept(g, t)
        one = _internals.LlamaTokenDataArray(n_vocab=1)
        (one.candidates_data.id[0],) = llama.tokenize(token, add_bos=False, special=False)
        one.candidates_data.logit[0] = 1.0
        llama_cpp.llama_sampler_apply(g, ctypes.byref(one.candidates))
        llama_cpp.llama_sampler_free(g)
        return bool(one.candidates_data.logit[0] > float("-inf"))

    assert allowed(grammar._grammar, b"\n")  # llama-cpp-python's own grammar
    assert not allowed(json_strings(grammar._grammar), b"\n")
    assert allowed(json_strings(grammar._grammar), b" def")


def test_the_default_threads_are_the_physical_cores_and_do_not_change_the_text(gguf_path) -> None:
    """``n_threads: null`` runs one thread per physical core (llama-cpp-python's own default,
    half the logical CPUs, ran one on a 2-core VM); the thread count is left out of the cache
    identity because the tokens do not depend on it, which this checks."""
    from gen.cores import physical_cores
    from gen.llm.llama_cpp import _LLAMAS

    msgs = [{"role": "user", "content": "Name three things a person does in a kitchen."}]
    texts = {}
    for threads in (None, 1):
        llm = make_llm(LlamaCppConfig(n_ctx=1024, n_threads=threads), None)
        texts[threads] = [llm.complete(msgs, seed=s, max_tokens=40) for s in (3, 4)]
        if threads is None:
            loaded = [v for k, v in _LLAMAS.items() if k[1:3] == (1024, physical_cores())]
            assert loaded and loaded[0].n_threads == physical_cores()
    assert texts[None] == texts[1]
