"""Checks on text a model wrote, no model of their own (but the tagger): the shared gates
(:mod:`gen.text.gates`), the surface forms the tagger reads (:mod:`gen.text.surface`,
:mod:`gen.text.tagging`), statements (:mod:`gen.text.statements`), content words
(:mod:`gen.text.words`) and the audit's text pass (:mod:`gen.text.textaudit`).

A layer of gen: it imports only the base below it (errors, paths, the run's clock, the schemas),
never a model, the run engine or a record kind (``tests/unit/test_imports.py``)."""
