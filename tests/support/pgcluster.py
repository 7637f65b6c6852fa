"""Throwaway PostgreSQL servers for the test suite.

This module holds only process and database plumbing: finding the PostgreSQL
binaries, running a private cluster in a temp folder (``PostgresCluster``) and
creating/dropping databases on any server we can reach (``PostgresServer``).
It must stay importable without pytest, so scripts and benchmarks can use it
too; the pytest fixtures live in ``tests/support/conftest_postgres.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from typing import Any
from urllib.parse import quote

import psycopg2
import psycopg2.errors
from psycopg2 import sql
from psycopg2.extensions import ISOLATION_LEVEL_AUTOCOMMIT, make_dsn, parse_dsn

__all__ = ["PostgresCluster", "PostgresServer", "find_bindir"]

# initdb/pg_ctl refuse to run as root; this account is created if no
# `postgres` OS user exists.
FALLBACK_USER = "ilmek-test"
READY_TIMEOUT = 30.0
START_ATTEMPTS = 5
MIN_SHM_FREE = 1 << 30  # bytes of free /dev/shm needed before we put a cluster there

# Settings for a disposable server. Durability is pointless for data that is
# deleted at the end of the session, and fsync/full_page_writes dominate the
# cost of CREATE/DROP DATABASE on a slow shared disk, so we switch them off.
# The server listens on loopback only, so nothing outside this machine can
# reach a cluster that trusts every connection.
SERVER_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
    "shared_buffers": "32MB",
    # Keep dynamic shared memory as files in the data folder (not /dev/shm),
    # so even a SIGKILLed server leaves nothing behind once the folder is gone.
    "dynamic_shared_memory_type": "mmap",
}


def find_bindir() -> str | None:
    """Return a folder holding ``initdb``/``pg_ctl``, or None if there is none.

    Prefers ``pg_config --bindir``; otherwise picks the newest
    ``/usr/lib/postgresql/<major>/bin`` (Debian/Ubuntu layout).
    """
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        if out and os.access(os.path.join(out, "initdb"), os.X_OK):
            return out

    def major(path: str) -> float:
        try:
            return float(path.split("/")[-2])
        except ValueError:
            return -1.0

    candidates = glob.glob("/usr/lib/postgresql/*/bin")
    for path in sorted(candidates, key=major, reverse=True):
        if os.access(os.path.join(path, "initdb"), os.X_OK):
            return path
    return None


def dsn_to_url(dsn: str) -> str:
    """Render a libpq DSN as a ``postgresql://`` URL (same parameters)."""
    params = parse_dsn(dsn)
    user = quote(params.pop("user", ""), safe="")
    password = params.pop("password", None)
    host = quote(params.pop("host", ""), safe="")
    port = params.pop("port", None)
    dbname = quote(params.pop("dbname", ""), safe="")
    auth = user + (":" + quote(password, safe="") if password is not None else "")
    url = "postgresql://" + (auth + "@" if auth else "") + host
    url += (":" + port if port else "") + "/" + dbname
    if params:
        url += "?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in sorted(params.items()))
    return url


