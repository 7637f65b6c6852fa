"""The codec every checkpointer uses to store values: Python values to JSON text and back.

What belongs here: the stored format (the tags below), the registry of user classes
that may be stored, and the two walks that apply them. Nothing here does I/O; the
checkpointers decide where the text goes.

The package's modules: ``registry`` (which classes may be stored), ``encoding``
(values to tagged JSON) with ``refusals`` (why a value cannot be stored),
``decoding`` (tagged JSON back to values) and ``tags`` (what all of them
share). This one re-exports the public names.

Format
------
Plain JSON values are stored as themselves, so stored data stays readable and
queryable (also inside a Postgres JSONB column)::

    encode({"a": [1, "x"]})  ->  '{"a":[1,"x"]}'

Every other value becomes a *tag*: a JSON object whose ``"__ilmek__"`` key names the
kind and whose ``"v"`` key holds the payload, itself encoded by these same rules::

    (1, "a")                 {"__ilmek__":"tuple","v":[1,"a"]}
    {1: "a", None: 2}        {"__ilmek__":"dict","v":[[1,"a"],[null,2]]}
    float("nan")             {"__ilmek__":"float","v":"nan"}
    "a\\x00b"                 {"__ilmek__":"str","v":["a","b"]}
    b"hi"                    {"__ilmek__":"bytes","v":"aGk="}
    Decimal("1.10")          {"__ilmek__":"decimal","v":"1.10"}
    Point(x=1, y=2)          {"__ilmek__":"obj","type":"app.Point","v":{"x":1,"y":2}}
    Color.RED                {"__ilmek__":"enum","type":"app.Color","v":"red"}

The tags and their payloads:

``tuple``
    List of the items.
``dict``
    List of ``[key, value]`` pairs, in order. Used only when some key is not a str,
    contains NUL, or is ``"__ilmek__"`` itself; every other dict is a plain object.
    Hence any JSON object holding a ``"__ilmek__"`` key is a tag, never user data.
``set``, ``frozenset``
    List of the elements, sorted by their encoded text so that equal sets give
    equal text (elements of mixed, unorderable types are fine).
``str``
    A string that contains NUL (which Postgres JSONB rejects, even escaped), as the
    list of its NUL-separated parts.
``float``
    ``repr()`` of the float. Used for NaN and the infinities (not JSON), for
    ``-0.0`` and for magnitudes of at least 1e16: Postgres stores JSON numbers as
    ``numeric``, which drops the sign of zero and prints ``1e+16`` as an integer,
    so those would come back with another sign or as ``int``.
``int``
    Hexadecimal text, for integers of 4000 or more decimal digits (Python refuses
    to print or parse such integers as decimal by default). Smaller integers of
    any size are plain JSON numbers.
``bytes``, ``bytearray``
    Standard base64.
``datetime``, ``date``, ``time``
    ``isoformat()``, which keeps microseconds and the UTC offset. A datetime or
    time whose tzinfo is a ``zoneinfo.ZoneInfo`` also stores ``"zone"`` (its key);
    a ``datetime.timezone`` with a custom name stores ``"tzname"``; ``fold=1`` is
    stored as ``"fold":1``.
``timedelta``
    ``[days, seconds, microseconds]``.
``decimal``
    ``str()`` of the Decimal, which keeps its exponent (``"1.10"`` stays
    ``"1.10"``) and its NaN or infinity.
``uuid``
    The hyphenated hex form.
``obj``
    A registered attrs class or dataclass: ``"type"`` is its registry name and
    ``"v"`` maps attribute names to values.
``enum``
    A registered Enum member: ``"type"`` is its registry name and ``"v"`` its value.

Decisions worth knowing
-----------------------
* Types are matched exactly: a subclass of ``dict``, ``str``, ``int``, ``float``
  (``OrderedDict``, ``numpy.float64``, an unregistered ``StrEnum``...) is refused
  rather than stored as its base type, because it would come back as another type.
  The same holds for a subclass of a registered class: register it too.
* Time zones. A ``ZoneInfo`` comes back as ``ZoneInfo(key)`` (same wall time and
  fold) when this process finds that key in the system time zone database
  (``zoneinfo.TZPATH``); otherwise it comes back as a fixed-offset
  ``datetime.timezone`` with the offset it had when stored. The ``tzdata`` package
  is deliberately not consulted, because looking a key up there imports modules.
  Any other tzinfo (pytz, dateutil, your own) comes back as a fixed-offset
  ``datetime.timezone`` with the stored ``utcoffset()``; a ``time`` whose tzinfo
  gives no offset, and is not a ``ZoneInfo``, comes back naive.
* A registered class is rebuilt by calling it with keyword arguments (attrs
  aliases, so private ``_x`` fields work) for its ``init=True`` fields, then
  setting ``init=False`` fields with ``object.__setattr__``. Fields missing from
  stored data take the class's defaults; a stored field the class no longer has
  is an error rather than silently dropped data.
* Strings containing a lone surrogate (``"\\ud800"``) have no UTF-8 form, so
  they are stored tagged, the surrogates (and any NUL) as code point numbers
  between the plain runs of text, and come back as they were.
* Values nested more than 100 containers deep are refused (as are reference
  cycles, which are reported as such).
* Postgres JSONB does not keep the key order of an object, so a plain dict read
  back from a JSONB column is equal but may iterate in another order (a ``dict``
  tag's pairs keep theirs). Text columns keep the order.
* :func:`to_jsonable` shares unchanged lists and dicts with its input rather than
  copying them; do not mutate its result if you still use the input.

Security
--------
Decoding never imports a module named by the data (the first decimal, UUID,
bytes or zone it reads imports the standard library's ``decimal``, ``uuid``,
``base64`` or ``zoneinfo``), never looks anything up by name except in this
package's registry dict, and never uses pickle, eval or exec. Stored data that
names a type this process has not registered, or carries an unknown tag, raises
:class:`~ilmek.errors.SerializationError`; so does any malformed tag payload. Tools
that only show stored data (the CLI, the console) decode inside
:func:`showing_unregistered`, where a value of an unregistered class becomes an
:class:`Unregistered` placeholder holding its stored payload, never the class;
the console's pages also decode inside :func:`showing_damaged`, where a tag that
cannot be decoded becomes a :class:`Damaged` placeholder.
"""

from __future__ import annotations

from .decoding import decode, from_jsonable
from .encoding import dump_json as dump_json
from .encoding import encode, to_jsonable
from .placeholders import (
    Damaged,
    Unregistered,
    showing_damaged,
    showing_unregistered,
    shows_damaged,
    shows_unregistered,
)
from .registry import is_registered, register

# ``import ilmek`` imports none of base64, dataclasses, decimal, uuid and
# zoneinfo (together 8 ms). A value of one of their types exists only once its
# module is imported, so encoding looks for the module in ``sys.modules``
# instead of importing it to ask; decoding such a value imports it then.

__all__ = [
    "Damaged",
    "Unregistered",
    "decode",
    "encode",
    "from_jsonable",
    "is_registered",
    "register",
    "showing_damaged",
    "showing_unregistered",
    "shows_damaged",
    "shows_unregistered",
    "to_jsonable",
]
