"""Workers woken at once on PostgreSQL: a trigger that notifies, and a listener.

An idle worker polls with a backoff (:class:`lifecycles._worker.Idle`); on PostgreSQL it
also listens, so that a record registered (or put back to be claimed again) reaches an
idle worker in milliseconds instead of a poll interval.

* **The trigger.** A leased lifecycle's table carries ``lc_notify`` triggers: after each
  row inserted or updated into a *claimable* status (the lease trigger's sources, from the
  table, as literals), ``pg_notify(channel, '')``. ``WHEN`` is evaluated per row by the
  executor without a function call, so writes into other statuses (claims, completions)
  cost nothing measurable; notifications with the same channel and payload fold into one
  per transaction, delivered at commit, so a batch of a thousand inserts sends one.
  Writers that are not lifecycles (another program, ``psql``) wake workers too.
* **The channel** is ``lc_`` and a digest of the table's schema and name: unique per
  installation (channels are database-wide), a plain identifier, under 63 bytes.
* **The listener** (:func:`listen`) holds a connection of its own, ``LISTEN``\\ s, and calls
  ``wake()`` for each notification, from a daemon thread; after a lost connection it
  reconnects with a backoff, and calls ``wake()`` once reconnected (what was notified
  meanwhile is lost, so the worker looks again).

The trigger is created when a store opens the table (once: an existing one is kept), and
its absence is no error: a role without the ``TRIGGER`` privilege gets polling only.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from lifecycles.stores._base import StoreError

if TYPE_CHECKING:
    from lifecycles.stores._sql import SQLStore

__all__ = ["channel_of", "ensure_notify_trigger", "listen"]

FUNCTION = "lc_notify_claimable"


def channel_of(schema: str, table: str) -> str:
    """The notification channel of ``schema.table``."""
    return "lc_" + hashlib.sha256(f"{schema}.{table}".encode()).hexdigest()[:24]


def ensure_notify_trigger(store: SQLStore[Any]) -> str | None:
    """Create the table's notify triggers if missing; the channel they notify on, or
    ``None`` when there are none (the role may not create them). Runs inside the store's
    opening transaction, after its advisory lock."""
    lifecycle = store.lifecycle
    if lifecycle.lease is None:
        return None
    table = store.schema.table
    ((schema,),) = store.run("SELECT current_schema()")
    channel = channel_of(str(schema), table)
    exists = store.run(
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = quote_ident(%s)::regclass"
        " AND tgname IN ('lc_notify_insert', 'lc_notify_update')", (table,))
    if exists[0][0] == 2:
        return channel
    claimable = store.dialect.claimable_clause(lifecycle).replace(
        store.dialect.quote(lifecycle.status_field),
        "NEW." + store.dialect.quote(lifecycle.status_field))
    quoted = store.dialect.quote(table)
    try:
        with store.connection.transaction():  # a savepoint: a refusal leaves the rest
            store.run(
                f"CREATE OR REPLACE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN PERFORM pg_notify(TG_ARGV[0], ''); RETURN NULL; END $$")
            for event, name in (("INSERT", "lc_notify_insert"),
                                ("UPDATE OF " + store.dialect.quote(lifecycle.status_field),
                                 "lc_notify_update")):
                store.run(
                    f"CREATE OR REPLACE TRIGGER {name} AFTER {event} ON {quoted}"
                    f" FOR EACH ROW WHEN ({claimable})"
                    f" EXECUTE FUNCTION {FUNCTION}({store.dialect.literal(channel)})")
    except StoreError as error:  # the store's run() says what the driver's error meant
        if not isinstance(error.__cause__, psycopg.errors.InsufficientPrivilege):
            raise
        return None  # polling only: the worker's backoff still finds the work
    return channel


def listen(connection: psycopg.Connection[Any], channel: str,
           wake: Callable[[], None]) -> Callable[[], None]:
    """Call ``wake()`` whenever ``channel`` is notified, listening on a connection of its
    own to the server ``connection`` reaches; returns ``stop()``."""
    info = connection.info
    conninfo = psycopg.conninfo.make_conninfo(info.dsn, password=info.password or None)
    stopping = threading.Event()

    def loop() -> None:
        delay = 0.1
        while not stopping.is_set():
            try:
                with psycopg.connect(conninfo, autocommit=True) as connection:
                    connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    delay = 0.1
                    wake()  # anything notified while not listening: look again
                    while not stopping.is_set():
                        for _ in connection.notifies(timeout=0.5):
                            wake()
            except psycopg.Error:
                if stopping.wait(delay):
                    return
                delay = min(5.0, delay * 2)

    thread = threading.Thread(target=loop, name=f"lifecycles-listen-{channel}", daemon=True)
    thread.start()

    def stop() -> None:
        stopping.set()
        thread.join(timeout=2)

    return stop
