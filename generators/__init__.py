"""Every generator module; importing this package fills the registry."""

from generators import digital, personas  # noqa: F401
