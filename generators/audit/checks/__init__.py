"""One module per audit check; importing this package registers them all.

Every module of this folder is imported (in file-name order); each registers its check with
:func:`generators.audit.registry.check`, whose ``order=`` fixes the run and report order.
"""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
