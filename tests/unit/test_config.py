"""Every file under conf/ composes through Hydra's compose API and validates with the
registered pydantic config."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

import generators  # noqa: F401  (fills the registry)
from gen.cli import settings_from
from gen.embed import EmbedderConfig
from gen.errors import ConfigError
from gen.llm import LlamaCppConfig, LlamaServerConfig, OpenAIConfig
from gen.paths import CONF
from gen.run import REGISTRY, CommonConfig

GENERATORS = sorted(p.stem for p in (CONF / "generator").glob("*.yaml"))
LLMS = sorted(p.stem for p in (CONF / "llm").glob("*.yaml"))
EMBEDDERS = sorted(p.stem for p in (CONF / "embedder").glob("*.yaml"))


@pytest.fixture
def hydra_conf() -> Iterator[None]:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base=None, job_name="test"):
        yield
    GlobalHydra.instance().clear()


def _compose(generator: str, *overrides: str):
    return compose("config", overrides=[f"generator={generator}", *overrides])


def test_conf_tree_is_what_the_tests_cover() -> None:
    """A new config group would be silently untested; make it fail here instead."""
    groups = sorted(p.name for p in CONF.iterdir() if p.is_dir())
    assert groups == ["embedder", "generator", "llm"]
    assert sorted(p.name for p in CONF.glob("*.yaml")) == ["config.yaml"]
    assert "personas" in GENERATORS and {"smollm2", "llama_cpp", "openai"} <= set(LLMS)
    assert EMBEDDERS


def test_every_generator_file_is_registered() -> None:
    """One name everywhere: conf/generator/<name>.yaml <-> registry key <name>."""
    assert set(GENERATORS) == set(REGISTRY)


def test_merge_config_requires_shard_folders(hydra_conf) -> None:
    with pytest.raises(ConfigError, match="input"):
        settings_from("merge", _compose("merge"))


# merge and tom need input= (tom composes with its fixture in test_tom.py), bank an action
# (test_bank.py)
@pytest.mark.parametrize("name", [g for g in GENERATORS if g not in ("merge", "tom", "bank")])
def test_generator_config_composes_and_validates(hydra_conf, name: str) -> None:
    cfg = _compose(name)
    settings = settings_from(name, cfg)
    assert isinstance(settings, REGISTRY[name].config)
    assert isinstance(settings, CommonConfig)
    # Every key the yaml sets reaches the pydantic config unchanged.
    own = OmegaConf.to_container(OmegaConf.load(CONF / "generator" / f"{name}.yaml"))
    dumped = settings.model_dump(mode="json")
    for key, value in own.items():
        assert key in type(settings).model_fields, f"{name}.yaml sets unknown key {key}"
        if key == "n" and (own.get("persona_pool") is not None or name == "distractors"):
            continue  # persona_pool overrides n by design; distractors sets n from its bank
        assert dumped[key] == value, f"{name}.yaml {key}={value!r} became {dumped[key]!r}"
    # the defaults list: llm=smollm2 (embedded model) and the embedded embedder
    assert settings.llm.backend == "llama_cpp" and settings.llm.model_path is None


def test_common_defaults_from_config_yaml(hydra_conf, cache_dir: Path) -> None:
    settings = settings_from("personas", _compose("personas"))
    assert settings.seed == 0
    assert settings.input is None
    assert (settings.shard, settings.num_shards) == (0, 1)
    assert settings.progress == "auto"
    # cache_dir follows GEN_CACHE_DIR (conftest points it at a temp folder)
    assert settings.cache_dir == str(cache_dir)


def test_cache_dir_falls_back_to_home_cache(hydra_conf, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEN_CACHE_DIR")
    assert settings_from("personas", _compose("personas")).cache_dir == "~/.cache/gen"


@pytest.mark.parametrize("llm", LLMS)
def test_llm_config_composes_and_validates(hydra_conf, llm: str, tmp_path: Path) -> None:
    overrides = [f"llm={llm}"]
    if llm == "llama_cpp":
        overrides.append(f"llm.model_path={tmp_path / 'model.gguf'}")
    settings = settings_from("personas", _compose("personas", *overrides))
    raw = OmegaConf.to_container(OmegaConf.load(CONF / "llm" / f"{llm}.yaml"))
    expected_type = {"llama_cpp": LlamaCppConfig, "openai": OpenAIConfig,
                     "llama_server": LlamaServerConfig}[raw["backend"]]
    assert type(settings.llm) is expected_type
    dumped = settings.llm.model_dump()
    assert set(raw) == set(dumped), "llm yaml and pydantic fields differ"
    for key, value in raw.items():
        if value != "???" and not (key == "concurrency" and llm == "llama_server"):
            assert dumped[key] == value, key  # (a server's concurrency is its slot count)


def test_llama_cpp_requires_model_path(hydra_conf) -> None:
    cfg = _compose("personas", "llm=llama_cpp")
    with pytest.raises(ConfigError, match=r"llm\.model_path") as info:
        settings_from("personas", cfg)
    assert "required" in str(info.value)
    ok = settings_from("personas", _compose("personas", "llm=llama_cpp", "llm.model_path=/m/x.gguf"))
    assert ok.llm.model_path == "/m/x.gguf"


def test_openai_schema_format_choices(hydra_conf) -> None:
    ok = settings_from("personas", _compose("personas", "llm=openai", "llm.schema_format=json_object"))
    assert ok.llm.schema_format == "json_object"
    with pytest.raises(ConfigError, match=r"llm\.schema_format"):
        settings_from("personas", _compose("personas", "llm=openai", "llm.schema_format=xml"))


@pytest.mark.parametrize("embedder", EMBEDDERS)
def test_embedder_config_composes_and_validates(hydra_conf, embedder: str) -> None:
    settings = settings_from("personas", _compose("personas", f"embedder={embedder}"))
    assert isinstance(settings.embedder, EmbedderConfig)
    raw = OmegaConf.to_container(OmegaConf.load(CONF / "embedder" / f"{embedder}.yaml"))
    assert raw == settings.embedder.model_dump()


def test_unknown_key_in_a_composed_config_is_rejected(hydra_conf) -> None:
    cfg = _compose("personas", "+llm.colour=red")
    with pytest.raises(ConfigError, match="colour"):
        settings_from("personas", cfg)


def test_every_config_field_is_documented() -> None:
    """STYLE 4: every field has a one-line docstring (it is what --help prints)."""
    models = [*(g.config for g in REGISTRY.values()), LlamaCppConfig, OpenAIConfig, EmbedderConfig]
    missing = [f"{m.__name__}.{k}" for m in models for k, f in m.model_fields.items()
               if k != "backend" and not f.description]
    assert missing == []
