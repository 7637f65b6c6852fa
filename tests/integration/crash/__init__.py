"""Workers killed with SIGKILL and processes racing for a thread, on a SQLite file and on Postgres."""
