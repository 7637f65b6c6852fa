"""A throwaway PgBouncer in transaction pooling mode, in front of a test PostgreSQL server.

Like ``tests/support/pgcluster.py`` this holds only process plumbing and stays
importable without pytest: finding the ``pgbouncer`` binary, writing its
configuration into a temp folder, running it (as the cluster's unprivileged
user when we are root: pgbouncer refuses to run as root) on a free loopback
port, and stopping it. The fixtures live in ``tests/integration/postgres/test_pgbouncer.py``.

The configuration maps every database name (``*``) to the same name on the
upstream server, so one pgbouncer serves every per-test database. Server
connections are handed out round-robin rather than last-used-first, so
consecutive transactions of one client really do land on different server
sessions: whatever a client wrongly leaves on a session (a prepared
statement, a session setting) is then found missing, or found where it
should not be, instead of going unnoticed.
"""

from __future__ import annotations

import atexit
import contextlib
import getpass
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

import psycopg2
from psycopg2.extensions import make_dsn, parse_dsn

from tests.support.pgcluster import _free_port, _pick_parent, _unprivileged_user

__all__ = ["PgBouncer", "find_pgbouncer"]

READY_TIMEOUT = 30.0
START_ATTEMPTS = 5
STOP_TIMEOUT = 5.0

# Server connections per (database, user) pool. A running ilmek thread keeps
# one transaction open for its hold and needs another connection for its
# writes, so pgbouncer must have more server connections than runs that are
# active at once (README: two client connections per running thread); fewer,
# and the holds take every server connection while the writes wait in the
# queue. Seven serves six concurrent runs while staying well below the number
# of client connections those runs open (twelve).
DEFAULT_POOL_SIZE = 7


def find_pgbouncer() -> str | None:
    """The pgbouncer binary: ``ILMEK_TEST_PGBOUNCER``, then PATH, then Debian's /usr/sbin; or None."""
    configured = os.environ.get("ILMEK_TEST_PGBOUNCER", "").strip()
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    found = shutil.which("pgbouncer")
    if found:
        return found
    debian = "/usr/sbin/pgbouncer"  # not on an ordinary user's PATH
    return debian if os.access(debian, os.X_OK) else None


def _quoted(value: str) -> str:
    """A value for pgbouncer's auth_file: double-quoted, inner quotes doubled."""
    return '"' + value.replace('"', '""') + '"'


