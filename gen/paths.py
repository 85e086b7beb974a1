"""Where the toolkit's own files live (prompts, configs, examples) in the source tree."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ROOT / "prompts"
CONF = ROOT / "conf"
EXAMPLES = ROOT / "examples"
