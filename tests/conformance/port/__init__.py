"""The checkpointer conformance suite: one set of tests, run on every backend.

Every test takes the ``checkpointer`` fixture of ``tests/conftest.py`` and uses
only the port and host API of :class:`ilmek.Checkpointer` and the value types
of :mod:`ilmek.types`, so a backend joins the suite by joining that fixture.
Where the contract leaves room, the module testing that part says what the
suite decides. Shared helpers are ``tests/support/port.py``.
"""