class PgBouncer:
    """A pgbouncer process in a temp folder, listening on 127.0.0.1 only.

    Attributes:
        port: The loopback port clients connect to.
        base: The temp folder with the configuration, log, pid file and socket.
        logfile: pgbouncer's log.
        pool_size: Server connections per database and user.
    """

    def __init__(self, binary: str, base: str, user: pwd.struct_passwd | None, pool_size: int) -> None:
        self.binary = binary
        self.base = base
        self.config = os.path.join(base, "pgbouncer.ini")
        self.auth_file = os.path.join(base, "userlist.txt")
        self.logfile = os.path.join(base, "pgbouncer.log")
        self.pidfile = os.path.join(base, "pgbouncer.pid")
        self.pool_size = pool_size
        self.port = 0
        self.admin_user = ""
        self._user = user
        self._process: subprocess.Popen[bytes] | None = None
        self._stopped = False
        # A forked child inherits the atexit hook; only the starter may stop it.
        self._owner_pid = os.getpid()

    @classmethod
    def start(
        cls,
        upstream_dsn: str,
        *,
        binary: str | None = None,
        pool_size: int = DEFAULT_POOL_SIZE,
        tmpdir: str | None = None,
    ) -> PgBouncer:
        """Start pgbouncer in front of the server ``upstream_dsn`` points at, and wait until it serves.

        Every database of that server is reachable through it under its own
        name, as the DSN's user (whose password, if any, pgbouncer uses to log
        in to the server). Raises RuntimeError (with the log tail) if the
        binary is missing or pgbouncer does not come up.
        """
        binary = binary or find_pgbouncer()
        if binary is None:
            raise RuntimeError(
                "no pgbouncer binary found (ILMEK_TEST_PGBOUNCER, PATH, /usr/sbin/pgbouncer);"
                " install Debian's pgbouncer package"
            )
        user = _unprivileged_user()
        base = tempfile.mkdtemp(prefix="ilmek-pgbouncer-", dir=tmpdir or _pick_parent(user))
        bouncer = cls(binary, base, user, pool_size)
        atexit.register(bouncer.stop)
        try:
            if user is not None:
                os.chown(base, user.pw_uid, user.pw_gid)
            for attempt in range(1, START_ATTEMPTS + 1):
                bouncer._write_files(upstream_dsn, _free_port())
                if bouncer._launch(last_attempt=attempt == START_ATTEMPTS):
                    break
        except BaseException:
            bouncer.stop()
            raise
        return bouncer

    def _write_files(self, upstream_dsn: str, port: int) -> None:
        upstream = parse_dsn(upstream_dsn)
        login = upstream.get("user") or getpass.getuser()
        server = {"host": upstream.get("host", "127.0.0.1"), "port": upstream.get("port", "5432")}
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(port),
            "unix_socket_dir": self.base,
            "logfile": self.logfile,
            "pidfile": self.pidfile,
            # The test cluster trusts every connection; pgbouncer still wants
            # the user listed, and uses a listed password to log in upstream.
            "auth_type": "trust",
            "auth_file": self.auth_file,
            "admin_users": login,
            "pool_mode": "transaction",
            "max_client_conn": "1000",
            "default_pool_size": str(self.pool_size),
            "min_pool_size": "0",
            "reserve_pool_size": "0",
            "server_round_robin": "1",
            # Transaction mode: nothing to reset between clients.
            "server_reset_query": "",
            "ignore_startup_parameters": "extra_float_digits,options",
            # A client that can never get a server fails in seconds rather
            # than hanging the test until pytest's timeout.
            "query_wait_timeout": "30",
            "syslog": "0",
        }
        databases = f"* = host={server['host']} port={server['port']}\n"
        with open(self.config, "w") as f:
            f.write("; written by tests/support/pgbouncer.py\n[databases]\n" + databases + "\n[pgbouncer]\n")
            f.writelines(f"{key} = {value}\n" for key, value in settings.items())
        with open(self.auth_file, "w") as f:
            f.write(f"{_quoted(login)} {_quoted(upstream.get('password', ''))}\n")
        os.chmod(self.auth_file, 0o600)
        if self._user is not None:
            for path in (self.config, self.auth_file):
                os.chown(path, self._user.pw_uid, self._user.pw_gid)
        self.port = port
        self.admin_user = login

    def _launch(self, *, last_attempt: bool) -> bool:
        """Start the process and wait for it; False if the port was taken meanwhile (try another)."""
        kwargs: dict[str, Any] = {}
        if self._user is not None:
            kwargs = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
        log_start = os.path.getsize(self.logfile) if os.path.exists(self.logfile) else 0
        # In the foreground (no -d): the process stays our child, to wait for.
        self._process = subprocess.Popen(
            [self.binary, self.config],
            cwd=self.base,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # everything also goes to the logfile
            **kwargs,
        )
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            exit_code = self._process.poll()
            if exit_code is not None:
                self._process = None
                if "already in use" in self._log_since(log_start) and not last_attempt:
                    return False
                raise RuntimeError(
                    f"pgbouncer exited with {exit_code} at start\n"
                    f"--- tail of {self.logfile} ---\n{self.log_tail()}"
                )
            try:
                self.admin(lambda cursor: cursor.execute("SHOW VERSION"))
                return True
            except psycopg2.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"pgbouncer did not accept connections within {READY_TIMEOUT:.0f}s: {exc}\n"
                        f"--- tail of {self.logfile} ---\n{self.log_tail()}"
                    ) from exc
                time.sleep(0.05)

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.logfile, errors="replace") as f:
                f.seek(offset)
                return f.read()
        except OSError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of pgbouncer's log."""
        try:
            with open(self.logfile, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError as exc:
            return f"(no pgbouncer log: {exc})"

    def dsn_for(self, dsn: str) -> str:
        """``dsn`` (a database on the upstream server) rewritten to go through this pgbouncer."""
        return str(make_dsn(dsn, host="127.0.0.1", port=str(self.port)))

    def admin(self, command: Any) -> Any:
        """Call ``command(cursor)`` on a fresh connection to the admin console; return what it returns."""
        connection = psycopg2.connect(
            host="127.0.0.1",
            port=self.port,
            dbname="pgbouncer",
            user=self.admin_user,
            connect_timeout=5,
        )
        try:
            connection.autocommit = True  # the console speaks no transactions
            with connection.cursor() as cursor:
                return command(cursor)
        finally:
            connection.close()

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW <what>`` on the admin console (POOLS, SERVERS, CLIENTS...), as dicts."""

        def fetch(cursor: Any) -> list[dict[str, Any]]:
            cursor.execute(f"SHOW {what}")
            names = [column.name for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

        result: list[dict[str, Any]] = self.admin(fetch)
        return result

    def kill_database(self, name: str) -> None:
        """Drop every client and server connection to ``name`` (before the database itself is dropped)."""
        if name.replace("_", "").isalnum():  # the console takes no parameters; our names are plain
            with contextlib.suppress(psycopg2.Error):
                self.admin(lambda cursor: cursor.execute(f"KILL {name}"))

    def stop(self) -> None:
        """Shut pgbouncer down (safe, then immediate, then SIGKILL) and delete its folder. Idempotent."""
        if self._stopped or os.getpid() != self._owner_pid:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        process, self._process = self._process, None
        if process is not None:
            # SIGINT waits for open transactions to end; SIGTERM does not.
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(sig)
                try:
                    process.wait(STOP_TIMEOUT)
                    break
                except subprocess.TimeoutExpired:
                    continue
        shutil.rmtree(self.base, ignore_errors=True)

    @property
    def pid(self) -> int | None:
        """The running pgbouncer's pid, or None."""
        return self._process.pid if self._process is not None else None
