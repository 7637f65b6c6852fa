"""Pydantic models registered with ilmek.serde.register: stored by model_dump, rebuilt by model_validate."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pydantic
import pytest

from ilmek import serde
from ilmek.errors import SerializationError


class Address(pydantic.BaseModel):
    street: str
    zip_code: str = pydantic.Field(alias="zip-code")


class Customer(pydantic.BaseModel):
    name: str
    since: dt.datetime
    credit: Decimal
    address: Address
    tags: set[str] = set()


class Positive(pydantic.BaseModel):
    amount: int

    @pydantic.field_validator("amount")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("amount must be positive")
        return value


class Unregistered(pydantic.BaseModel):
    x: int


serde.register(Address, name="tests.pydantic.Address")
serde.register(Customer, name="tests.pydantic.Customer")
serde.register(Positive, name="tests.pydantic.Positive")


def _customer() -> Customer:
    return Customer(
        name="Ada",
        since=dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=3))),
        credit=Decimal("12.50"),
        address=Address(street="Main", **{"zip-code": "34000"}),
        tags={"vip", "b2b"},
    )


def test_a_registered_model_comes_back_equal_and_of_its_own_type() -> None:
    """Nested models, aliases, datetimes with zones, Decimals and sets survive a round trip."""
    value = _customer()
    back = serde.decode(serde.encode(value))
    assert back == value
    assert type(back) is Customer
    assert type(back.address) is Address
    assert back.since.utcoffset() == dt.timedelta(hours=3)
    assert type(back.credit) is Decimal


def test_models_inside_containers_round_trip() -> None:
    """A model inside lists, tuples and dict values comes back as itself."""
    value = {"list": [_customer()], "pair": (Positive(amount=1), None)}
    assert serde.decode(serde.encode(value)) == value


def test_an_unregistered_model_is_refused_with_the_fix() -> None:
    """A model nobody registered is a SerializationError that names the class and the register call."""
    with pytest.raises(SerializationError, match=r"Unregistered is not registered.*ilmek\.serde\.register"):
        serde.encode({"who": Unregistered(x=1)}, where="channel 'who'")


def test_a_stored_value_the_model_rejects_is_a_serialization_error() -> None:
    """A stored row that the model's validators refuse does not load silently."""
    text = serde.encode(Positive(amount=3)).replace('"amount":3', '"amount":-3')
    with pytest.raises(SerializationError, match=r"could not rebuild tests\.pydantic\.Positive"):
        serde.decode(text)


def test_a_stored_field_the_model_does_not_define_is_named() -> None:
    """A stored field the class no longer has is refused, naming the field."""
    text = serde.encode(Positive(amount=3)).replace('"amount":3', '"amount":3,"gone":1')
    with pytest.raises(SerializationError, match="has a field 'gone'"):
        serde.decode(text)


def test_a_model_whose_dump_fails_names_the_class() -> None:
    """A model whose own serializer raises is a SerializationError, never a raw exception."""

    class Exploding(pydantic.BaseModel):
        x: int

        @pydantic.field_serializer("x")
        def _boom(self, value: int) -> int:
            raise RuntimeError("no")

    serde.register(Exploding, name="tests.pydantic.Exploding")
    with pytest.raises(SerializationError, match=r"Exploding.model_dump\(\) failed"):
        serde.encode(Exploding(x=1), where="step 'x'")
