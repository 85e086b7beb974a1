"""The CLI shell: one-line errors with exit code 2 before any model loads, help, override forms."""

from __future__ import annotations

from pathlib import Path

import pytest

from gen.cli import normalize_overrides, validate, validate_jobs
from gen.errors import ConfigError, MissingInputError


def _one_line_error(proc, *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    line = lines[0]
    assert line.startswith("error:"), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


BAD_INPUT = [
    (["nope"], ["nope", "personas"]),  # names the bad generator and the valid choices
    (["personas", "foo=1"], ["foo"]),
    (["personas", "+foo=1"], ["foo"]),
    (["personas", "seed=-1"], ["seed", "-1"]),
    (["personas", "n=0"], ["n"]),
    (["personas", "progress=loud"], ["progress", "loud", "plain"]),
    (["digital", "+persona_pool=3"], ["persona_pool", "6"]),
    (["personas", "llm=bogus"], ["llm", "smollm2", "openai"]),
    (["personas", "llm.temperature=9"], ["llm.temperature"]),
    (["personas", "llm=llama_cpp"], ["llm.model_path"]),
    (["personas", "shard=2", "num_shards=2"], ["shard"]),
    (
        ["digital", "persona_pool=1e9"],
        ["persona_pool", "100000"],
    ),  # was unbounded: a billion-slot plan
    (["distractors", "--nosuchflag"], ["unknown flag '--nosuchflag'", "distractors", "--help"]),
    (["distractors", "-x"], ["unknown flag '-x'"]),
    (["distractors", "--n=3"], ["unknown flag '--n=3'"]),
]


@pytest.mark.parametrize(("args", "needles"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_exit_2(run_gen, tmp_path: Path, args, needles) -> None:
    proc = run_gen(*args, f"hydra.run.dir={tmp_path / 'run'}")
    _one_line_error(proc, *needles)
    # Failing before the run means no run folder and no model load.
    assert not (tmp_path / "run").exists()


def test_missing_input_file_is_one_line_and_exit_2(run_gen, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "pool.jsonl"
    proc = run_gen("personas", "n=2", f"input={missing}", f"hydra.run.dir={tmp_path / 'run'}")
    line = _one_line_error(proc, "input", "pool.jsonl")
    assert "no such file" in line
    assert not (tmp_path / "run").exists()


def test_help_lists_generators(run_gen) -> None:
    for flag in ("--help", "-h"):
        proc = run_gen(flag)
        assert proc.returncode == 0, proc.stderr
        assert "generators:" in proc.stdout
        listed = proc.stdout.split("generators:", 1)[1]
        assert "  personas  " in listed


@pytest.mark.parametrize("unbuffered", [True, False])
def test_help_into_a_closed_pipe_ends_quietly(unbuffered: bool) -> None:
    """``gen tom --help | head -1``: the reader is gone before gen writes; no traceback, 128 +
    SIGPIPE. Without PYTHONUNBUFFERED the help text sits in stdout's buffer and the write fails at
    the flush."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"} | (
        {"PYTHONUNBUFFERED": "1"} if unbuffered else {}
    )
    read, write = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gen", "tom", "--help"],
        stdout=write,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
        env=env,
    )
    os.close(write)
    os.close(read)  # before the child has imported anything, so its first write fails
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err.decode()) == (141, "")


def test_no_arguments_prints_usage(run_gen) -> None:
    proc = run_gen()
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: gen <generator>")


def test_generator_help_lists_options(run_gen) -> None:
    proc = run_gen("personas", "--help")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "personas options:" in out and "common options:" in out
    own = out.split("personas options:", 1)[1].split("common options:", 1)[0]
    common = out.split("common options:", 1)[1]
    for key in ("attempts=3", "draws=5", "bio_max_tokens=200"):
        assert key in own, key
    assert "persona_pool=" not in own  # the pool size is n (the old name moves with a warning)
    for key in (
        "seed=0",
        "n=50",
        "shard=0",
        "num_shards=1",
        "progress=auto",
        "llm=smollm2",
        "embedder=minilm",
    ):
        assert key in common, key
    # the cache dir shown is the one the environment chose
    assert str(Path(common.split("cache_dir=", 1)[1].split()[0])).endswith("cache")


def test_main_returns_exit_code_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    from gen.cli import main

    assert main(["personas", "seed=-1"]) == 2
    err = capsys.readouterr().err
    assert "seed" in err and len(err.strip().splitlines()) == 1
    assert main(["--help"]) == 0
    assert "personas" in capsys.readouterr().out


@pytest.mark.parametrize("form", ["+persona_pool=7", "persona_pool=7", "++persona_pool=7"])
def test_override_forms_validate(form: str) -> None:
    assert normalize_overrides([form]) == ["++persona_pool=7"]
    settings = validate("digital", [form])
    assert settings.persona_pool == 7


def test_group_choices_and_hydra_settings_are_left_as_they_are() -> None:
    assert normalize_overrides(["llm=openai", "hydra.run.dir=x", "~bands.similar", "+seed=3"]) == [
        "llm=openai",
        "hydra.run.dir=x",
        "~bands.similar",
        "++seed=3",
    ]
    settings = validate("personas", ["+seed=3", "+llm.top_p=0.5"])
    assert (settings.seed, settings.llm.top_p) == (3, 0.5)


def test_plus_on_an_unknown_key_is_refused_by_pydantic() -> None:
    with pytest.raises(ConfigError, match="foo"):
        validate("personas", ["+foo=1"])


def test_validate_values() -> None:
    settings = validate(
        "personas",
        ["n=3", "seed=5", "progress=off", "llm=openai", "llm.base_url=http://127.0.0.1:9/v1"],
    )
    assert (settings.n, settings.seed, settings.progress) == (3, 5, "off")
    assert settings.llm.backend == "openai"
    assert settings.llm.base_url == "http://127.0.0.1:9/v1"
    with pytest.raises(ConfigError, match="seed"):
        validate("personas", ["seed=-1"])
    with pytest.raises(ConfigError, match="attempts"):
        validate("personas", ["attempts=0"])


def test_sweeps_validate_every_job_before_the_first() -> None:
    jobs = validate_jobs(
        "personas", normalize_overrides(["seed=1,2", "shard=0,1", "num_shards=2"]), multirun=True
    )
    assert [(j.settings.seed, j.settings.shard) for j in jobs] == [(1, 0), (1, 1), (2, 0), (2, 1)]
    with pytest.raises(ConfigError, match="n"):  # the bad value is the second job's
        validate_jobs("personas", normalize_overrides(["n=1,abc"]), multirun=True)
    with pytest.raises(ConfigError, match="-m"):
        validate_jobs("personas", normalize_overrides(["n=1,2"]), multirun=False)


def test_a_bad_sweep_value_runs_no_job(run_gen, tmp_path: Path) -> None:
    proc = run_gen("personas", "-m", "n=1,abc", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    _one_line_error(proc, "n", "abc")
    assert not (tmp_path / "sweep").exists()


def test_missing_input_is_a_missing_input_error(tmp_path: Path) -> None:
    with pytest.raises(MissingInputError, match="input"):
        validate("personas", [f"input={tmp_path / 'absent.jsonl'}"])
    present = tmp_path / "present.jsonl"
    present.write_text("{}\n")
    assert validate("personas", [f"input={present}"]).input == str(present)


def test_unknown_choice_lists_only_the_choices(run_gen) -> None:
    from gen.engine.config import LLM_PRESETS

    line = _one_line_error(run_gen("personas", "llm=bogus"), "llm=bogus")
    choices = line.split("available llm:", 1)[1]
    assert sorted(c.strip() for c in choices.split(",")) == sorted(LLM_PRESETS)


RUN_DIRS = {
    "a_file": lambda t: t / "blocker",
    "under_a_file": lambda t: t / "blocker" / "sub" / "run",
    "interpolated_under_a_file": lambda t: f"{t / 'blocker'}/${{now:%Y-%m-%d}}",
    "in_proc": lambda t: (
        "/proc/gen-run"
    ),  # access() says a root process may write there; mkdir says no
}


@pytest.mark.parametrize("kind", list(RUN_DIRS))
def test_a_run_folder_that_cannot_be_made_is_one_line(run_gen, tmp_path: Path, kind: str) -> None:
    """Hydra made the folder after the checks and failed with a traceback (exit 1)."""
    if kind == "in_proc" and not Path("/proc/self").is_dir():
        pytest.skip("no /proc here")
    (tmp_path / "blocker").write_text("a file, not a folder")
    where = str(RUN_DIRS[kind](tmp_path))
    line = _one_line_error(
        run_gen("personas", "n=1", f"hydra.run.dir={where}"), "hydra.run.dir", where
    )
    assert "cannot make a run folder" in line
    sweep = _one_line_error(
        run_gen("personas", "-m", "n=1,2", f"hydra.sweep.dir={where}"), "hydra.sweep.dir"
    )
    assert "cannot make a run folder" in sweep
    assert (tmp_path / "blocker").read_text() == "a file, not a folder"


# --------------------------------------------------------------------------- sweeps


def test_a_sweep_runs_every_job_and_ends_with_one_line_per_job(run_gen, tmp_path: Path) -> None:
    """A job's non-zero exit (an audit's 1 on findings) stopped the sweep without a word: jobs 2
    and 3 never ran and the command exited 1. Now every job runs, each is reported, and the exit
    code is the largest of the jobs'."""
    fixtures = Path(__file__).resolve().parent.parent / "fixtures" / "audit"
    (tmp_path / "leak.jsonl").write_bytes((fixtures / "planted_leak.jsonl").read_bytes())
    (tmp_path / "clean.jsonl").write_bytes((fixtures / "clean.jsonl").read_bytes())
    sweep = tmp_path / "sweep"
    proc = run_gen(
        "audit",
        "-m",
        "input=leak.jsonl,clean.jsonl,clean.jsonl",
        "embeddings=false",
        "progress=off",
        "checks=[structure,leakage]",
        f"hydra.sweep.dir={sweep}",
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    assert [(sweep / str(k) / "manifest.json").is_file() for k in range(3)] == [True, True, True]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(("job ", "sweep:"))]
    assert lines == [
        f"job 0 (input=leak.jsonl): exit 1 [{sweep / '0'}]",
        f"job 1 (input=clean.jsonl): ok [{sweep / '1'}]",
        f"job 2 (input=clean.jsonl): ok [{sweep / '2'}]",
        "sweep: 3 jobs, 2 ok, 1 with a non-zero exit; exit 1 (the largest)",
    ]


def test_the_sweep_summary_takes_the_largest_exit_and_names_jobs_that_did_not_report() -> None:
    from gen.sweep import JobOutcome, summary

    jobs = [
        JobOutcome(0, ["generator=audit", "++input=a", "++n=3"], 1, None, "/s/0"),
        JobOutcome(1, ["generator=audit", "++input=b", "++n=3"], 2, "b: not valid JSON", "/s/1"),
        JobOutcome(2, ["generator=audit", "++input=c", "++n=3"], 0, None, "/s/2"),
    ]
    lines, code = summary(jobs, 3, ["input"])
    assert code == 2
    assert lines[:3] == [
        "job 0 (input=a): exit 1 [/s/0]",
        "job 1 (input=b): exit 2: b: not valid JSON [/s/1]",
        "job 2 (input=c): ok [/s/2]",
    ]
    one = [JobOutcome(0, ["generator=audit", "++input=c"], 0, None, "/s/0")]
    assert summary(one, 1, ["input"]) == (
        [
            "job 0 (input=c): ok [/s/0]",
            "sweep: 1 job, 1 ok, 0 with a non-zero exit; exit 0 (the largest)",
        ],
        0,
    )
    lines, code = summary(jobs[2:], 3, ["input"])
    assert code == 1 and "did not report" in lines[1] and "0, 1" in lines[1]
    lines, code = summary(jobs[:1], 3, ["input"], interrupted=True)
    assert code == 130 and lines[1] == "jobs not run (interrupted): 1, 2"


# --------------------------------------------------------------------------- output options


OUTPUT_SLIPS = [
    (["hydra.run.dir="], "hydra.run.dir is empty"),
    (["hydra.run.dir=."], "into the current folder"),
    (["hydra.run.dir=.."], "a folder above this one"),
    (["-m", "hydra.sweep.dir="], "hydra.sweep.dir is empty"),
    (
        ["-m", "hydra.sweep.dir=run", "hydra.sweep.subdir=../x"],
        "hydra.sweep.subdir=../x: must stay inside",
    ),
    (["hydra.output_subdir=../.."], "hydra.output_subdir=../..: must stay inside"),
    (["hydra.output_subdir=/tmp/x"], "hydra.output_subdir=/tmp/x: must stay inside"),
    (["hydra.output_subdir="], "hydra.output_subdir is empty"),
    (["hydra.job.chdir=true"], "hydra.job.chdir"),
    (["hydra.job.name=../../x"], "hydra.job.name=../../x: must stay inside"),
    (["hydra.job_logging.handlers.file.filename=x.log"], "a log file goes inside the run folder"),
    (
        ["hydra.job_logging.handlers.file.filename=${hydra.runtime.output_dir}/../x.log"],
        "must stay inside",
    ),
    (["cache_dir="], "cache_dir: empty (the cache would be made in the current folder)"),
    (["pool_dir="], "pool_dir is empty"),
]


@pytest.mark.parametrize(
    ("args", "needle"), OUTPUT_SLIPS, ids=[" ".join(a) for a, _ in OUTPUT_SLIPS]
)
def test_an_output_option_that_leaves_the_run_folder_is_refused_before_anything_is_written(
    run_gen, tmp_path: Path, args: list[str], needle: str
) -> None:
    """``hydra.run.dir=`` wrote the run into the current folder, ``cache_dir=`` made
    embeddings.sqlite there, ``hydra.output_subdir=../..`` wrote .hydra above the run folder and
    ``hydra.job.chdir=true`` read relative inputs from the run folder."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "goals.jsonl").write_bytes(
        (Path(__file__).resolve().parents[2] / "examples" / "goals.jsonl").read_bytes()
    )
    before = sorted(
        p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if "cache" not in p.parts
    )
    extra = (
        []
        if any(a.startswith(("hydra.run.dir", "-m")) for a in args)
        else [f"hydra.run.dir={work / 'run'}"]
    )
    name = "digital" if args == ["pool_dir="] else "distractors"
    proc = subprocess_in(run_gen, work, name, "input=goals.jsonl", "n=2", *args, *extra)
    _one_line_error(proc, needle)
    after = sorted(
        p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if "cache" not in p.parts
    )
    assert after == before


def subprocess_in(run_gen, cwd: Path, *args: str):
    """``run_gen`` with ``cwd`` as the current folder (its own runs in tmp_path)."""
    import subprocess
    import sys

    from conftest import gen_env

    env = gen_env(cwd.parent / "cache")
    return subprocess.run(
        [sys.executable, "-m", "gen", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
