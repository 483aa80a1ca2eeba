"""What the tests share: builders, the reference components' loader, PostgreSQL
schemas per test, the store kinds of the conformance suite, and the child processes
of the crash and stress tests. ``tests/`` is on ``sys.path`` (its conftest), so a
test imports ``support.monitor`` and so on from any folder."""
