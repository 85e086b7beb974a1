"""The items an audit reads, held out of memory: :class:`Items`, and views of some of them.

A bank of a million items with 600-word contexts is gigabytes of text; the checks read it a few
times each, in order, and keep what they count. So the items are written once, as the readers
stream them, to an anonymous spill file (one ``marshal`` record per item: the fields of
:class:`schemas.mcq.MCQ` and its normalised visible fields, computed once), and read back in order
or by index. In memory stay the columns the checks index without reading the file: the id, the
question type, the answer, the number of options, the group and the bank of each item.
"""

from __future__ import annotations

import marshal
import os
import tempfile
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any, overload

import numpy as np

from gen.generators.audit.text import visible_fields
from gen.schemas.mcq import MCQ

FIELDS = (
    "item_id",
    "question_type",
    "question",
    "options",
    "answer",
    "context",
    "group",
    "category",
    "origins",
    "visible",
    "privileged",
    "line",
)
"""The MCQ fields of a spilled record, in order; the normalised visible fields follow."""
BLOCK = 1 << 22
"""Bytes read at once when items are read in order."""
RECENT = 4096
"""Normalised visible fields kept of the items read last (what :meth:`Items.visible` asks for
while a check walks the items)."""
FEED_BLOCK = 1024
"""Records announced at once to a :class:`Follower` (:meth:`Items.feed`)."""


_ORDER = tuple(MCQ.model_fields)
_UNSPILLED = tuple(k for k in _ORDER if k not in FIELDS)
_PICK = itemgetter(
    *(FIELDS.index(k) if k in FIELDS else len(FIELDS) + _UNSPILLED.index(k) for k in _ORDER)
)
_DEFAULTS = tuple(MCQ.model_fields[k].get_default() for k in _UNSPILLED)
assert all(not MCQ.model_fields[k].is_required() for k in _UNSPILLED)
assert all(d is None or isinstance(d, (str, int)) for d in _DEFAULTS), "a default to copy"
assert not MCQ.__private_attributes__ and not MCQ.__pydantic_post_init__
assert MCQ.model_config.get("extra") != "allow"
_set = object.__setattr__


def _mcq(row: tuple[Any, ...]) -> MCQ:
    """A spilled record as the item ``MCQ.model_construct(**dict(zip(FIELDS, row)))`` makes (the
    same fields in the same order, the same fields set), built directly: pydantic's
    ``model_construct`` looks up every field's aliases and default, 10 µs an item against 2, and
    the checks read a million-item bank's items about fifteen times (``test_audit_scale`` holds
    the two equal)."""
    m = MCQ.__new__(MCQ)
    _set(m, "__dict__", dict(zip(_ORDER, _PICK(row[: len(FIELDS)] + _DEFAULTS), strict=True)))
    _set(m, "__pydantic_fields_set__", set(FIELDS))
    _set(m, "__pydantic_extra__", None)
    _set(m, "__pydantic_private__", None)
    return m


