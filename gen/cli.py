"""``python -m gen <generator> [hydra overrides]``: a thin shell around Hydra and the runner.

The overrides are composed and validated first (one clear line and exit 2 on any mistake,
before a model loads); then Hydra's own main runs the job, so run folders, ``.hydra/``,
``-m`` sweeps and launchers behave as Hydra documents them.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

from gen.errors import ConfigError, GenError
from gen.paths import CONF

USAGE = "usage: python -m gen <generator> [key=value ...]   (python -m gen --help)"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except GenError as e:
        return fail(str(e), e.exit_code)
    except KeyboardInterrupt:
        return fail("interrupted", 130)


def _main(argv: list[str]) -> int:
    import generators  # noqa: F401  (fills the registry)
    from gen.run import REGISTRY

    if not argv or argv[0] in ("-h", "--help", "help"):
        print_help()
        return 0
    name, rest = argv[0], argv[1:]
    if name not in REGISTRY:
        choices = ", ".join(sorted(REGISTRY))
        raise ConfigError(f"unknown generator {name!r}; choose one of: {choices}")
    if any(a in ("-h", "--help") for a in rest):
        print_generator_help(name)
        return 0
    rest = action_word(name, rest)
    flags = [a for a in rest if a.startswith("-")]
    overrides = normalize_overrides(name, [a for a in rest if not a.startswith("-")])
    validate(name, overrides)
    sys.argv = [sys.argv[0], *flags, f"generator={name}", *overrides]
    _hydra_main()
    return 0


def action_word(name: str, rest: list[str]) -> list[str]:
    """``python -m gen bank add …``: a bare word right after the generator name becomes
    ``action=<word>`` when the generator's config has an ``action`` field."""
    from gen.run import REGISTRY

    if (rest and "=" not in rest[0] and not rest[0].startswith(("-", "+", "~"))
            and "action" in REGISTRY[name].config.model_fields):
        return [f"action={rest[0]}", *rest[1:]]
    return rest


def fail(message: str, code: int) -> int:
    from rich.console import Console
    from rich.markup import escape

    # escape: a message's own brackets ("must be [low, high]") are text, not markup
    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(message)}")
    return code


# --------------------------------------------------------------------------- composition


def _compose(name: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base=None, job_name="gen"):
            return compose("config", overrides=[f"generator={name}", *overrides])
    finally:
        GlobalHydra.instance().clear()


_APPEND = re.compile(r"Could not append to config\. An item is already at '([^']+)'")


def normalize_overrides(name: str, overrides: list[str]) -> list[str]:
    """Accept ``+key=v``, ``key=v`` and ``++key=v`` alike for keys the config already has
    (Hydra itself refuses ``+`` for an existing key)."""
    out = list(overrides)
    for _ in range(len(out) + 1):
        try:
            _compose(name, _first_of_sweeps(out))
            return out
        except Exception as e:  # noqa: BLE001 - Hydra raises several types here
            m = _APPEND.search(str(e))
            if not m:
                return out  # validate() reports it
            key = m.group(1)
            out = [f"{o[1:]}" if o.startswith("+") and not o.startswith("++")
                   and o[1:].split("=", 1)[0] == key else o for o in out]
    return out


