"""gen's own generators, one module (or package) each: ``gen.generators.<name>``.

Each is registered in ``pyproject.toml``'s ``gen.generators`` entry points, as a plugin's would
be; nothing imports this package to find them (``gen.engine.registry`` loads one when it is asked
for).
"""
