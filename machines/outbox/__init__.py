"""The outbox's table and what the checker explores it with: ``table`` (the lifecycle,
its guards and effects), ``inputs`` (its exploration). The app that runs it is
:mod:`lifecycles.outbox`."""