def _first_of_sweeps(overrides: list[str]) -> list[str]:
    """For validation, a sweep ``shard=0,1`` stands for its first value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    out = []
    for raw, o in zip(overrides, parsed, strict=True):
        if o.is_sweep_override():
            first = next(iter(o.sweep_string_iterator()))
            out.append(f"{o.get_key_element()}={first}")
        else:
            out.append(raw)
    return out


def validate(name: str, overrides: list[str]) -> Any:
    """Compose and validate; raise ConfigError naming the field and what is allowed."""
    try:
        parsed = _first_of_sweeps(overrides)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"cannot parse overrides: {_first_line(e)}") from None
    try:
        cfg = _compose(name, parsed)
    except Exception as e:  # noqa: BLE001
        raise ConfigError(_explain_compose_error(e, name)) from None
    settings = settings_from(name, cfg)
    if isinstance(settings.input, str):
        settings.input_path()  # a missing input= fails here, before any model loads
    return settings


def settings_from(name: str, cfg: Any) -> Any:
    """Hydra's composed config -> the generator's pydantic config."""
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue
    from pydantic import ValidationError

    import generators  # noqa: F401  (fills the registry, also in launcher worker processes)
    from gen.run import REGISTRY

    try:
        data = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except MissingMandatoryValue as e:
        raise ConfigError(f"{e.full_key} is required (for example {e.full_key}=...)") from None
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"config: {_first_line(e)}") from None
    data.pop("hydra", None)
    try:
        return REGISTRY[name].config.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_explain_validation(e)) from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


def _explain_compose_error(e: BaseException, name: str) -> str:
    text = str(e)
    m = re.search(r"Key '([^']+)' is not in struct", text) or re.search(
        r"Could not override '([^']+)'", text)
    if m:
        return (f"unknown override {m.group(1)!r} for generator {name!r} "
                f"(python -m gen {name} --help lists its options)")
    m = re.search(r"Could not find '([^']+)'.*?Available options in '([^']+)':\s*(.*?)(?:\nConfig search path:|$)",
                  text, re.S)
    if m:
        options = ", ".join(m.group(3).split())
        return f"unknown choice {m.group(1)!r}; available {m.group(2)}: {options}"
    cause = e.__cause__
    line = _first_line(e)
    if cause is not None and str(cause).strip():
        line = f"{line} {_first_line(cause)}"
    return line


def _explain_validation(e: Any) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"] if not str(x).startswith(("function-", "llama_cpp", "openai")))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown option {loc!r}")
            continue
        where = f"invalid value for {loc}: " if loc else "invalid config: "
        got = err.get("input")
        parts.append(f"{where}{msg} (got {got!r})" if not isinstance(got, dict) else f"{where}{msg}")
    return "; ".join(parts)


# --------------------------------------------------------------------------- hydra main


def _task(cfg: Any) -> None:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from gen.run import run

    hc = HydraConfig.get()
    name = hc.runtime.choices["generator"]
    out_dir = Path(hc.runtime.output_dir)
    try:
        settings = settings_from(name, cfg)
        resolved = OmegaConf.to_container(cfg, resolve=True)
        result = run(name, settings, out_dir, resolved=resolved)
    except GenError as e:
        sys.exit(fail(str(e), e.exit_code))
    except KeyboardInterrupt:
        sys.exit(fail("interrupted", 130))
    except Exception as e:
        if os.environ.get("GEN_DEBUG"):
            raise
        sys.exit(fail(f"unexpected {type(e).__name__}: {e} (GEN_DEBUG=1 shows the traceback)", 1))
    if result.exit_code:
        sys.exit(result.exit_code)


def _hydra_main() -> None:
    import hydra

    hydra.main(version_base=None, config_path=str(CONF), config_name="config")(_task)()


# --------------------------------------------------------------------------- help


def print_help() -> None:
    from gen.run import REGISTRY

    print(USAGE)
    print("\ngenerators:")
    width = max(len(n) for n in REGISTRY)
    for name in sorted(REGISTRY):
        print(f"  {name:<{width}}  {REGISTRY[name].help}")
    print("\ncommon overrides: seed= n= llm=smollm2|llama_cpp|openai|llama_server embedder= input= shard= num_shards=")
    print("                  hydra.run.dir=<folder>   -m ... hydra/launcher=joblib (sweeps)")
    print("example: python -m gen digital +persona_pool=50")


def _shown(value: Any) -> Any:
    """A default as ``--help`` prints it: a config group by its backend, other dicts inline."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(value, DictConfig | ListConfig):
        value = OmegaConf.to_container(value, resolve=False)
    if isinstance(value, dict) and "backend" in value:
        return value["backend"]
    if isinstance(value, dict | list):
        import json

        return json.dumps(value, separators=(",", ":"))
    return value


def print_generator_help(name: str) -> None:
    from gen.run import REGISTRY, CommonConfig

    g = REGISTRY[name]
    composed = _compose(name, [])
    print(f"python -m gen {name} [key=value ...]\n\n{g.help}\n")
    own = [k for k in g.config.model_fields if k not in CommonConfig.model_fields]
    for title, keys in ((f"{name} options", own), ("common options", list(CommonConfig.model_fields))):
        print(f"{title}:")
        for key in keys:
            field = g.config.model_fields[key]
            value = composed.get(key)
            shown = _shown(value)
            print(f"  {f'{key}={shown}':<28} {field.description or ''}")
        print()
