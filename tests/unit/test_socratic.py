"""socratic: real videos made here with PyAV, decoded for real, captioned by a stand-in
vision-language server that sees the frames (tests/vlm_server.py); the history bank built from
the run, shown by WAGIBench's own prompt builder."""

from __future__ import annotations

import io
import json
import sys
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("av", reason="PyAV is not installed: pip install -e '.[video]'")

from conftest import WAGIBENCH_MIXIN, read_jsonl, wagibench_loader, wagibench_prompt  # noqa: E402
from videos import make_empty_video, make_video  # noqa: E402
from vlm_server import StandIn  # noqa: E402

import gen.generators.socratic as soc  # noqa: E402
from gen.cli import main  # noqa: E402
from gen.errors import InputError  # noqa: E402
from gen.extras import MissingExtra
from gen.generators.socratic.video import (  # noqa: E402
    audio_wav,
    frames,
    probe,
    read_sidecar,
    targets,
)
from gen.llm.boundary import keyed  # noqa: E402

LOADER = WAGIBENCH_MIXIN.parent / "maestro_ob2.py"


@pytest.fixture(scope="module")
def video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("videos")
    return make_video(folder / "walk.mp4", 25.0)


def gen_run(*args: str) -> int:
    try:
        return main([*args, "progress=off", "cache_dir=null"])
    except SystemExit as e:
        return int(e.code or 0)


def test_clips_cut_at_clip_seconds_the_last_shorter() -> None:
    assert soc.clip_bounds(25.0, 10) == [(0.0, 10.0), (10.0, 20.0), (20.0, 25.0)]
    assert soc.clip_bounds(20.0, 10) == [(0.0, 10.0), (10.0, 20.0)]
    assert soc.clip_bounds(3.0, 10) == [(0.0, 3.0)]
    assert targets(0, 10, 4) == [1.25, 3.75, 6.25, 8.75]


def test_frames_are_decoded_evenly_scaled_and_encoded(video: Path) -> None:
    from vlm_server import dominant

    info = probe(video)
    assert (
        abs(info.duration - 25.0) < 0.3
        and info.has_audio
        and (info.width, info.height)
        == (
            320,
            240,
        )
    )
    shots = frames(video, 10.0, 20.0, 4, max_side=64)
    assert [round(f.t, 2) for f in shots] == [11.25, 13.75, 16.25, 18.75]
    assert {(f.width, f.height) for f in shots} == {(64, 48)}
    assert {dominant(f.data)[0] for f in shots} == {"green"}
    assert all(f.data_url().startswith("data:image/jpeg;base64,") for f in shots)
    png = frames(video, 20.0, 25.0, 2, max_side=32, image_format="png")
    assert {dominant(f.data) for f in png} == {("blue", (32, 24))}


def test_audio_is_16k_mono_wav_of_the_clip(video: Path) -> None:
    import wave

    wav = audio_wav(video, 10.0, 20.0)
    assert wav is not None
    with wave.open(io.BytesIO(wav)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2)
        assert abs(w.getnframes() / 16000 - 10.0) < 0.1


def test_image_parts_are_hashed_in_the_cache_key() -> None:
    url = "data:image/jpeg;base64," + "A" * 100_000
    req = {
        "messages": [
            {"role": "system", "content": "s"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "t"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            },
        ],
        "seed": 1,
    }
    key = json.dumps(keyed(req))
    assert "AAAA" not in key and "sha256:" in key and len(key) < 500
    other = json.dumps(
        keyed(
            {
                **req,
                "messages": [
                    req["messages"][0],
                    {
                        **req["messages"][1],
                        "content": [
                            {"type": "text", "text": "t"},
                            {"type": "image_url", "image_url": {"url": url + "B"}},
                        ],
                    },
                ],
            }
        )
    )
    assert other != key  # another image, another key
    assert keyed({"messages": [{"role": "user", "content": "plain"}]}) == {
        "messages": [{"role": "user", "content": "plain"}]
    }