class Items(Sequence[MCQ]):
    """A bank's items in their order: the records in an anonymous temporary file (deleted when
    the object goes), a few columns in memory. Built by :meth:`append` (or from any iterable of
    items), then read: iteration streams, ``items[i]`` reads one record."""

    def __init__(self, items: Iterable[MCQ] = ()) -> None:
        self._file = tempfile.TemporaryFile(prefix="gen-audit-")  # noqa: SIM115 - lives as long as the object
        self._offsets = array("q", [0])
        self._building: dict[str, array] = {
            "qtype": array("i"),
            "answer": array("h"),
            "n_options": array("h"),
            "bank": array("h"),
        }
        self.ids: list[str] = []
        """Item ids, in order."""
        self.groups: list[str | None] = []
        """Item groups (clip, video, scenario), in order."""
        self._type_code: dict[str, int] = {}
        self._columns: dict[str, np.ndarray] = {}
        self._sealed = False
        self._recent: OrderedDict[int, list[tuple[str, str]]] = OrderedDict()
        self._feed: Any = None
        self._fed = 0
        for it in items:
            self.append(it)

    def feed(self, queue: Any) -> None:
        """Announce the records on ``queue`` as they are written (a
        ``multiprocessing.Queue``), for a :class:`Follower` in a process forked before the first
        :meth:`append`: each block of :data:`FEED_BLOCK` records' offsets, then None when sealed."""
        self._feed = queue

    # ----------------------------------------------------------------------------------- building

    def append(self, it: MCQ, bank: int = 0) -> None:
        """Add an item (of the ``bank``-th bank file)."""
        if self._sealed:
            raise RuntimeError("Items: append after reading")
        vis = visible_fields(it)
        row = (
            it.item_id,
            it.question_type,
            it.question,
            it.options,
            it.answer,
            it.context,
            it.group,
            it.category,
            it.origins,
            it.visible,
            it.privileged,
            it.line,
            vis,
        )
        data = marshal.dumps(row)
        self._file.write(data)
        self._offsets.append(self._offsets[-1] + len(data))
        b = self._building
        b["qtype"].append(self._type_code.setdefault(it.question_type, len(self._type_code)))
        b["answer"].append(-1 if it.answer is None else it.answer)
        b["n_options"].append(len(it.options))
        b["bank"].append(bank)
        self.ids.append(it.item_id)
        self.groups.append(it.group)
        if self._feed is not None and len(self.ids) - self._fed >= FEED_BLOCK:
            self._announce()

    def _announce(self) -> None:
        """The records written since the last announcement, flushed and announced."""
        n = len(self.ids)
        if n > self._fed:
            self._file.flush()
            self._feed.put(self._offsets[self._fed : n + 1].tobytes())
            self._fed = n

    def seal(self) -> Items:
        """Done appending (the first read does it): the columns become arrays, the file is
        flushed for reading (and, when fed, the last records announced, then the end)."""
        if not self._sealed:
            self._sealed = True
            self._file.flush()
            if self._feed is not None:
                self._announce()
                self._feed.put(None)
                self._feed = None
            self._columns = {
                k: np.array(v, dtype=np.int32 if k == "qtype" else np.int16)
                for k, v in self._building.items()
            }
            self._building = {}
        return self

    @property
    def types(self) -> list[str]:
        """The question types, in order of first appearance (:attr:`qtype` indexes it)."""
        return list(self._type_code)

    @property
    def qtype(self) -> np.ndarray:
        """Per item, its question type's index in :attr:`types`."""
        return self.seal()._columns["qtype"]

    @property
    def answer(self) -> np.ndarray:
        """Per item, the answer's index; -1 when it has none."""
        return self.seal()._columns["answer"]

    @property
    def n_options(self) -> np.ndarray:
        """Per item, its number of options."""
        return self.seal()._columns["n_options"]

    @property
    def bank(self) -> np.ndarray:
        """Per item, the index of the bank file it came from."""
        return self.seal()._columns["bank"]

    # ------------------------------------------------------------------------------------ reading

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, i: int) -> MCQ: ...

    @overload
    def __getitem__(self, i: slice) -> list[MCQ]: ...

    def __getitem__(self, i: int | slice) -> MCQ | list[MCQ]:
        if isinstance(i, slice):
            return [it for _, it in self.iter_at(range(len(self))[i])]
        n = len(self)
        if not -n <= i < n:
            raise IndexError("item index out of range")
        return self._item(self._row(i % n))

    def __iter__(self) -> Iterator[MCQ]:
        for _, it in self.iter_at(range(len(self))):
            yield it

    def iter_at(self, indices: Iterable[int]) -> Iterator[tuple[int, MCQ]]:
        """``(i, item)`` for each index, read in that order (runs of consecutive indices in
        blocks)."""
        for i, row in self._rows(indices):
            yield i, self._item(row)

    def visible(self, i: int) -> list[tuple[str, str]]:
        """Item i's visible fields, normalised (:func:`generators.audit.text.visible_fields`)."""
        got = self._recent.get(i)
        return got if got is not None else self._row(i)[-1]

    def type_of(self, i: int) -> str:
        return self.types[int(self.qtype[i])]

    def _item(self, row: tuple[Any, ...]) -> MCQ:
        return _mcq(row)

    def _read(self, start: int, size: int) -> bytes:
        self.seal()
        fd = self._file.fileno()
        parts = []
        while size > 0:
            got = os.pread(fd, size, start)
            if not got:
                raise OSError("the audit's spill file ended early")
            parts.append(got)
            start, size = start + len(got), size - len(got)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _row(self, i: int) -> tuple[Any, ...]:
        off = self._offsets
        return marshal.loads(self._read(off[i], off[i + 1] - off[i]))

    def _rows(self, indices: Iterable[int]) -> Iterator[tuple[int, tuple[Any, ...]]]:
        off = self._offsets
        run: list[int] = []
        for i in indices:
            i = int(i)
            if run and (i != run[-1] + 1 or off[i + 1] - off[run[0]] > BLOCK):
                yield from self._run(run)
                run = []
            run.append(i)
        if run:
            yield from self._run(run)

    def _run(self, run: list[int]) -> Iterator[tuple[int, tuple[Any, ...]]]:
        off = self._offsets
        base = off[run[0]]
        buf = memoryview(self._read(base, off[run[-1] + 1] - base))
        recent = self._recent
        for i in run:
            row = marshal.loads(buf[off[i] - base : off[i + 1] - base])
            if len(recent) >= RECENT:
                recent.popitem(last=False)
            recent[i] = row[-1]
            yield i, row

    def view(self, indices: Sequence[int] | range | np.ndarray) -> ItemView:
        """The items at ``indices`` as a sequence of items."""
        return ItemView(self, np.asarray(indices, dtype=np.int64))

    def subset(self, indices: Sequence[int] | np.ndarray) -> Subset:
        """The items at ``indices`` as a sequence of ``(index, item)``."""
        return Subset(self, np.asarray(indices, dtype=np.int64))

    def close(self) -> None:
        self._file.close()


