"""Thread settings reach the libraries: ``embedder.threads`` sets torch's intra-op threads when
the embedder loads, ``llm.n_threads_batch`` / ``llm.n_threads`` reach llama.cpp's context.
Each check runs in a child process, since both settings are process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

PROBE = """
import json, torch
from gen.llm.embed import Embedder, EmbedderConfig
from gen.llm import LlamaCppConfig, make_llm
from gen.llm.llama_cpp import _LLAMAS
default = torch.get_num_threads()
e = Embedder(EmbedderConfig(threads={emb}), None)
v = e.encode(["a kitchen", "a garden"])
make_llm(LlamaCppConfig(n_ctx=1024, n_threads={gen}, n_threads_batch={batch}))
(llama,) = _LLAMAS.values()
print(json.dumps({{"default": default, "torch": torch.get_num_threads(), "shape": list(v.shape),
                  "n_threads": llama.context_params.n_threads,
                  "n_threads_batch": llama.context_params.n_threads_batch}}))
"""


def probe(emb: int | None, batch: int | None, gen: int | None = 1, **env: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(emb=emb, batch=batch, gen=gen)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_thread_settings_reach_torch_and_llama_cpp() -> None:
    got = probe(1, 1)
    assert got["torch"] == 1 and got["shape"] == [2, 384]
    assert got["n_threads"] == 1 and got["n_threads_batch"] == 1


def test_unset_thread_settings_keep_the_library_defaults() -> None:
    got = probe(None, None)
    assert got["torch"] == got["default"]
    assert got["n_threads_batch"] == os.cpu_count()  # llama-cpp-python's default: all cores


def test_a_sweep_s_jobs_side_by_side_take_their_share_of_the_cores() -> None:
    """Under a local launcher a sweep's jobs run at once (``GEN_LOCAL_JOBS``, set by the sweep):
    each unset thread count becomes the job's share of the physical cores, not every core."""
    from gen.cores import physical_cores

    share = max(1, physical_cores() // 2)
    got = probe(None, None, None, GEN_LOCAL_JOBS="2")
    assert got["torch"] == share and got["shape"] == [2, 384]
    assert got["n_threads"] == share and got["n_threads_batch"] == share
    got = probe(3, 2, 1, GEN_LOCAL_JOBS="2")  # what is set is kept
    assert (got["torch"], got["n_threads_batch"], got["n_threads"]) == (3, 2, 1)
