"""The checkpointer port suite: one set of tests, run on every backend of ``tests/conftest.py``."""