class ItemView(Sequence[MCQ]):
    """Some items of an :class:`Items`, as a sequence of items (read when iterated)."""

    def __init__(self, items: Items, indices: np.ndarray) -> None:
        self.items, self.indices = items, indices

    def __len__(self) -> int:
        return len(self.indices)

    @overload
    def __getitem__(self, k: int) -> MCQ: ...

    @overload
    def __getitem__(self, k: slice) -> list[MCQ]: ...

    def __getitem__(self, k: int | slice) -> MCQ | list[MCQ]:
        if isinstance(k, slice):
            return [it for _, it in self.items.iter_at(self.indices[k])]
        return self.items[int(self.indices[k])]

    def __iter__(self) -> Iterator[MCQ]:
        for _, it in self.items.iter_at(self.indices):
            yield it


class Subset(Sequence[tuple[int, MCQ]]):
    """Some items of an :class:`Items` as ``(index, item)`` pairs, read when iterated
    (:attr:`generators.audit.data.AuditData.mcq`, a question type of ``by_type()``)."""

    def __init__(self, items: Items, indices: np.ndarray) -> None:
        self.items, self.indices = items, indices

    def __len__(self) -> int:
        return len(self.indices)

    @overload
    def __getitem__(self, k: int) -> tuple[int, MCQ]: ...

    @overload
    def __getitem__(self, k: slice) -> list[tuple[int, MCQ]]: ...

    def __getitem__(self, k: int | slice) -> tuple[int, MCQ] | list[tuple[int, MCQ]]:
        if isinstance(k, slice):
            return list(self.items.iter_at(self.indices[k]))
        i = int(self.indices[k])
        return i, self.items[i]

    def __iter__(self) -> Iterator[tuple[int, MCQ]]:
        return self.items.iter_at(self.indices)

    @property
    def ids(self) -> list[str]:
        """The item ids, without reading the items."""
        ids = self.items.ids
        return [ids[i] for i in self.indices.tolist()]


class Follower(Items):
    """The items of an :class:`Items` that another process is still writing, read once, in order,
    as they are announced (:meth:`Items.feed`): what a check started before the bank is read
    walks (the text check, in a process forked first). Only iteration and truth are served: it
    has no spill file or columns of its own."""

    _END = object()

    def __init__(self, items: Items, queue: Any) -> None:  # no Items.__init__: no file of its own
        self._fd = items._file.fileno()  # the writer's spill file, inherited by the fork
        self._queue = queue
        self._ahead: Any = None
        """An announcement taken before it was read (by ``bool``), or None."""
        self._ended = False

    def _take(self) -> bytes | None:
        if self._ahead is not None:
            got, self._ahead = self._ahead, None
            return None if got is self._END else got  # type: ignore[no-any-return]
        if self._ended:
            return None
        got = self._queue.get()
        self._ended = got is None
        return got  # type: ignore[no-any-return]

    def __bool__(self) -> bool:
        if self._ahead is None:
            got = self._take()
            self._ahead = self._END if got is None else got
        return self._ahead is not self._END

    def __len__(self) -> int:
        raise TypeError("Follower: the number of items is known only at the end")

    @overload
    def __getitem__(self, i: int) -> MCQ: ...

    @overload
    def __getitem__(self, i: slice) -> list[MCQ]: ...

    def __getitem__(self, i: int | slice) -> MCQ | list[MCQ]:
        raise TypeError("Follower: items are read in order only")

    def __iter__(self) -> Iterator[MCQ]:
        while (msg := self._take()) is not None:
            off = array("q")
            off.frombytes(msg)
            base, size = off[0], off[-1] - off[0]
            parts: list[bytes] = []
            while size > 0:
                got = os.pread(self._fd, size, off[-1] - size)
                if not got:
                    raise OSError("the audit's spill file ended early")
                parts.append(got)
                size -= len(got)
            buf = memoryview(parts[0] if len(parts) == 1 else b"".join(parts))
            for k in range(len(off) - 1):
                row = marshal.loads(buf[off[k] - base : off[k + 1] - base])
                yield _mcq(row)
