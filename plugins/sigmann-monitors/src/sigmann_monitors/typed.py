"""Metrics records decoded straight into msgspec Structs, a type per event made from the file's own keys: the fast
path of :func:`sigmann_monitors.read_history`.

Decoded as dicts, a long run's 870,000 records cost a dict each, Python-level checks by the block, and a Python
call per value to pull each series out. Decoded into Structs, msgspec's C decoder makes the checks a record must
pass (its event one of three, its counters integers >= 0, its other values numbers or null, no key it was not
told of) and leaves each value in a slot that ``operator.attrgetter`` reads in C, so a series' values reach
NumPy without Python code per record. A run logs the values its run file asks for, so the keys are not known
before the file is read: they are learnt. A block with a key not seen before teaches the Structs its keys (a
plain decode of it), then decodes typed. A block the Structs still refuse (a record that fails the checks, or a
NaN, which JSON has no word for) is read by the dict path as before, which names a bad line, and its records are
turned into Structs (:meth:`Layouts.adopt`).
"""

from __future__ import annotations

import math
from operator import attrgetter
from typing import Annotated, Union

import msgspec
import numpy
from msgspec import UNSET, UnsetType
from msgspec.structs import astuple

#: The record kinds (a record's ``event``).
EVENTS = ("iteration", "epoch", "stop")
#: How each key is typed, beyond ``event``: a record's counters, a stop's reason, and otherwise a value.
_COUNT = Annotated[int, msgspec.Meta(ge=0)]
_TYPES = {"step": _COUNT, "epoch": _COUNT, "iteration": _COUNT, "stopped": str | None | UnsetType}
_VALUE = int | float | None | UnsetType
_PLAIN = msgspec.json.Decoder()  # any JSON: a block's keys, to learn


class Layouts:
    """The Struct type of each event's records as far as the file has been read, and what reads them."""

    def __init__(self):
        self.keys: dict[str, list[str]] = {event: [] for event in EVENTS}  # each event's keys, in order first seen
        self.fields: dict[str, str] = {}  # key -> its field's name (keys such as "validation.cost" are no names)
        self.kinds: dict[type, tuple[str, tuple]] = {}  # each Struct type made -> its event and keys (in order)
        self.newest: dict[str, type] = {}  # event -> the Struct type its records decode into now
        self.decoder = self.many = None  # a decoder of lines of them, and their list type: made once keys are learnt

    def decode(self, block: bytes) -> list | None:
        """``block``'s records as Structs, their keys learnt if new; None where one of them is not a record of
        the layouts (or JSON at all): then the dict path reads the block, and :meth:`adopt` takes its records."""
        rows = self._typed(block)
        if rows is None:
            try:
                plain = _PLAIN.decode_lines(block)
            except msgspec.MsgspecError:
                return None
            if self._learn(row for row in plain if isinstance(row, dict) and row.get("event") in EVENTS):
                rows = self._typed(block)
        return rows

    def adopt(self, rows: list[dict]) -> list:
        """``rows``, records the dict path read and checked, as Structs (their keys learnt if new): every record
        that passed its checks passes the Structs' too."""
        self._learn(rows)
        return msgspec.convert(rows, self.many) if rows else []

    def by_event(self, rows: list) -> dict[str, list]:
        """``rows`` by event, each event's in the order read."""
        groups = {event: [] for event in EVENTS}
        put = {kind: groups[event].append for kind, (event, _) in self.kinds.items()}
        for row in rows:
            put[type(row)](row)
        return groups

    def event(self, row) -> str:
        """``row``'s event."""
        return self.kinds[type(row)][0]

    def column(self, rows: list, key: str) -> numpy.ndarray:
        """The values of ``key`` in ``rows`` as floats: NaN where null or absent."""
        get = attrgetter(self.fields[key])
        try:
            return numpy.fromiter(map(get, rows), float, len(rows))  # null: NaN
        except TypeError:  # absent from some (UNSET)
            return numpy.array([math.nan if value is UNSET else value for value in map(get, rows)], float)

    def as_dict(self, row) -> dict:
        """``row`` as the dict the dict path would have read, its keys in the order first seen."""
        event, keys = self.kinds[type(row)]
        values = iter(astuple(row))
        pairs = [(key, event if key == "event" else next(values)) for key in keys]
        return {key: value for key, value in pairs if value is not UNSET}

    def _typed(self, block: bytes) -> list | None:
        try:
            return self.decoder.decode_lines(block) if self.decoder is not None else None
        except msgspec.MsgspecError:
            return None

    def _learn(self, rows) -> bool:
        """Learn the keys of ``rows`` (dicts, each with an event) not seen before; returns whether there were any."""
        known = {event: set(keys) for event, keys in self.keys.items()}
        learnt = set()  # events with new keys
        for row in rows:
            event = row["event"]
            if not known[event].issuperset(row):
                self.keys[event] += [key for key in row if key not in known[event]]
                known[event].update(row)
                learnt.add(event)
        if learnt:
            self._make(learnt)
        return bool(learnt)

    def _make(self, events) -> None:
        """A Struct type for the records of each of ``events`` with the keys learnt, and the decoder of them all."""
        for event in events:
            keys = self.keys[event]  # every record has the counters: a record without one is refused, and the
            keys += [key for key, rule in _TYPES.items() if rule is _COUNT and key not in keys]  # dict path names it
            names = {key: self.fields.setdefault(key, f"k{len(self.fields)}") for key in keys if key != "event"}
            fields = [(name, _COUNT) if _TYPES.get(key) is _COUNT else (name, _TYPES.get(key, _VALUE), UNSET)
                      for key, name in names.items()]
            kind = msgspec.defstruct(f"{event.title()}Record", fields, tag_field="event", tag=event, kw_only=True,
                                     rename={name: key for key, name in names.items()}, forbid_unknown_fields=True,
                                     gc=False)  # numbers and strings only: nothing for the cycle collector to do
            self.kinds[kind], self.newest[event] = (event, tuple(keys)), kind
        record = Union[tuple(self.newest.values())]
        self.many, self.decoder = list[record], msgspec.json.Decoder(record)
