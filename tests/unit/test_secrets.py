"""Secrets come from the environment and are never written: a run against a server that demands
a key, with the key only in the environment, leaves it in no file of the run folder (``.hydra/``
included), the log, the cache or the terminal; a key given on the command line, in any form, is
refused in one line that does not repeat it, before anything is written."""

from __future__ import annotations

import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import gen_env
from processes import requests, stand_in

from gen.errors import ConfigError
from gen.llm import OpenAIConfig
from gen.llm.secrets import is_secret_name, redact, refuse_on_command_line
from gen.paths import EXAMPLES

KEY = "sk-test-" + secrets.token_hex(20)


def gen(
    cwd: Path, cache: Path, *args: str, key: str | None = KEY, timeout: float = 300
) -> subprocess.CompletedProcess:
    env = gen_env(cache)
    env.pop("OPENAI_API_KEY", None)
    if key is not None:
        env["OPENAI_API_KEY"] = key
    return subprocess.run(
        [sys.executable, "-m", "gen", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def files_holding(root: Path, secret: str) -> list[str]:
    """Every file under ``root`` whose bytes hold ``secret``."""
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_a_key_in_the_environment_is_sent_and_written_nowhere(
    tmp_path: Path, cache_dir: Path
) -> None:
    run = tmp_path / "run"
    with stand_in(tmp_path, "--api-key", KEY) as (url, log):
        proc = gen(
            tmp_path,
            cache_dir,
            "personas",
            "n=2",
            "attempts=1",
            "draws=1",
            "widen=none",
            "llm=openai",
            f"llm.base_url={url}",
            "progress=off",
            f"hydra.run.dir={run}",
            "-v",
        )
        seen = requests(log, None)
    assert proc.returncode in (0, 1), proc.stderr  # 1: the stand-in's bios fail personas' checks
    assert [r["method"] for r in seen] == ["GET", "POST", "POST"] and all(
        r.get("status") != 401 for r in seen
    )
    written = {p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()}
    assert {
        ".hydra/config.yaml",
        ".hydra/hydra.yaml",
        ".hydra/overrides.yaml",
        "gen.log",
        "manifest.json",
        "rejects.jsonl",
    } <= written
    assert files_holding(tmp_path, KEY) == [] and files_holding(cache_dir, KEY) == []
    assert KEY not in proc.stdout + proc.stderr


def test_without_the_key_the_server_refuses_and_the_line_says_where_the_key_is_read(
    tmp_path: Path, cache_dir: Path
) -> None:
    with stand_in(tmp_path, "--api-key", KEY) as (url, _):
        proc = gen(
            tmp_path,
            cache_dir,
            "personas",
            "n=1",
            "llm=openai",
            f"llm.base_url={url}",
            "progress=off",
            f"hydra.run.dir={tmp_path / 'run'}",
            key=None,
        )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert (
        "/models: HTTP 401 (invalid API key: got (none)); $OPENAI_API_KEY is not set (the API key "
        "is "
        "read from the variable llm.api_key_env names)"
    ) in proc.stderr


def test_a_wrong_key_echoed_by_the_server_is_not_repeated(tmp_path: Path, cache_dir: Path) -> None:
    wrong = "sk-wrong-" + secrets.token_hex(20)
    env = gen_env(cache_dir) | {"MY_SERVER_KEY": wrong}
    with stand_in(tmp_path, "--api-key", KEY) as (url, _):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "gen",
                "personas",
                "n=1",
                "llm=openai",
                f"llm.base_url={url}",
                "llm.api_key_env=MY_SERVER_KEY",
                "progress=off",
                f"hydra.run.dir={tmp_path / 'run'}",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert proc.returncode == 2
    assert (
        "HTTP 401 (invalid API key: got Bearer ***); check the key in $MY_SERVER_KEY "
        "(llm.api_key_env)"
    ) in proc.stderr
    assert wrong not in proc.stdout + proc.stderr and files_holding(tmp_path, wrong) == []


CHAIN = """steps:
  - name: people
    generator: personas
    options: {{n: 1, llm: {{backend: openai, base_url: "http://127.0.0.1:9/v1", api_key: {key}}}}}
"""


@pytest.mark.parametrize(
    "args",
    [
        ["llm=openai", f"llm.api_key={KEY}"],
        ["llm=openai", f"+llm.api_key={KEY}"],
        ["llm=openai", f"++llm.api_key={KEY}"],
        ["-m", "llm=openai", f"llm.api_key={KEY},{KEY}x"],
        ["llm=openai", f"hydra.job.env_set.OPENAI_API_KEY={KEY}"],
        ["llm=openai", f"hydra.job.env_set={{OPENAI_API_KEY: {KEY}}}"],
        ["llm=openai", f"llm.base_url=http://me:{KEY}@127.0.0.1:9/v1"],
        ["llm=openai", f"llm.api_key_env={KEY}"],
        ["llm=openai", f"--api-key={KEY}"],
        ["llm=openai", f"llm.headers={{Authorization: Bearer {KEY}}}"],
    ],
    ids=[
        "key=",
        "+key=",
        "++key=",
        "sweep",
        "env_set",
        "env_set dict",
        "url password",
        "api_key_env",
        "flag",
        "headers",
    ],
)
def test_a_key_on_the_command_line_is_refused_unrepeated(
    tmp_path: Path, cache_dir: Path, args: list[str]
) -> None:
    proc = gen(tmp_path, cache_dir, "personas", "n=1", *args, key=None, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert "gen reads keys and tokens only from the environment" in proc.stderr
    assert (
        KEY not in proc.stderr
        and list(tmp_path.iterdir()) == []
        and files_holding(cache_dir, KEY) == []
    )


def test_a_key_in_a_models_dict_or_a_chain_file_is_refused_unrepeated(
    tmp_path: Path, cache_dir: Path
) -> None:
    bank = tmp_path / "bank.jsonl"
    bank.write_text("")
    proc = gen(
        tmp_path,
        cache_dir,
        "nocontext",
        f"input={bank}",
        f"models=[{{backend: openai, api_key: {KEY}}}]",
        key=None,
        timeout=120,
    )
    assert (
        proc.returncode == 2 and "api_key: secrets are not taken on the command line" in proc.stderr
    )
    assert KEY not in proc.stderr
    chain = tmp_path / "chain.yaml"
    chain.write_text(CHAIN.format(key=KEY))
    proc = gen(
        tmp_path,
        cache_dir,
        "pipeline",
        f"chain={chain}",
        f"hydra.run.dir={tmp_path / 'run'}",
        key=None,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "api_key: a secret is never a config value" in proc.stderr and KEY not in proc.stderr
    assert not (tmp_path / "run").exists()
    assert files_holding(tmp_path, KEY) == [str(chain)]  # only the user's own file


def test_help_shows_no_key(tmp_path: Path, cache_dir: Path) -> None:
    proc = gen(tmp_path, cache_dir, "personas", "--help", timeout=120)
    assert proc.returncode == 0 and KEY not in proc.stdout


# --------------------------------------------------------------------------- pure pieces


@pytest.mark.parametrize(
    "arg",
    [
        "llm.api_key=x",
        "+llm.api_key=x",
        "~llm.api_key=x",
        "llm.token=x",
        "llm.auth_token=x",
        "llm.password=x",
        "llm.headers={a: b}",
        "hydra.job.env_set.HF_TOKEN=x",
        "models=[{backend: openai, apikey: x}]",
        "x=hf_" + "a" * 30,
        "message=Bearer abc",
        "llm.base_url=https://user@host/v1",
    ],
)
def test_refused(arg: str) -> None:
    with pytest.raises(ConfigError) as info:
        refuse_on_command_line([arg])
    assert "x" * 30 not in str(info.value) and "abc" not in str(info.value)


@pytest.mark.parametrize(
    "arg",
    [
        "llm.api_key_env=VLLM_KEY",
        "llm.max_tokens=64",
        "n=5",
        "input=/data/auth/tokens.jsonl",
        "message=the token: budget went up",
        "llm.base_url=https://host:8443/v1",
        "hydra.run.dir=/tmp/x",
        "models=[smollm2, {backend: openai, model: m}]",
        "-m",
        "personas",
    ],
)
def test_not_refused(arg: str) -> None:
    assert refuse_on_command_line([arg]) is None  # no ConfigError: the argument passes


def _fields(model: Any, prefix: str = "") -> list[str]:
    from pydantic import BaseModel

    out = []
    for name, field in model.model_fields.items():
        out.append(prefix + name)
        for t in getattr(field.annotation, "__args__", ()) or (field.annotation,):
            if isinstance(t, type) and issubclass(t, BaseModel):
                out += _fields(t, f"{prefix}{name}.")
    return out


def test_no_option_holds_a_secret() -> None:
    """A future option that would hold a secret (``llm.auth_token``, ``llm.headers``) must be an
    ``*_env`` option naming a variable instead: no config field anywhere has a secret's name."""
    from gen.engine.registry import REGISTRY
    from gen.llm import LlamaCppConfig, LlamaServerConfig
    from gen.llm.embed import ServerEmbedderConfig

    names = [f for g in REGISTRY.values() for f in _fields(g.config)]
    names += [
        f
        for m in (LlamaCppConfig, OpenAIConfig, LlamaServerConfig, ServerEmbedderConfig)
        for f in _fields(m)
    ]
    assert len(names) > 200 and "api_key_env" in names
    assert [n for n in names if is_secret_name(n)] == []


def test_the_config_refuses_a_key_and_names_only_a_variable() -> None:
    with pytest.raises(ValueError, match="a secret is never a config value") as info:
        OpenAIConfig.model_validate({"api_key": KEY})
    assert KEY not in str(info.value)
    with pytest.raises(ValueError, match="must name an environment variable in capitals") as info:
        OpenAIConfig.model_validate({"api_key_env": "abc-" + KEY})
    assert KEY not in str(info.value)
    cfg = OpenAIConfig(api_key_env="VLLM_KEY")
    assert "VLLM_KEY" in cfg.model_dump_json() and 'api_key"' not in cfg.model_dump_json()


@pytest.mark.parametrize(
    "url",
    [
        "notaurl",
        "ftp://host/v1",
        "http://",
        "http://host:99999/v1",
        "http://host/v1?key=x",
        "http://u:p@host/v1",
    ],
)
def test_base_url_must_be_an_http_api_root(url: str) -> None:
    with pytest.raises(ValueError, match="base_url"):
        OpenAIConfig(base_url=url)


def test_the_cli_refuses_a_bad_base_url_in_one_line(run_gen, tmp_path: Path) -> None:
    proc = run_gen(
        "personas",
        "n=1",
        "llm=openai",
        "llm.base_url=notaurl",
        f"hydra.run.dir={tmp_path / 'run'}",
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "invalid value for llm.base_url: must be an http(s) URL" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_redact() -> None:
    assert redact(f"got Bearer {KEY}.", KEY) == "got Bearer ***." and redact("x", None, "") == "x"


# --------------------------------------------------------------------------- issue 43.3

LEAKS = [
    ["personas", "n=1", "llm=openai", "hydra.run.dir=runs/${oc.env:OPENAI_API_KEY}"],
    ["personas", "n=1", "llm=openai", "hydra.job.name=${oc.env:OPENAI_API_KEY}"],
    [
        "pipeline",
        f"chain={EXAMPLES / 'chains' / 'wagibench.yaml'}",
        "shards=2",
        "launcher=submitit_slurm",
        "launcher_options.partition=${oc.env:OPENAI_API_KEY}",
    ],
    ["personas", "n=1", "llm=openai", "llm.model=m-${oc.env:OPENAI_API_KEY}"],
]


@pytest.mark.parametrize("args", LEAKS, ids=["run dir", "job name", "launcher option", "model"])
def test_a_key_interpolated_into_the_config_is_refused_before_anything_is_written(
    tmp_path: Path, cache_dir: Path, args: list[str]
) -> None:
    """The command line holds no key, but ``${oc.env:…}`` puts it in the composed config: the
    check reads that (Hydra's own node and every launcher option included), so no folder name,
    ``.hydra`` file, manifest or launch log ever holds it."""
    proc = gen(tmp_path, cache_dir, *args, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
    assert "holds a key or a token once interpolated" in proc.stderr
    assert KEY not in proc.stderr and list(tmp_path.iterdir()) == []
    assert files_holding(cache_dir, KEY) == []


def test_a_key_echoed_in_a_good_reply_reaches_no_file(tmp_path: Path, cache_dir: Path) -> None:
    """A server that repeats the Authorization header in a 200 reply: the reply is redacted
    before it is parsed, so rejects, records, the log and the cache hold ``***``."""
    run = tmp_path / "run"
    with stand_in(tmp_path, "--api-key", KEY, "--misbehave", "echo") as (url, log):
        proc = gen(
            tmp_path,
            cache_dir,
            "personas",
            "n=2",
            "attempts=1",
            "draws=1",
            "llm=openai",
            f"llm.base_url={url}",
            "progress=off",
            f"hydra.run.dir={run}",
            "-v",
        )
        assert requests(log, None)
    assert proc.returncode in (0, 1), proc.stderr
    rejects = (run / "rejects.jsonl").read_text()
    assert "You sent me Bearer ***" in rejects  # the echo reached the rejects, redacted
    assert files_holding(tmp_path, KEY) == [] and files_holding(cache_dir, KEY) == []
    assert KEY not in proc.stdout + proc.stderr


def test_a_validation_error_does_not_repeat_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """``language: 'sk-…' is not one …`` named the key; the one line names the option only,
    whether the value is key-shaped or the environment's key in any shape."""
    import gen

    with pytest.raises(ConfigError) as info:
        gen.run("tom", language=KEY, n=1)
    assert "language" in str(info.value) and KEY not in str(info.value)
    plain = "plainsecretvalue123"
    monkeypatch.setenv("MY_API_KEY", plain)
    with pytest.raises(ConfigError) as info:
        gen.run("tom", language=plain, n=1)
    assert "language" in str(info.value) and plain not in str(info.value)


def test_refuse_in_config_and_redact_data() -> None:
    from gen.llm.secrets import redact_data, refuse_in_config

    with pytest.raises(ConfigError, match=r"^hydra\.run\.dir: holds a key") as info:
        refuse_in_config({"n": 1, "hydra.run.dir": f"runs/{KEY}"})
    assert KEY not in str(info.value)
    assert refuse_in_config({"n": 1, "input": "/data/auth/tokens.jsonl"}) is None
    reply = {"choices": [{"message": {"content": f"got Bearer {KEY}"}}], KEY: [KEY]}
    assert KEY not in repr(redact_data(reply, KEY))
