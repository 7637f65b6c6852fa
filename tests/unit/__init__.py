"""Unit tests: the library's logic in this process, with no server, browser or subprocess of their own.

Tests taking the ``checkpointer`` fixture still run on every backend, Postgres ones included.
"""
