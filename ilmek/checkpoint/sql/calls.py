"""One-statement writes: a call of a function of the schema (Postgres's superstep and answer).

Where the schema has such functions (``WRITES_IN_ONE_STATEMENT``), a
superstep or a resume's answers are one call, a transaction by itself. A
function that meets anything unexpected raises :data:`LONG_WAY_SQLSTATE`,
which rolls the call back; the caller then takes the long way (several
statements in a transaction of ilmek's), which decides and says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ...dbapi import Session, Statement, sqlstate
from .. import _records
from ..holds import busy_error

__all__ = ["LONG_WAY_SQLSTATE", "FunctionCall", "LongWay", "call_arguments", "entry_rows", "id_list"]

LONG_WAY_SQLSTATE = "IL001"
"""What the schema's functions (superstep, answer) raise, rolling their call back, when the long way
must decide."""


class LongWay(Exception):
    """Internal: the one-statement write met something it does not handle; roll back, go the long way.

    ``first_try``: the call was sent once only, so nothing of it ever landed
    (a retry after a lost answer may meet the writes of a try that did).
    """

    def __init__(self, *, first_try: bool = False) -> None:
        super().__init__()
        self.first_try = first_try


def call_arguments(plain: Mapping[str, Any], json_texts: Mapping[str, str]) -> str:
    """A schema function's arguments as the one JSON object it takes.

    ``plain``: text, numbers, booleans and ``None``, encoded here;
    ``json_texts``: arguments that are JSON text already (lists, entries,
    stored values), spliced in as they are. Their names are the function's
    own, plain identifiers. One argument instead of twenty-five: a driver
    adapts each argument on its own, at a cost close to the rest of a
    superstep's (psycopg2: some 12,000 instructions an argument).
    """
    head = _records.dump_plain(plain)
    if not json_texts:
        return head
    return head[:-1] + "," + ",".join(f'"{name}":{text}' for name, text in json_texts.items()) + "}"


class FunctionCall:
    """One planned call of a function of the schema: the superstep or the answers (Postgres).

    ``call``: its arguments, one JSON object (:func:`call_arguments`). The
    function's row starts with ``busy``; ``committed`` gets the whole row
    once the call's transaction has committed.
    """

    def __init__(
        self,
        statement: Statement,
        thread_id: str,
        call: str,
        committed: Callable[[tuple[Any, ...]], None],
    ) -> None:
        self._statement = statement
        self._thread_id = thread_id
        self._call = call
        self._committed = committed
        self._tries = 0

    def run(self, session: Session) -> None:
        """Make the call; raises :class:`LongWay` (nothing written) where the long way must decide.

        ThreadBusyError when the run's first write finds the thread held.
        """
        if session.joined:
            raise LongWay  # inside the caller's transaction: the long way
        self._tries += 1
        try:
            [row] = session.query(self._statement, call=self._call)
        except Exception as error:
            if sqlstate(error) == LONG_WAY_SQLSTATE:
                # The function rolled its statement back: the thread moved,
                # the hold is gone, or a list grew past this checkpoint.
                raise LongWay(first_try=self._tries == 1) from None
            raise
        if row[0]:
            raise busy_error(self._thread_id)
        session.after_commit(lambda: self._committed(tuple(row)))


def entry_rows(rows: Iterable[tuple[Sequence[str], str]]) -> str:
    """A JSON array of journal rows for a schema function: each row's key parts, then its entry.

    Each entry is already JSON text: spliced into the array, not re-encoded.
    """
    return "[{}]".format(",".join(f"[{_records.dump_plain(list(keys))[1:-1]},{text}]" for keys, text in rows))


def id_list(text: Any) -> list[int]:
    """The ids a schema function returned as comma-separated text (``''``: none)."""
    return [int(part) for part in str(text).split(",") if part]
