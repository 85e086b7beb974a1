"""socratic's merge on the embedded model (integration): the captions come from the stand-in
vision-language server, the merge from the real GGUF; whatever the tiny model writes, the clip is
a record whose merge passed the overlap check, or a typed reject."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("av", reason="PyAV is not installed: pip install -e '.[video]'")

from videos import make_video  # noqa: E402
from vlm_server import StandIn  # noqa: E402

import gen.generators.socratic as soc  # noqa: E402
from gen.engine.runner import run_config as run  # noqa: E402

pytestmark = pytest.mark.integration


def test_the_embedded_model_merges_two_captions(tmp_path: Path) -> None:
    video = make_video(tmp_path / "v.mp4", 6.0, fps=2, size=(96, 72))
    with StandIn() as srv:
        vlm = {"backend": "openai", "base_url": srv.url, "model": "vlm-a"}
        cfg = soc.SocraticConfig(
            input=str(video),
            frames_per_clip=2,
            clip_seconds=6,
            attempts=2,
            stages={
                "caption_a": {"llm": vlm},
                "caption_b": {"llm": {**vlm, "model": "vlm-b"}},
            },
            cache_dir=None,
            progress="off",
        )
        result = run("socratic", cfg, tmp_path / "run", quiet=True)
    assert result.accepted + result.rejected == 1
    assert all(not c["images"] for c in srv.chats) is False  # the captions went to the stand-in
    assert len([c for c in srv.chats if c["images"]]) == 2
    assert not [c for c in srv.chats if not c["images"]]  # the merge did not
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["stages"]["merge"] != manifest["stages"]["caption_a"]
    if result.accepted:
        (rec,) = [json.loads(x) for x in (tmp_path / "run" / "socratic.jsonl").open()]
        assert rec["merged"] and rec["novel_share"] <= cfg.max_novel
    else:
        (rej,) = [json.loads(x) for x in (tmp_path / "run" / "rejects.jsonl").open()]
        assert rej["stage"] == "merge" and rej["reason"]
