"""Every generator module; importing this package fills the registry."""

from generators import audit, digital, distractors, merge, personas  # noqa: F401
