"""PostgreSQL only: the checkpointer on a real server, PgBouncer, faults, the test cluster."""
