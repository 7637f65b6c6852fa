"""Real stores attacked (SQLite file, Postgres): holds, write path, deletes, bad input, clients."""
