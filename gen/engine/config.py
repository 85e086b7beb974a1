"""The config tree Hydra composes, made from the pydantic configs: one definition per option.

Every option is defined once, as a field of a pydantic config (its type, bounds, default and
docstring). Hydra gets its nodes from there, through its ConfigStore: ``generator/<name>`` from
each registered generator's config, ``llm/<preset>`` and ``embedder/<preset>`` from the backend
configs. ``conf/config.yaml`` holds only the defaults list and Hydra's own settings. Pydantic
validates the composed result once; nothing here checks types or names, so Hydra never has a
second opinion on an option.

Why the ConfigStore rather than generated YAML: nothing to regenerate or keep in sync, and
a new generator's options reach Hydra by registering it.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ValidationError
from pydantic_core import to_jsonable_python

from gen.errors import ConfigError
from gen.llm import LlamaCppConfig, LlamaServerConfig, LLMConfig, OpenAIConfig
from gen.llm.embed import EmbedderConfig, ServerEmbedderConfig
from gen.llm.secrets import scrub

MISSING = "???"
GROUP_FIELDS = ("llm", "embedder")
"""Fields of every generator config that are Hydra config groups, chosen by ``llm=<preset>``."""

LLM_PRESETS: dict[str, tuple[type[BaseModel], dict[str, Any], str]] = {
    "smollm2": (LlamaCppConfig, {}, "the embedded SmolLM2-135M-Instruct (Q4_1) in process"),
    "llama_cpp": (
        LlamaCppConfig,
        {"model_path": MISSING},
        "any local GGUF in process: llm=llama_cpp llm.model_path=/path/model.gguf",
    ),
    "openai": (OpenAIConfig, {}, "any OpenAI-compatible server: llm.base_url=… llm.model=…"),
    "llama_server": (
        LlamaServerConfig,
        {},
        "llama.cpp's llama-server, started by gen ([server] extra)",
    ),
}
EMBEDDER_PRESETS: dict[str, tuple[type[BaseModel], dict[str, Any], str]] = {
    "minilm": (EmbedderConfig, {}, "the embedded all-MiniLM-L6-v2 (offline)"),
    "openai": (
        ServerEmbedderConfig,
        {},
        "any OpenAI-compatible embeddings server: embedder.base_url=… embedder.model=…",
    ),
}


def field_default(model: type[BaseModel], name: str) -> Any:
    """A field's default as Hydra holds it: JSON-able, ``???`` when required, or the
    interpolation a field names under ``json_schema_extra={"hydra": ...}`` (an env variable)."""
    field = model.model_fields[name]
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "hydra" in extra:
        return extra["hydra"]
    if field.is_required():
        return MISSING
    return to_jsonable_python(field.get_default(call_default_factory=True))


def node(
    model: type[BaseModel], overrides: dict[str, Any] | None = None, skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The defaults of ``model`` as a plain dict node (``overrides`` replace some)."""
    out = {name: field_default(model, name) for name in model.model_fields if name not in skip}
    out.update(overrides or {})
    return out


def register(name: str, config: type[BaseModel]) -> None:
    """Fill Hydra's ConfigStore with generator ``name``'s config (its pydantic class, the
    registry's: the truth at that moment) and the backend configs, each compose. Only that
    generator is loaded, so a broken plugin stops only its own runs."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(
        group="generator",
        name=name,
        node=node(config, skip=GROUP_FIELDS),
        package="_global_",
    )
    for preset, (model, over, _) in LLM_PRESETS.items():
        cs.store(group="llm", name=preset, node=node(model, over))
    for preset, (model, over, _) in EMBEDDER_PRESETS.items():
        cs.store(group="embedder", name=preset, node=node(model, over))


def preset_of(group: str, value: dict[str, Any]) -> str | None:
    """Which preset of ``group`` a (default) value is, for ``--help``."""
    presets = LLM_PRESETS if group == "llm" else EMBEDDER_PRESETS
    for name, (model, over, _) in presets.items():
        if node(model, over) == value:
            return name
    return None


def llm_preset(name: str) -> dict[str, Any]:
    """An ``llm=`` preset by name as a config dict, for options that list models
    (``models=[smollm2, {backend: openai, …}]`` in nocontext and scenarios)."""
    if name not in LLM_PRESETS:
        raise ValueError(
            f"models: no llm preset {name!r} (choose from {', '.join(LLM_PRESETS)}, or give a dict)"
        )
    model, over, _ = LLM_PRESETS[name]
    conf = node(model, over)
    missing = [k for k, v in conf.items() if v == MISSING]
    if missing:
        raise ValueError(
            f"models: the {name} preset needs {missing[0]}; give the model as a "
            f"dict instead ({{backend: {conf['backend']}, {missing[0]}: ...}})"
        )
    return conf


def _preset_or_fields(value: Any) -> Any:
    return llm_preset(value) if isinstance(value, str) else value


ModelChoice = Annotated[LLMConfig, BeforeValidator(_preset_or_fields)]
"""An option naming another model (a judge, a panel member): an ``llm=`` preset's name
(``smollm2``) or the backend's fields (``{backend: openai, base_url: …, model: …}``)."""


def validate_options(
    name: str, config: type[BaseModel], options: dict[str, Any], *, check_input: bool = True
) -> Any:
    """Generator ``name``'s validated ``config`` from option values (``llm`` / ``embedder`` as a
    preset name, a dict or a config object); every mistake is one :class:`ConfigError` naming
    the option. An ``input=`` that does not exist fails here too (``check_input``). What
    :func:`gen.engine.api.configure` and a run inside a run (the runner) ask, given the registry's
    config class."""
    data = dict(options)
    for group in ("llm", "embedder"):
        if isinstance(data.get(group), str):
            data[group] = preset(group, data[group])
    try:
        cfg: Any = config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(explain(e, name)) from None
    if check_input and isinstance(cfg.input, str):
        cfg.input_path()
    return cfg


def preset(group: str, name: str) -> dict[str, Any]:
    """An ``llm=`` / ``embedder=`` preset by name, as config data."""
    presets = LLM_PRESETS if group == "llm" else EMBEDDER_PRESETS
    if name not in presets:
        raise ConfigError(f"unknown choice {group}={name}; available {group}: {', '.join(presets)}")
    model, over, _ = presets[name]
    return {k: v for k, v in node(model, over).items() if v != MISSING}


BACKEND_TAGS = frozenset({"llama_cpp", "openai", "llama_server", "sentence_transformers"})
"""The ``backend`` values pydantic puts in an error's location (``llm.openai.model``): not part
of the option's name."""


def explain(e: ValidationError, name: str) -> str:
    """A config's validation errors as one line that names each option."""
    parts = []
    for err in e.errors():
        loc = ".".join(
            str(x)
            for x in err["loc"]
            if not str(x).startswith("function-") and x not in BACKEND_TAGS
        )
        msg = scrub(err["msg"].removeprefix("Value error, "))
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown option {loc!r} for {name} (gen {name} --help lists its options)")
            continue
        where = f"invalid value for {loc}: " if loc else "invalid config: "
        got = err.get("input")
        shown = not isinstance(got, dict) and scrub(repr(got)) == repr(got)
        parts.append(f"{where}{msg} (got {got!r})" if shown else f"{where}{msg}")
    return "; ".join(parts)
