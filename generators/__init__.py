"""Every generator module; importing this package fills the registry."""

from generators import personas  # noqa: F401
