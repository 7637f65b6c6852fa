"""ilmek.crypto: keyrings from code and from the environment, the sealed form, binding to a place."""

from __future__ import annotations

import base64
import json

import pytest

from ilmek import DecryptionError, IlmekError, InvalidArgumentError, serde
from ilmek.crypto import Keyring, Place, associated_data, is_sealed, key_id_of, new_key, open_sealed, seal
from tests.support.sealed import KEY_1, KEY_2, KEY_TEXTS, keyring

PLACE = Place("ilmek", "thread-1", "value", ("card",))


def test_a_sealed_value_opens_at_its_place_and_is_valid_json() -> None:
    """Sealing gives a JSON-able tag naming the key id; opening it at the same place gives the text back."""
    sealed = seal(keyring("k1"), '{"amount":249.9}', PLACE)
    assert is_sealed(json.loads(json.dumps(sealed)))
    assert key_id_of(sealed) == "k1"
    assert open_sealed(keyring("k1"), sealed, PLACE) == '{"amount":249.9}'


def test_two_seals_of_one_value_differ() -> None:
    """Every seal takes a fresh random nonce: equal values are not recognizable in the store."""
    ring = keyring("k1")
    assert seal(ring, '"same"', PLACE) != seal(ring, '"same"', PLACE)


@pytest.mark.parametrize(
    "elsewhere",
    [
        Place("other", "thread-1", "value", ("card",)),
        Place("ilmek", "thread-2", "value", ("card",)),
        Place("ilmek", "thread-1", "item", ("card",)),
        Place("ilmek", "thread-1", "value", ("note",)),
        Place("ilmek", "thread-1", "value", ("card", "x")),
    ],
    ids=["store", "thread", "kind", "channel", "scope"],
)
def test_a_value_opened_at_any_other_place_is_refused(elsewhere: Place) -> None:
    """Each part of a place is bound: changing any one of them refuses the value."""
    sealed = seal(keyring("k1"), '"secret"', PLACE)
    with pytest.raises(DecryptionError, match="does not open"):
        open_sealed(keyring("k1"), sealed, elsewhere)


def test_associated_data_cannot_be_confused_by_separators() -> None:
    """Places whose parts join to the same text still have different associated data."""
    assert associated_data(Place("a", "b/c", "value", ())) != associated_data(
        Place("a", "b", "value", ("c",))
    )


def test_a_user_dict_that_looks_sealed_is_stored_as_data() -> None:
    """A user value shaped like a sealed tag is escaped by the codec, so it is never read as one."""
    lookalike = {"__ilmek__": "sealed", "v": [1, "k1", "AAAA"]}
    assert not is_sealed(json.loads(serde.encode(lookalike)))


def test_from_env_reads_keys_the_first_current(monkeypatch: pytest.MonkeyPatch) -> None:
    """``id:base64key,...`` gives a keyring of those keys, the first one current."""
    monkeypatch.setenv("TEST_KEYS", f"k2:{KEY_TEXTS[1]}, k1:{KEY_TEXTS[0]}")
    ring = Keyring.from_env("TEST_KEYS")
    assert ring.current == "k2"
    assert ring.key_ids == ("k2", "k1")
    assert open_sealed(ring, seal(keyring("k1"), '"old"', PLACE), PLACE) == '"old"'


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", "not set or empty"),
        ("k1", "entry 1"),
        (f"k1:{KEY_TEXTS[0]},bad id:{KEY_TEXTS[1]}", "entry 2"),
        (f"k1:{KEY_TEXTS[0]},k1:{KEY_TEXTS[1]}", "repeats the key id 'k1'"),
        (f"k1:{KEY_TEXTS[0][:-8]}", "32 bytes"),
        ("k1:not base64!!", "base64"),
    ],
)
def test_a_malformed_key_variable_is_a_clear_error_without_key_material(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: str
) -> None:
    """Each malformed variable names the variable and the entry, and never shows a key."""
    monkeypatch.setenv("TEST_KEYS", value)
    with pytest.raises(InvalidArgumentError) as caught:
        Keyring.from_env("TEST_KEYS")
    message = str(caught.value)
    assert "TEST_KEYS" in message
    assert expected in message
    assert not any(key[:12] in message for key in KEY_TEXTS)


def test_an_unset_key_variable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """No variable at all says what to set."""
    monkeypatch.delenv("TEST_KEYS", raising=False)
    with pytest.raises(IlmekError, match="TEST_KEYS"):
        Keyring.from_env("TEST_KEYS")


@pytest.mark.parametrize(
    ("keys", "current"),
    [
        ({"k1": KEY_1[:16]}, "k1"),
        ({"": KEY_1}, ""),
        ({"has space": KEY_1}, "has space"),
        ({"k1": KEY_1}, "k2"),
        ({}, "k1"),
    ],
    ids=["short-key", "empty-id", "bad-id", "unknown-current", "no-keys"],
)
def test_a_malformed_keyring_is_refused(keys: dict[str, bytes], current: str) -> None:
    """Keys must be 32 bytes, ids short plain text, and the current key among them."""
    with pytest.raises(InvalidArgumentError):
        Keyring(keys, current)


def test_a_keyring_never_shows_its_keys() -> None:
    """``repr`` names the key ids only."""
    text = repr(Keyring({"k1": KEY_1, "k2": KEY_2}, "k1"))
    assert "k1" in text
    assert "k2" in text
    assert not any(key in text for key in KEY_TEXTS)
    assert str(list(KEY_1)) not in text


def test_new_key_is_32_random_bytes_of_base64() -> None:
    """``new_key`` makes a key ``from_env`` takes, a different one each time."""
    first, second = new_key(), new_key()
    assert len(base64.b64decode(first, validate=True)) == 32
    assert first != second