class PostgresServer:
    """A reachable PostgreSQL server on which the tests may create databases.

    ``dsn`` must point at a maintenance database (usually ``postgres``) as a
    role that may CREATE DATABASE.
    """

    def __init__(self, dsn: str) -> None:
        self.dsn = make_dsn(dsn)
        self.url = dsn_to_url(self.dsn)
        self._conn: psycopg2.extensions.connection | None = None

    def dsn_for(self, name: str) -> str:
        """Return this server's DSN with the database replaced by ``name``."""
        return make_dsn(self.dsn, dbname=name)

    def _admin(self) -> psycopg2.extensions.connection:
        # One long-lived autocommit connection: CREATE/DROP DATABASE cannot
        # run in a transaction, and reconnecting per test costs milliseconds.
        if self._conn is None or self._conn.closed:
            self._conn = psycopg2.connect(self.dsn, connect_timeout=10)
            self._conn.set_isolation_level(ISOLATION_LEVEL_AUTOCOMMIT)
        return self._conn

    def _execute(self, query: sql.Composable, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on the admin connection; return its rows, if any."""
        try:
            return self._fetch(query, params)
        except (psycopg2.OperationalError, psycopg2.InterfaceError):
            # The admin connection may have been killed (e.g. a test ran
            # pg_terminate_backend broadly): reconnect once and retry.
            if self._conn is not None and not self._conn.closed:
                raise
            return self._fetch(query, params)

    def _fetch(self, query: sql.Composable, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._admin().cursor() as cur:
            cur.execute(query, params)
            return cur.fetchall() if cur.description else []

    def server_version(self) -> int:
        """Return the server version as an int, e.g. 150004."""
        return self._admin().server_version

    def terminate_backends(self, name: str) -> None:
        """Disconnect every session connected to database ``name`` and wait until they are gone."""
        others = sql.SQL(" FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()")
        [(killed,)] = self._execute(sql.SQL("SELECT count(pg_terminate_backend(pid))") + others, (name,))
        # Poll briefly rather than let DROP/CREATE DATABASE find an exiting
        # backend: they would then wait in 100 ms steps.
        deadline = time.monotonic() + 5
        while killed and time.monotonic() < deadline:
            [(killed,)] = self._execute(sql.SQL("SELECT count(*)") + others, (name,))
            if killed:
                time.sleep(0.01)

    def create_database(self, name: str, *, template: str | None = None) -> str:
        """Create database ``name`` (optionally cloned from ``template``); return its DSN."""
        query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is None:
            self._execute(query)
            return self.dsn_for(name)
        query += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
        # Cloning fails while anyone is connected to the template; a session
        # that just closed may still be exiting, so retry for a few seconds.
        deadline = time.monotonic() + 5
        while True:
            try:
                self._execute(query)
                return self.dsn_for(name)
            except psycopg2.errors.ObjectInUse:
                if time.monotonic() > deadline:
                    raise
                self.terminate_backends(template)
                time.sleep(0.05)

    def drop_database(self, name: str) -> None:
        """Drop database ``name`` if it exists, disconnecting its sessions first."""
        query = sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name))
        # Each failed DROP has already waited ~5 s (server side) for the
        # sessions to go, so retry once only before forcing.
        for _ in range(2):
            self.terminate_backends(name)
            try:
                self._execute(query)
                return
            except psycopg2.errors.ObjectInUse:
                time.sleep(0.1)
        if self.server_version() < 130000:
            raise RuntimeError(f"database {name!r} is still in use and cannot be dropped")
        # Last resort (PostgreSQL 13+): the server kills the sessions itself.
        self._execute(query + sql.SQL(" WITH (FORCE)"))

    def close(self) -> None:
        """Close the admin connection (the server itself is left alone)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _unprivileged_user() -> pwd.struct_passwd | None:
    """Return the account to run PostgreSQL as, or None to run as ourselves."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", FALLBACK_USER):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
    subprocess.run(
        [
            "useradd",
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            FALLBACK_USER,
        ],
        check=True,
        capture_output=True,
    )
    return pwd.getpwnam(FALLBACK_USER)


def _traversable(path: str, user: pwd.struct_passwd) -> bool:
    """Roughly: can ``user`` walk down to ``path``? (checks each ancestor's x bits)."""
    path = os.path.abspath(path)
    while True:
        try:
            st = os.stat(path)
        except OSError:
            return False
        if st.st_uid == user.pw_uid:
            ok = st.st_mode & stat.S_IXUSR
        elif st.st_gid == user.pw_gid:
            ok = st.st_mode & stat.S_IXGRP
        else:
            ok = st.st_mode & stat.S_IXOTH
        if not ok:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def _pick_parent(user: pwd.struct_passwd | None) -> str:
    """Choose where the cluster folder goes.

    Prefers RAM-backed /dev/shm: on an ordinary disk each CREATE DATABASE
    costs 100-300 ms even with fsync=off (it creates ~300 files), on tmpfs
    ~10 ms. Falls back to the usual temp folder when /dev/shm is small (Docker
    gives 64 MB by default) or cannot be used.
    """
    shm = "/dev/shm"
    try:
        st = os.statvfs(shm)
        roomy = st.f_bavail * st.f_frsize >= MIN_SHM_FREE
    except OSError:
        roomy = False
    candidates = ([shm] if roomy and os.access(shm, os.W_OK | os.X_OK) else []) + [
        tempfile.gettempdir(),
        "/tmp",
    ]
    for path in candidates:
        if user is None or _traversable(path, user):
            return path
    return "/tmp"


def _free_port() -> int:
    """Ask the kernel for a free loopback port (it may be taken again before use)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie.

    An exited postmaster is re-parented to PID 1, and some container inits
    never reap it, so a bare ``kill(pid, 0)`` would report a zombie as alive.
    """
    if os.path.isdir("/proc/self"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except FileNotFoundError:
            return False
        except OSError:
            pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def child_pids(pid: int) -> list[int]:
    """Pids of the live (non-zombie) children of ``pid``, read from /proc (Linux only)."""
    children = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            children.append(int(entry))
    return children


def _is_postgres(pid: int) -> bool:
    """Guard against signalling an unrelated process that reused a stale pid."""
    if not os.path.isdir("/proc/self"):
        return True  # no /proc: trust postmaster.pid, as pg_ctl itself does
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"postgres" in f.read()
    except OSError:
        return False


def _conf_value(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class PostgresCluster(PostgresServer):
    """A throwaway PostgreSQL cluster in a temp folder, listening on 127.0.0.1 only."""

    def __init__(self, bindir: str, base: str, port: int, user: pwd.struct_passwd | None) -> None:
        super().__init__(f"host=127.0.0.1 port={port} user=postgres dbname=postgres")
        self.bindir = bindir
        self.base = base
        self.datadir = os.path.join(base, "data")
        self.logfile = os.path.join(base, "postgres.log")
        self.port = port
        self._user = user
        self._stopped = False
        # A forked child (a test calling os.fork) inherits the atexit hook; only
        # the process that started the server may stop it.
        self._owner_pid = os.getpid()

    @classmethod
    def start(cls, *, bindir: str | None = None, tmpdir: str | None = None) -> PostgresCluster:
        """initdb a new cluster in a temp folder, start it and wait until it accepts connections.

        ``bindir`` defaults to ``find_bindir()``; ``tmpdir`` (the parent of the
        cluster folder) to /dev/shm when it is roomy, else the system temp folder.
        Raises RuntimeError (with the command output and the server log tail)
        if the binaries are missing or the server does not come up.
        """
        bindir = bindir or find_bindir()
        if bindir is None:
            raise RuntimeError(
                "no PostgreSQL binaries found (pg_config --bindir, /usr/lib/postgresql/*/bin);"
                " install postgresql or set ILMEK_TEST_PG_BINDIR"
            )
        for tool in ("initdb", "pg_ctl"):
            if not os.access(os.path.join(bindir, tool), os.X_OK):
                raise RuntimeError(f"{tool} not found or not executable in {bindir!r}")

        user = _unprivileged_user()
        base = tempfile.mkdtemp(prefix="ilmek-pg-", dir=tmpdir or _pick_parent(user))
        cluster = cls(bindir, base, 0, user)
        atexit.register(cluster.stop)
        try:
            if user is not None:
                os.chown(base, user.pw_uid, user.pw_gid)
            cluster._initdb()
            cluster._start_server()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _run(self, tool: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL binary, as the unprivileged user when we are root."""
        kwargs: dict[str, Any] = {}
        if self._user is not None:
            # Same effect as `runuser -u postgres --`, without needing that
            # binary: the child drops to the user before exec.
            kwargs = {
                "user": self._user.pw_uid,
                "group": self._user.pw_gid,
                "extra_groups": [],
            }
        return subprocess.run(
            [os.path.join(self.bindir, tool), *args],
            check=False,  # callers inspect returncode and report the output
            cwd=self.base,  # a cwd the server user can enter (ours may be /root)
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            **kwargs,
        )

    def _log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.logfile, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError as exc:
            return f"(no server log: {exc})"

    def _initdb(self) -> None:
        proc = self._run(
            "initdb",
            "--auth=trust",
            "--username=postgres",
            "--encoding=UTF8",
            "--no-locale",
            "--no-sync",  # throwaway data: skip flushing the fresh cluster to disk
            "-D",
            self.datadir,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"initdb failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
        # Settings go into postgresql.conf rather than on the command line so
        # that no shell quoting is involved; only the port varies per attempt.
        settings = dict(SERVER_SETTINGS, unix_socket_directories=self.base)
        with open(os.path.join(self.datadir, "postgresql.conf"), "a") as f:
            f.write("\n# added by tests/support/pgcluster.py\n")
            f.writelines(f"{key} = {_conf_value(v)}\n" for key, v in settings.items())

    def _start_server(self) -> None:
        for attempt in range(1, START_ATTEMPTS + 1):
            port = _free_port()
            log_start = os.path.getsize(self.logfile) if os.path.exists(self.logfile) else 0
            proc = self._run(
                "pg_ctl", "start", "-w", "-t", "60", "-D", self.datadir,
                "-l", self.logfile, "-o", f"-p {port}",
                timeout=90,
            )  # fmt: skip
            if proc.returncode == 0:
                break
            with open(self.logfile, errors="replace") as f:
                f.seek(log_start)
                new_log = f.read()
            # Another process grabbed the port between our probe and the bind.
            if "already in use" in new_log and attempt < START_ATTEMPTS:
                continue
            raise RuntimeError(
                f"pg_ctl start failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}\n"
                f"--- tail of {self.logfile} ---\n{self._log_tail()}"
            )
        self.port = port
        self.dsn = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            try:
                psycopg2.connect(self.dsn, connect_timeout=5).close()
                return
            except psycopg2.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"server did not accept connections within {READY_TIMEOUT:.0f}s: {exc}\n"
                        f"--- tail of {self.logfile} ---\n{self._log_tail()}"
                    ) from exc
                time.sleep(0.1)

    def restart(self) -> None:
        """Restart the server on the same port (a fast shutdown, as an upgrade or a failover does)."""
        proc = self._run(
            "pg_ctl", "restart", "-w", "-t", "60", "-m", "fast", "-D", self.datadir,
            "-l", self.logfile, "-o", f"-p {self.port}",
            timeout=90,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(
                f"pg_ctl restart failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}\n"
                f"--- tail of {self.logfile} ---\n{self._log_tail()}"
            )
        self._wait_ready()

    def stop_for(self, seconds: float) -> None:
        """Stop the server (a fast shutdown: sessions end), wait ``seconds``, start it again on the same port.

        An outage: every connection breaks, and nothing answers until the server is back.
        """
        proc = self._run("pg_ctl", "stop", "-w", "-t", "60", "-m", "fast", "-D", self.datadir, timeout=90)
        if proc.returncode != 0:
            raise RuntimeError(f"pg_ctl stop failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
        time.sleep(seconds)
        proc = self._run(
            "pg_ctl", "start", "-w", "-t", "60", "-D", self.datadir,
            "-l", self.logfile, "-o", f"-p {self.port}",
            timeout=90,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(
                f"pg_ctl start failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}\n"
                f"--- tail of {self.logfile} ---\n{self._log_tail()}"
            )
        self._wait_ready()

    def postmaster_pid(self) -> int | None:
        """Return the running postmaster's pid (from postmaster.pid), or None."""
        try:
            with open(os.path.join(self.datadir, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def _remove_sysv_segment(self) -> None:
        # A killed postmaster cannot remove its small System V interlock
        # segment; its id is on line 7 of postmaster.pid ("key shmid").
        try:
            with open(os.path.join(self.datadir, "postmaster.pid")) as f:
                shmid = f.read().splitlines()[6].split()[1]
        except (OSError, IndexError):
            return
        if shutil.which("ipcrm"):
            subprocess.run(["ipcrm", "-m", shmid], capture_output=True, check=False)

    def stop(self) -> None:
        """Stop the server (immediate shutdown) and delete its folder. Safe to call twice."""
        if self._stopped or os.getpid() != self._owner_pid:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        self.close()
        pid = self.postmaster_pid()
        if pid is not None:
            # Immediate mode: no shutdown checkpoint, the data is discarded anyway.
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                self._run(
                    "pg_ctl", "stop", "-w", "-t", "30", "-m", "immediate",
                    "-D", self.datadir, timeout=60,
                )  # fmt: skip
            if pid_alive(pid) and _is_postgres(pid):
                # pg_ctl failed or timed out; the data is disposable, so kill it.
                # Each backend runs in its own process group, so kill them one
                # by one rather than with killpg.
                for victim in [*child_pids(pid), pid]:
                    with contextlib.suppress(OSError):
                        os.kill(victim, signal.SIGKILL)
                deadline = time.monotonic() + 10
                while pid_alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.05)
                self._remove_sysv_segment()
        shutil.rmtree(self.base, ignore_errors=True)
