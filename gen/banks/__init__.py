"""The bank folder, as a format: its layout and pointer (:mod:`~gen.banks.store`), item ids
(:mod:`~gen.banks.identity`), the items a run folder contributes (:mod:`~gen.banks.batch`), and
the checks that a version is what its lock says (:mod:`~gen.banks.values`,
:mod:`~gen.banks.verify`). ``gen bank`` writes banks with these; ``gen review`` and the audit read
them with the same code, so an item's id and a version's verdict are the same everywhere.
"""
