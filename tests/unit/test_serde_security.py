"""ilmek.serde against forged data: a type tag never imports or runs anything; only the registry names."""

from __future__ import annotations

import ast
import base64
import decimal
import importlib.util
import inspect
import sys
import uuid
from pathlib import Path

import attrs
import pytest

from ilmek import serde
from ilmek.errors import SerializationError
from ilmek.serde.decoding import MAX_KEYS_PER_HASH, _check_hashes, _Malformed
from tests.support.serde_values import STORED, forged, recording_imports

# --------------------------------------------------------------------------- security


@pytest.fixture
def trap_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """An importable module, never imported yet, that leaves a file behind if it is."""
    module_name = f"ilmek_trap_{uuid.uuid4().hex}"
    marker = tmp_path / "imported"
    (tmp_path / f"{module_name}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\nclass Evil:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert importlib.util.find_spec(module_name) is not None
    assert module_name not in sys.modules
    return module_name, marker


@pytest.mark.parametrize("tag", ["obj", "enum"])
def test_forged_type_naming_an_importable_module_imports_nothing(
    tag: str, trap_module: tuple[str, Path]
) -> None:
    """A forged tag naming a real, importable module's class neither imports nor runs it."""
    module_name, marker = trap_module
    text = forged(tag, {}, type=f"{module_name}.Evil")
    with recording_imports() as imports, pytest.raises(SerializationError) as caught:
        serde.decode(text)
    assert (False, False) == (module_name in sys.modules, marker.exists())
    assert [] == imports
    assert f"{module_name}.Evil" == caught.value.type_name
    assert "not registered in this process" in str(caught.value)


@pytest.mark.parametrize(
    "type_name",
    [
        "os.system",
        "subprocess.Popen",
        "collections.OrderedDict",
        "builtins.eval",
        "antigravity.geohash",
        "this.s",
        "pickle.loads",
    ],
)
@pytest.mark.parametrize("tag", ["obj", "enum"])
def test_forged_type_naming_a_real_class_is_refused(tag: str, type_name: str) -> None:
    """Forged types naming real callables are refused without any import or lookup."""
    never_imported = [name for name in ("antigravity", "this") if name not in sys.modules]
    assert ["antigravity", "this"] == never_imported  # importing them has side effects
    text = forged(tag, {"args": ["touch", "/tmp/ilmek-pwned"]}, type=type_name)
    with recording_imports() as imports, pytest.raises(SerializationError) as caught:
        serde.decode(text)
    assert [] == imports
    assert (STORED, type_name) == (caught.value.where, caught.value.type_name)
    assert ["antigravity", "this"] == [name for name in never_imported if name not in sys.modules]


def test_forged_type_inside_plain_data_is_refused(trap_module: tuple[str, Path]) -> None:
    """A forged tag deep inside ordinary-looking data is found and refused."""
    module_name, marker = trap_module
    payload = {
        "messages": [
            {"role": "user", "content": {"__ilmek__": "obj", "type": f"{module_name}.Evil", "v": {}}}
        ]
    }
    with pytest.raises(SerializationError, match="not registered in this process"):
        serde.from_jsonable(payload)
    assert (False, False) == (module_name in sys.modules, marker.exists())


def test_unknown_zone_key_imports_nothing() -> None:
    """A zone key missing from the system database does not fall back to importing tzdata.

    The standard library's ``zoneinfo`` itself is the one import allowed: ilmek
    loads it the first time a stored zone is read, whatever the key.
    """
    text = forged("datetime", "2024-01-01T00:00:00+00:00", zone="Nowhere/Atlantis")
    with recording_imports() as imports:
        serde.decode(text)
    assert [] == [name for name in imports if name != "zoneinfo"]


SERDE_SOURCES = sorted(Path(inspect.getfile(serde)).parent.glob("*.py"))


def test_serde_is_read_from_every_module_of_its_package() -> None:
    """The check below reads the whole package (a split module could not slip past it)."""
    assert {"__init__.py", "encoding.py", "decoding.py", "registry.py"} <= {p.name for p in SERDE_SOURCES}


@pytest.mark.parametrize("source", SERDE_SOURCES, ids=lambda p: p.name)
def test_serde_source_uses_no_code_loading_facilities(source: Path) -> None:
    """No module of ilmek.serde imports pickle/importlib/marshal or calls eval/exec/__import__."""
    tree = ast.parse(source.read_text())
    imported: set[str] = set()
    bare_calls: set[str] = set()
    method_calls: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            bare_calls.add(node.func.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method_calls.add(node.func.attr)
    forbidden_modules = {"pickle", "marshal", "importlib", "shelve", "copyreg", "pydoc", "dill"}
    assert set() == imported & forbidden_modules
    assert set() == bare_calls & {"eval", "exec", "compile", "__import__"}
    assert set() == method_calls & {"import_module", "__import__", "locate", "find_class"}


def test_decoding_uses_only_the_registry_for_names() -> None:
    """A class registered under a name is found; the same class by its import path is not."""
    unique = f"aliased-{uuid.uuid4().hex}"

    @attrs.frozen
    class Aliased:
        value: int

    serde.register(Aliased, name=unique)
    by_registry = serde.decode(forged("obj", {"value": 1}, type=unique))
    assert Aliased(1) == by_registry
    with pytest.raises(SerializationError, match="not registered in this process"):
        serde.decode(forged("obj", {"value": 1}, type=f"{Aliased.__module__}.{Aliased.__qualname__}"))


def test_base64_payload_is_validated_strictly() -> None:
    """Non-alphabet characters in a bytes payload are an error, not silently dropped."""
    assert b"hi" == serde.decode(forged("bytes", base64.b64encode(b"hi").decode()))
    with pytest.raises(SerializationError):
        serde.decode(forged("bytes", "aG k="))


def test_decimal_garbage_is_refused_even_without_the_trap() -> None:
    """A caller's decimal context without the InvalidOperation trap cannot turn garbage into NaN."""
    with decimal.localcontext() as context:
        context.traps[decimal.InvalidOperation] = False
        with pytest.raises(SerializationError):
            serde.decode(forged("decimal", "garbage"))


# --------------------------------------------------------------------------- hash flooding

# Every multiple of 2**61 - 1 hashes to 0: a set of them is built in quadratic time.
_HASH_MODULUS = 2**61 - 1


def _colliding(count: int) -> list[int]:
    """``count`` distinct integers that all share one hash value."""
    return [index * _HASH_MODULUS for index in range(1, count + 1)]


class _CountedKey:
    """A key whose hash is chosen and whose comparisons are counted in ``compared``."""

    compared = 0

    def __init__(self, number: int, hash_value: int) -> None:
        self.number = number
        self.hash_value = hash_value

    def __hash__(self) -> int:
        return self.hash_value

    def __eq__(self, other: object) -> bool:
        _CountedKey.compared += 1
        return isinstance(other, _CountedKey) and other.number == self.number


def _comparisons_to_check(keys: list[_CountedKey]) -> tuple[int, Exception | None]:
    """How many key comparisons the hash check made on ``keys``, and what it raised."""
    _CountedKey.compared = 0
    try:
        _check_hashes(keys)
    except Exception as error:
        return _CountedKey.compared, error
    return _CountedKey.compared, None


@pytest.mark.parametrize("tag", ["set", "frozenset", "dict"])
def test_keys_that_share_one_hash_are_refused_before_the_value_is_built(tag: str) -> None:
    """20,000 colliding ints (half a megabyte) are refused as malformed, naming the cause."""
    keys = _colliding(20_000)
    payload = [[key, None] for key in keys] if tag == "dict" else keys
    text = forged(tag, payload)
    assert len(text) > 450_000
    with pytest.raises(SerializationError, match="share one hash value"):
        serde.decode(text)


def test_the_hash_check_compares_each_key_at_most_a_bounded_number_of_times() -> None:
    """Linear, counted rather than timed: n colliding keys cost at most MAX_KEYS_PER_HASH comparisons each.

    Building a set of them would cost n²/2 (200 million for 20,000); the check stops at the limit.
    """
    count = 20_000
    colliding = [_CountedKey(number, hash_value=0) for number in range(count)]
    compared, raised = _comparisons_to_check(colliding)
    assert isinstance(raised, _Malformed)
    assert compared <= MAX_KEYS_PER_HASH * MAX_KEYS_PER_HASH

    spread = [_CountedKey(number, hash_value=number) for number in range(count)]
    assert _comparisons_to_check(spread) == (0, None)

    # Repeats of one key and a crowd just under the limit pass, with comparisons bounded per key.
    repeats = [_CountedKey(7, hash_value=0) for _ in range(count)]
    compared, raised = _comparisons_to_check(repeats)
    assert raised is None
    assert compared <= count * MAX_KEYS_PER_HASH


def test_ordinary_sets_and_dicts_of_the_same_size_still_round_trip() -> None:
    """20,000 big ints with distinct hashes, in a set, a frozenset and as dict keys, decode as they were."""
    keys = [10**22 + index for index in range(20_000)]
    for value in (set(keys), frozenset(keys), dict.fromkeys(keys, "x")):
        assert value == serde.decode(serde.encode(value))


def test_a_few_colliding_keys_and_repeated_keys_still_decode() -> None:
    """The limit is on distinct keys per hash: 16 colliding keys pass, and so do 20,000 repeats of one."""
    few = _colliding(MAX_KEYS_PER_HASH)
    assert set(few) == serde.decode(forged("set", few))
    assert {-1, -2} == serde.decode(forged("set", [-1, -2]))  # hash(-1) == hash(-2)
    assert {7} == serde.decode(forged("set", [7] * 20_000))
    with pytest.raises(SerializationError, match="share one hash value"):
        serde.decode(forged("set", _colliding(MAX_KEYS_PER_HASH + 1)))