def test_done_when_three_clips_captioned_merged_and_shown_by_wagibench(
    video: Path, tmp_path: Path
) -> None:
    """The issue's "done when": a folder with one 25 s video, clip_seconds=10, llm=openai at a
    stand-in: 3 records (0-10, 10-20, 20-25 s) with merged captions; image parts in the caption
    stages' requests, none in the merge's; history over the run shows the captions."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / video.name).write_bytes(video.read_bytes())
    run = tmp_path / "run"
    with StandIn() as srv:
        code = gen_run(
            "socratic",
            f"input={folder}",
            "clip_seconds=10",
            "frames_per_clip=4",
            "max_side=96",
            "llm=openai",
            f"llm.base_url={srv.url}",
            f"hydra.run.dir={run}",
        )
    assert code == 0
    recs = read_jsonl(run / "socratic.jsonl")
    assert [(r["start"], r["end"]) for r in recs] == [(0.0, 10.0), (10.0, 20.0), (20.0, 25.0)]
    for r, colour in zip(recs, ["red", "green", "blue"], strict=True):
        assert colour in r["merged"] and colour in r["caption_a"]["summary"]
        assert r["frames"] == 4 and max(r["frame_size"]) <= 96
    with_images = [c for c in srv.chats if c["images"]]
    merges = [c for c in srv.chats if not c["images"]]
    assert len(with_images) == 6 and len(merges) == 3  # two caption stages per clip, one merge
    assert all(c["images"] == 4 and max(max(s) for s in c["sizes"]) <= 96 for c in with_images)
    assert sorted(set(c["colours"][0] for c in with_images)) == ["blue", "green", "red"]
    assert all("Description A" in c["text"] for c in merges)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["counts"]["accepted"] == 3 and manifest["counts"]["rejected"] == 0
    assert set(manifest["stages"]) == {"caption_a", "caption_b", "merge"}
    assert manifest["socratic"]["frames_decoded"] == 12

    hist = tmp_path / "history"
    assert gen_run("history", f"input={run}", f"hydra.run.dir={hist}") == 0
    banks = json.loads((hist / "longitudinal_history.json").read_text())
    last = next(b for b in banks if b["meta"]["client_tag"] == "walk_c002")
    states = [h["world_state"]["context"] for h in last["longitudinal_history"]]
    assert sorted(states) == sorted([[recs[0]["merged"]], [recs[1]["merged"]]])
    assert last["x"]["world_state_ctx"] == [recs[2]["merged"]]
    if LOADER.is_file() and WAGIBENCH_MIXIN.is_file():
        mcq = [
            {
                "meta": {"client_tag": "walk_c002", "scenario": {"shortname": "walk_c002"}},
                "x": {
                    "client_tag": "walk_c002",
                    "context_window": {"start_s": 20.0, "end_s": 25.0},
                    "mcq_set": ["a", "b", "c", "d"],
                },
                "y": 0,
            }
        ]
        (tmp_path / "mcq.json").write_text(json.dumps(mcq))
        with redirect_stdout(io.StringIO()):
            (row,) = wagibench_loader()(
                str(tmp_path / "mcq.json"),
                str(tmp_path),
                longitudinal_history_path=str(hist / "longitudinal_history.json"),
            )
        prompt = wagibench_prompt()(row, "mcq")
        assert recs[0]["merged"] in prompt and recs[1]["merged"] in prompt


def test_the_judges_socratic_variants_show_a_socratic_runs_merged_captions(
    video: Path, tmp_path: Path
) -> None:
    """socratic run -> history -> judge kind=wagibench socratic=<run>: a row of a history bank's
    observation is shown the merged captions of its clips, one per line as WAGIBench's judge
    shows its world states; a WAGIBench-layout row naming the video (its client_tag) is shown
    those of its context window."""
    from judge_runs import judge_run

    folder = tmp_path / "in"
    folder.mkdir()
    (folder / video.name).write_bytes(video.read_bytes())
    run = tmp_path / "run"
    with StandIn() as srv:
        assert (
            gen_run(
                "socratic",
                f"input={folder}",
                "frames_per_clip=2",
                "max_side=64",
                "llm=openai",
                f"llm.base_url={srv.url}",
                f"hydra.run.dir={run}",
            )
            == 0
        )
    merged = [r["merged"] for r in read_jsonl(run / "socratic.jsonl")]
    hist = tmp_path / "history"
    assert gen_run("history", f"input={run}", f"hydra.run.dir={hist}") == 0
    banks = json.loads((hist / "longitudinal_history.json").read_text())
    last = next(b for b in banks if b["meta"]["client_tag"] == "walk_c002")
    goal = {"type": "search", "source": "world", "query_item": "bike", "query": "how to fix"}
    rows = [
        {
            "id": "observed",
            "group": f"{last['meta']['scenario']['shortname']}_{last['meta']['client_tag']}",
            "prediction": goal,
            "reference": goal,
        },
        {
            "id": "layout",
            "x": {"client_tag": "walk", "context_window": {"start_s": 0.0, "end_s": 20.0}},
            "meta": {"scenario": {"shortname": "walk"}, "structured_goal": goal},
            "prediction": goal,
        },
    ]
    preds = tmp_path / "predictions.jsonl"
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result, ctx, out = judge_run(
        tmp_path,
        lambda m, s: "<score>2</score>",
        kind="wagibench",
        input=str(preds),
        variant=["socratic", "socratic_reference"],
        socratic=str(run),
        candidate_family="openai",
        out="judge",
    )
    prompts = [c["messages"][-1]["content"] for c in ctx.llm.calls]
    assert len(prompts) == 4
    observed = [p for p in prompts if merged[2] in p]
    assert len(observed) == 2 and not any(merged[0] in p for p in observed)
    windowed = [p for p in prompts if f"{merged[0]}\n{merged[1]}" in p]
    assert len(windowed) == 2 and not any(merged[2] in p for p in windowed)
    assert result.manifest["counts"]["accepted"] == 2
    assert str(run / "socratic.jsonl") in result.manifest["inputs"]

    # a row the run has no clip of is one error naming the option
    preds.write_text(json.dumps({**rows[0], "group": "elsewhere_x", "id": "elsewhere"}) + "\n")
    with pytest.raises(InputError, match="socratic=.* has no clip of its observation"):
        judge_run(
            tmp_path,
            lambda m, s: "<score>2</score>",
            kind="wagibench",
            input=str(preds),
            variant=["socratic"],
            socratic=str(run),
            candidate_family="openai",
            out="judge2",
        )
    # a run of another generator is not a socratic run
    with pytest.raises(InputError, match="is a history run, not a socratic run"):
        judge_run(
            tmp_path,
            lambda m, s: "<score>2</score>",
            kind="wagibench",
            input=str(preds),
            variant=["socratic"],
            socratic=str(hist),
            candidate_family="openai",
            out="judge3",
        )


def test_two_models_disagree_and_the_merge_names_what_it_dropped(
    video: Path, tmp_path: Path
) -> None:
    with StandIn() as srv:
        cfg = soc.SocraticConfig(
            input=str(video),
            n=1,
            frames_per_clip=2,
            llm={"backend": "openai", "base_url": srv.url},
            stages={"caption_b": {"llm": {"model": "vlm-b"}}},
            cache_dir=None,
            progress="off",
        )
        from gen.engine.runner import run_config as run

        result = run("socratic", cfg, tmp_path / "run", quiet=True)
    assert result.accepted == 1
    (rec,) = read_jsonl(tmp_path / "run" / "socratic.jsonl")
    assert rec["dropped"] == ["Model vlm-b notes a faint shadow."]
    assert "shadow" not in rec["merged"]
    assert {c["model"] for c in srv.chats if c["images"]} == {"default", "vlm-b"}


@pytest.mark.parametrize(
    ("server", "stage", "reason"),
    [
        ({"invent": True}, "merge", "adds_facts"),
        ({"broken_caption": True}, "caption_a", "invalid_output"),
    ],
)
def test_a_merge_that_adds_facts_or_a_caption_that_is_not_json_is_a_typed_reject(
    video: Path, tmp_path: Path, server: dict[str, Any], stage: str, reason: str
) -> None:
    from gen.engine.runner import run_config as run

    with StandIn(**server) as srv:
        cfg = soc.SocraticConfig(
            input=str(video),
            n=1,
            frames_per_clip=2,
            attempts=1,
            llm={"backend": "openai", "base_url": srv.url, "attempts": 1},
            cache_dir=None,
            progress="off",
        )
        result = run("socratic", cfg, tmp_path / "run", quiet=True)
    assert (result.accepted, result.rejected) == (0, 1)
    (rej,) = read_jsonl(tmp_path / "run" / "rejects.jsonl")
    assert (rej["stage"], rej["reason"]) == (stage, reason)


def test_damaged_empty_and_silent_videos_are_typed_rejects(video: Path, tmp_path: Path) -> None:
    """With transcribe=true: a truncated file, a zero-byte file and a container without frames
    are rejects at decode, a video without audio a reject at transcribe; the good video's clips
    carry the stand-in's transcript of their tone, sent as 16 kHz mono WAV with the paper's
    decoding settings. accepted + rejected = units; no traceback."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a_good.mp4").write_bytes(video.read_bytes())
    (folder / "b_damaged.mp4").write_bytes(video.read_bytes()[:2000])
    (folder / "c_zero.mp4").write_bytes(b"")
    make_empty_video(folder / "d_empty.mp4")
    make_video(folder / "e_silent.mp4", 4.0, audio=False)
    run = tmp_path / "run"
    with StandIn() as srv:
        code = gen_run(
            "socratic",
            f"input={folder}",
            "frames_per_clip=2",
            "transcribe=true",
            "llm=openai",
            f"llm.base_url={srv.url}",
            f"speech.base_url={srv.url}",
            f"hydra.run.dir={run}",
        )
    assert code == 0
    manifest = json.loads((run / "manifest.json").read_text())
    counts = manifest["counts"]
    rejects = {
        r["detail"].split(":")[0].split(" ")[0]: r for r in read_jsonl(run / "rejects.jsonl")
    }
    assert (
        counts["accepted"] == 3 and counts["accepted"] + counts["rejected"] == counts["requested"]
    )
    assert rejects["c_zero"]["reason"] == "unreadable_video"
    assert rejects["d_empty"]["reason"] == "empty_video"
    assert rejects["e_silent"]["reason"] == "no_audio_track"
    assert rejects["e_silent"]["stage"] == "transcribe"
    damaged = [r for r in read_jsonl(run / "rejects.jsonl") if r["detail"].startswith("b_damaged")]
    assert damaged and {r["reason"] for r in damaged} <= {
        "unreadable_video",
        "damaged_video",
        "no_frames",
        "empty_video",
    }
    good = [r for r in read_jsonl(run / "socratic.jsonl") if r["video_id"] == "a_good"]
    assert len(good) == 3
    assert all(r["transcript"][0]["text"] == "a steady tone" for r in good)
    assert good[2]["transcript"][0]["end"] <= 25.0 and good[2]["transcript_source"] == "server"
    up = srv.uploads[0]
    assert (up["rate"], up["channels"], up["width"]) == (16000, 1, 2) and up["loud"]
    assert up["fields"]["beam_size"] == "5" and up["fields"]["temperature"] == "0"
    assert up["fields"]["temperature_inc"] == "0.2"
    obs = read_jsonl(run / "observations.jsonl")
    assert [o["client_tag"] for o in obs] == ["a_good_c000", "a_good_c001", "a_good_c002"]
    assert obs[0]["transcription"] == "a steady tone"


