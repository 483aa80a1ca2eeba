"""A stand-in payment provider for the refund example: a ledger in a SQLite file.

Every call is recorded (``calls``), and a payment is made at most once per idempotency key
(``payments``), as a real provider's idempotency keys promise. ``Declined`` is a refusal
for good (the handler lets it fail the refund at once); ``Unavailable`` a passing one.
The ledger's path is ``$REFUND_LEDGER`` (default ``refund-ledger.db``).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time

from lifecycles import Permanent

LIMIT_CENTS = 1_000_000  # the provider declines larger refunds


class Declined(Permanent):
    """The provider refuses this refund for good (a closed account, an amount over its limit)."""

    code = "provider_declined"


class Unavailable(Exception):
    """The provider did not answer: worth another attempt later."""

    code = "provider_unavailable"


class Provider:
    """The ledger at ``path``, on a connection of its own."""

    def __init__(self, path: str) -> None:
        self.connection = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.connection.execute("PRAGMA journal_mode = wal")
        self.connection.executescript(
            "CREATE TABLE IF NOT EXISTS calls (refund_id TEXT, amount_cents INTEGER,"
            " fencing_token TEXT, at REAL);"
            "CREATE TABLE IF NOT EXISTS payments (idempotency_key TEXT PRIMARY KEY,"
            " refund_id TEXT, amount_cents INTEGER, at REAL);")

    def pay(self, refund_id: str, amount_cents: int, currency: str, *, idempotency_key: str,
            fencing_token: str) -> None:
        """Refund ``amount_cents``, once per ``idempotency_key``."""
        now = time.time()
        self.connection.execute("INSERT INTO calls VALUES (?, ?, ?, ?)",
                                (refund_id, amount_cents, fencing_token, now))
        if amount_cents > LIMIT_CENTS:
            raise Declined(f"{amount_cents} {currency} is over the provider's limit")
        self.connection.execute("INSERT OR IGNORE INTO payments VALUES (?, ?, ?, ?)",
                                (idempotency_key, refund_id, amount_cents, now))


_opened = threading.local()


def provider() -> Provider:
    """This thread's provider client (a client per handler thread, as a pool would give)."""
    found: Provider | None = getattr(_opened, "provider", None)
    if found is None:
        found = _opened.provider = Provider(os.environ.get("REFUND_LEDGER", "refund-ledger.db"))
    return found
