"""Every generator: importing this package imports each module (or package) in it, which
registers its generator. Adding a generator adds a module here and touches nothing else."""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