def test_sidecar_transcript_and_a_jsonl_list_with_windows(video: Path, tmp_path: Path) -> None:
    (tmp_path / "v.mp4").write_bytes(video.read_bytes())
    (tmp_path / "v.srt").write_text(
        "1\n00:00:02,000 --> 00:00:04,500\n<i>Where are my keys?</i>\n\n"
        "2\n00:00:12,000 --> 00:00:13,000\nOn the hook.\n",
        encoding="utf-8",
    )
    goal = {"type": "shop", "content": "a key hook"}
    (tmp_path / "list.jsonl").write_text(
        json.dumps(
            {
                "path": "v.mp4",
                "id": "morning",
                "participant": "p1",
                "environment": "hall",
                "script": "leave home",
                "recorded_at": "2025-03-01T08:00:00",
                "structured_goal": goal,
                "context_windows": [{"start_s": 0, "end_s": 20}],
            }
        )
        + "\n"
    )
    from gen.engine.runner import run_config as run

    with StandIn() as srv:
        cfg = soc.SocraticConfig(
            input=str(tmp_path / "list.jsonl"),
            frames_per_clip=2,
            llm={"backend": "openai", "base_url": srv.url},
            cache_dir=None,
            progress="off",
        )
        result = run("socratic", cfg, tmp_path / "run", quiet=True)
    assert result.accepted == 3
    recs = read_jsonl(tmp_path / "run" / "socratic.jsonl")
    assert [[ln["text"] for ln in r["transcript"]] for r in recs] == [
        ["Where are my keys?"],
        ["On the hook."],
        [],
    ]
    assert recs[0]["transcript_source"] == "sidecar:v.srt"
    (obs,) = read_jsonl(tmp_path / "run" / "observations.jsonl")
    assert obs["client_tag"] == "morning_w0" and obs["structured_goal"] == goal
    assert obs["world_state"] == f"{recs[0]['merged']} {recs[1]['merged']}"
    assert obs["transcription"] == "Where are my keys?\nOn the hook."
    (tl,) = read_jsonl(tmp_path / "run" / "timelines.jsonl")
    assert [n["t"] for n in tl["narrations"]] == [0.0, 10.0, 20.0]


