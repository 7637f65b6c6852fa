"""The operations commands: ``threads --status``, ``show``, ``recover``, ``cancel``, ``gc``, and their logs.

Every store is a real SQLite file or the real Postgres the test session
starts (never a mock). Stalled threads are made for real: a worker process
killed with SIGKILL mid-superstep (``tests/support/crashworker.py``), or a node that
raised. Graph modules are written into the test's folder and named
``MODULE:NAME`` as a user would; effects are counted in a file outside the
database, so "ran once" is checked against what happened.
"""
