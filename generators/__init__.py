"""Every generator module; importing this package fills the registry."""

from generators import audit, bank, digital, distractors, history, merge, nocontext, personas, scenarios, tom  # noqa: F401
