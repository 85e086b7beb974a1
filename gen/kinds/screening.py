"""``screening``: a ``nocontext`` run's per-item blind results. Not bank items themselves: the
items the screening kept (``kept/``, one file per input file, as they were) are, each of its own
kind."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from gen.kinds import Kind
from gen.schemas.nocontext import NocontextRecord

if TYPE_CHECKING:
    from gen.engine.runfolder import RunFolder

KEPT = "kept"
"""The folder of a screening run holding the items it kept."""


class Screening(Kind):
    def kept(self, folder: Path) -> list[Path]:
        """The kept item files of a screening run folder (or of its ``kept/`` folder itself)."""
        run = folder.parent if folder.name == KEPT else folder
        if not self.declared(run):
            return []
        kept = run / KEPT
        if not kept.is_dir():
            return []
        return sorted(p for p in kept.iterdir() if p.suffix in (".jsonl", ".csv"))

    def find(self, folder: Path) -> list[Path]:
        return self.kept(folder)

    def item_files(self, run: RunFolder) -> list[Path]:
        return self.kept(run.path)


SCREENING = Screening(
    name="screening",
    record=NocontextRecord,
    files=("nocontext.jsonl",),
    source_format="nocontext_record",
    bank=False,
    view="screening",
    noun="a nocontext result",
    help="screening: per-item results of asking models without the context (nocontext).",
)
KINDS = (SCREENING,)