def test_bad_sidecar_and_bad_list_rows_are_one_line_errors(video: Path, tmp_path: Path) -> None:
    bad = tmp_path / "x.srt"
    bad.write_text("1\n00:00:05,000 --> 00:00:01,000\nbackwards\n")
    with pytest.raises(InputError, match=r"x.srt:2: the cue ends"):
        read_sidecar(bad)
    (tmp_path / "list.jsonl").write_text('{"path": "../v.mp4"}\n')
    with pytest.raises(InputError, match=r"list.jsonl:1"):
        soc.plan(soc.SocraticConfig(input=str(tmp_path / "list.jsonl"), cache_dir=None))


def test_without_pyav_the_run_stops_naming_the_extra(
    video: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "av", None)
    with pytest.raises(MissingExtra, match=r"egogen\[video\]"):
        soc.plan(soc.SocraticConfig(input=str(video), cache_dir=None))
    code = gen_run("socratic", f"input={video}", f"hydra.run.dir={tmp_path / 'run'}")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and any("egogen[video]" in line for line in err)
    assert not (tmp_path / "run" / "manifest.json").exists()


def test_the_wagibench_video_chain_starts_from_a_folder_of_videos(
    video: Path, tmp_path: Path
) -> None:
    """chain=wagibench_video input=<folder>: captions, history banks over them, their audit."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / video.name).write_bytes(video.read_bytes())
    run = tmp_path / "chain"
    with StandIn() as srv:
        code = gen_run(
            "pipeline",
            "chain=wagibench_video",
            f"input={folder}",
            "llm=openai",
            f"llm.base_url={srv.url}",
            f"hydra.run.dir={run}",
        )
    assert code == 0
    steps = read_jsonl(run / "pipeline.jsonl")
    assert [(s["step"], s["exit_code"]) for s in steps] == [
        ("recordings", 0),
        ("history", 0),
        ("audit_history", 0),
    ]
    recs = read_jsonl(run / "recordings" / "socratic.jsonl")
    banks = read_jsonl(run / "history" / "history.jsonl")
    assert len(recs) == len(banks) == 3
    assert [len(b["supports"]) for b in banks] == [0, 1, 2]


def test_a_chain_that_needs_input_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = gen_run("pipeline", "chain=wagibench_video", f"hydra.run.dir={tmp_path / 'r'}")
    err = capsys.readouterr().err
    assert code == 2 and "option input takes the pipeline's input=, which is not given" in err


def test_the_schemas_hold_no_length_a_grammar_would_nest() -> None:
    """A maxLength of 2,000 becomes 2,000 nested grammar rules in llama.cpp, which crashed the
    embedded model's merge (a segfault); lengths are checked by code instead."""
    from gen.schemas.socratic import Caption, MergeDraft

    for model in (Caption, MergeDraft):
        text = json.dumps(model.model_json_schema())
        assert "maxLength" not in text and "maxItems" not in text
    with pytest.raises(ValueError, match="at most 2000 characters"):
        MergeDraft(merged="x" * 2001)
