"""ilmek.connect opens what --db takes: a path, a sqlite:/// URL as SQLAlchemy reads it, a Postgres DSN."""

from __future__ import annotations

import pathlib

import pytest

import ilmek
from ilmek import (
    END,
    START,
    InvalidArgumentError,
    PostgresCheckpointer,
    SqliteCheckpointer,
    StorageError,
    graph,
)
from tests.support.pgcluster import dsn_to_url

pytestmark = pytest.mark.timeout(60)


def _one_node() -> ilmek.CompiledGraph:
    return (
        graph("one", {"n": ilmek.last_write(0)})
        .node("inc", lambda s: {"n": s["n"] + 1})
        .edge(START, "inc")
        .edge("inc", END)
        .compile()
    )


def _stores_a_run(store: ilmek.Checkpointer) -> None:
    result = ilmek.run(_one_node(), {"n": 1}, thread_id="t", checkpointer=store)
    assert result.state == {"n": 2}


@pytest.mark.parametrize("form", ["path", "relative-url", "absolute-url"])
def test_sqlite_forms_name_the_same_file(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    """A path, sqlite:///rel.db (from the current folder) and sqlite:////abs.db open one file, migrated."""
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "sub dir" / "store%.db"
    given = {
        "path": str(target),
        "relative-url": "sqlite:///sub%20dir/store%25.db",
        "absolute-url": "sqlite:///" + str(target).replace("%", "%25").replace(" ", "%20"),
    }[form]
    with ilmek.connect(given) as store:
        assert isinstance(store, SqliteCheckpointer)
        _stores_a_run(store)
    assert target.exists()
    with ilmek.connect(target) as again:  # a PathLike works too
        assert [t.id for t in again.list_threads()] == ["t"]


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_sqlite_memory_urls(url: str) -> None:
    """sqlite:// and sqlite:///:memory: open an in-memory store, as SQLAlchemy does."""
    with ilmek.connect(url) as store:
        assert store.path is None or store.path == ":memory:"
        _stores_a_run(store)


def test_options_reach_the_backend(tmp_path: pathlib.Path) -> None:
    """Keywords are the backend's: table_prefix names the tables, a bad one is refused."""
    with ilmek.connect(tmp_path / "x.db", table_prefix="shop") as store:
        _stores_a_run(store)
        assert store.table_prefix == "shop"
    with pytest.raises(ValueError, match="table_prefix"):
        ilmek.connect(tmp_path / "y.db", table_prefix="bad prefix")


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("", "needs a store"),
        ("   ", "needs a store"),
        ("mysql://shop:s3cret@db/shop", r"unsupported database URL 'mysql://shop:\*\*\*@db/shop'"),
        ("sqlite://host/x.db", "names a host"),
        ("sqlite:///x.db?mode=ro", "carries a query"),
    ],
)
def test_what_cannot_be_a_store_is_refused(given: str, message: str) -> None:
    """An empty value, another scheme, a host or query in a SQLite URL: InvalidArgumentError, no password."""
    with pytest.raises(InvalidArgumentError, match=message) as raised:
        ilmek.connect(given)
    assert "s3cret" not in str(raised.value)


@pytest.mark.postgres
def test_a_postgres_url_opens_a_migrated_store(postgres_dsn: str) -> None:
    """A postgresql:// URL and a keyword string open Postgres with its tables created, ready to run."""
    with ilmek.connect(dsn_to_url(postgres_dsn), table_prefix="fresh") as store:
        assert isinstance(store, PostgresCheckpointer)
        _stores_a_run(store)
    with ilmek.connect(postgres_dsn, table_prefix="fresh") as again:
        assert [t.id for t in again.list_threads()] == ["t"]


def test_a_refused_postgres_connection_is_a_storage_error_without_the_password() -> None:
    """Nothing listens on the port: a StorageError that never shows the password."""
    with pytest.raises(StorageError) as raised:
        ilmek.connect("postgresql://shop:Wr0ngSecret@127.0.0.1:1/shop?connect_timeout=5")
    assert "Wr0ngSecret" not in str(raised.value)
