"""A TCP proxy in front of the PostgreSQL server that cuts a connection at a chosen message.

The tests of uncertain commits need a connection that breaks at an exact point of the
wire protocol, on a real server: after the server committed but before the client
heard it, or before a statement reached the server at all. Killing a backend cannot
choose that point; this proxy can. It relays real TCP between psycopg and the server
(threads, one pair per connection) and reads the protocol's framing as it goes:

* client messages are grouped into *exchanges*: everything up to a simple ``Query``
  or a ``Sync`` (psycopg sends ``Parse``/``Bind``/``Describe``/``Execute``/``Sync`` in
  one write). An exchange is forwarded whole, once :meth:`CuttingProxy.arm`'s predicate
  has seen it (:class:`Exchange`: the statements it executes, the server's transaction
  state before it, the statements of the open transaction);
* server messages are relayed one by one; ``ReadyForQuery`` tells the transaction state.

An armed cut fires once, on the first exchange its predicate accepts:

* :attr:`Cut.AFTER_REPLY`: the exchange is forwarded, the server's whole answer (up to
  its ``ReadyForQuery``) is read and dropped, and both sides are closed. When the
  exchange commits (``COMMIT``, or an autocommit statement), the write is durable on
  the server and the client never learns it.
* :attr:`Cut.BEFORE_FORWARD`: the exchange is dropped and both sides are closed; the
  server rolls back the open transaction, if any, and never sees the statement.

The proxy speaks only to connections it is given: the DSN from :meth:`dsn` turns off
TLS and GSS encryption, so the stream is plain and its framing readable.
"""

from __future__ import annotations

import contextlib
import enum
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import attrs

# Untyped requests a client may send before its startup message.
_SSL_REQUEST = 80877103
_GSSENC_REQUEST = 80877104


class Cut(enum.Enum):
    AFTER_REPLY = "after_reply"
    BEFORE_FORWARD = "before_forward"


@attrs.frozen
class Exchange:
    """One round trip the client started: the statements it executes, in order, the
    server's transaction state before it (``I`` idle, ``T`` in a transaction, ``E`` a
    failed one), and every statement of the open transaction, this exchange's included."""

    executed: tuple[str, ...]
    state: str
    transaction: tuple[str, ...]

    def runs(self, text: str) -> bool:
        return any(text in sql for sql in self.executed)

    @property
    def commits_transaction(self) -> bool:
        return self.state == "T" and any(sql.strip().upper() == "COMMIT" for sql in self.executed)


def commit_of(text: str) -> Callable[[Exchange], bool]:
    """The exchange that commits a write containing ``text``: the ``COMMIT`` of a
    transaction that ran it, or the autocommit statement itself."""

    def predicate(exchange: Exchange) -> bool:
        if exchange.commits_transaction:
            return any(text in sql for sql in exchange.transaction)
        return exchange.state == "I" and exchange.runs(text)

    return predicate


def statement(text: str) -> Callable[[Exchange], bool]:
    """The exchange that runs a statement containing ``text``, wherever it is."""
    return lambda exchange: exchange.runs(text)


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < count:
        chunk = sock.recv(count - len(chunks))
        if not chunk:
            raise EOFError
        chunks += chunk
    return bytes(chunks)


def _read_message(sock: socket.socket) -> tuple[bytes, bytes]:
    """One typed message: its type byte and its whole raw bytes."""
    head = _read_exactly(sock, 5)
    (length,) = struct.unpack("!I", head[1:])
    return head[:1], head + _read_exactly(sock, length - 4)


def _c_string(body: bytes, at: int) -> tuple[str, int]:
    end = body.index(b"\0", at)
    return body[at:end].decode("utf-8", "replace"), end + 1


class _Link:
    """One client connection and its server connection, relayed by two threads."""

    def __init__(self, proxy: CuttingProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.server = socket.create_connection(proxy.upstream)
        for sock in (client, self.server):  # small messages, relayed as they come
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.state = "I"
        self.transaction: list[str] = []
        self.prepared: dict[str, str] = {}
        self.portals: dict[str, str] = {}
        self.swallowing = threading.Event()
        self.closed = threading.Event()
        for pump in (self._from_client, self._from_server):
            threading.Thread(target=pump, daemon=True).start()

    def close(self) -> None:
        self.closed.set()
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):  # the other side may have closed first
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _startup(self) -> None:
        while True:
            head = _read_exactly(self.client, 8)
            length, code = struct.unpack("!II", head)
            rest = _read_exactly(self.client, length - 8)
            if code in (_SSL_REQUEST, _GSSENC_REQUEST):
                self.client.sendall(b"N")  # no encryption: the stream stays readable
                continue
            self.server.sendall(head + rest)
            return

    def _from_client(self) -> None:
        try:
            self._startup()
            batch: list[bytes] = []
            executed: list[str] = []
            while True:
                kind, raw = _read_message(self.client)
                body = raw[5:]
                batch.append(raw)
                if kind == b"P":
                    name, at = _c_string(body, 0)
                    self.prepared[name], _ = _c_string(body, at)
                elif kind == b"B":
                    portal, at = _c_string(body, 0)
                    name, _ = _c_string(body, at)
                    self.portals[portal] = self.prepared.get(name, "")
                elif kind == b"E":
                    portal, _ = _c_string(body, 0)
                    executed.append(self.portals.get(portal, ""))
                elif kind == b"Q":
                    executed.append(_c_string(body, 0)[0])
                if kind not in (b"Q", b"S", b"H", b"X"):
                    continue  # the exchange goes on: forwarded whole, once it ends
                exchange = Exchange(tuple(executed), self.state,
                                    (*self.transaction, *executed))
                self.transaction.extend(executed)
                cut = self.proxy._take_cut(exchange)
                if cut is Cut.BEFORE_FORWARD:
                    self.close()
                    return
                if cut is Cut.AFTER_REPLY:
                    self.swallowing.set()  # before forwarding: no byte of the answer escapes
                self.server.sendall(b"".join(batch))
                batch, executed = [], []
        except (EOFError, OSError, ValueError):
            self.close()

    def _from_server(self) -> None:
        try:
            while True:
                kind, raw = _read_message(self.server)
                if kind == b"Z":
                    self.state = chr(raw[5])
                    if self.state == "I":
                        self.transaction.clear()
                if self.swallowing.is_set():
                    if kind == b"Z":  # the whole answer arrived, and is dropped
                        self.proxy._answered.set()
                        self.close()
                        return
                    continue
                self.client.sendall(raw)
        except (EOFError, OSError):
            self.close()


class CuttingProxy:
    """Relays connections to ``upstream`` and cuts one where :meth:`arm` says.

    Use as a context manager; :meth:`dsn` gives a connection string through the proxy.
    """

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._armed: tuple[Callable[[Exchange], bool], Cut] | None = None
        self.cut_at: Exchange | None = None
        self._answered = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def __enter__(self) -> CuttingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def dsn(self, base: str, **options: Any) -> str:
        """``base`` with the proxy as host and port, and encryption off."""
        from psycopg.conninfo import make_conninfo

        return make_conninfo(base, host="127.0.0.1", port=self.port, sslmode="disable",
                             gssencmode="disable", **options)

    def arm(self, when: Callable[[Exchange], bool], cut: Cut) -> None:
        """Cut the first exchange (on any connection) that ``when`` accepts, once."""
        with self._lock:
            self._armed = (when, cut)
            self.cut_at = None
            self._answered.clear()

    @property
    def fired(self) -> bool:
        """Whether the armed cut happened (for AFTER_REPLY: the answer was dropped)."""
        with self._lock:
            if self._armed is not None or self.cut_at is None:
                return False
        return True

    @property
    def answer_dropped(self) -> bool:
        return self._answered.is_set()

    def _take_cut(self, exchange: Exchange) -> Cut | None:
        with self._lock:
            if self._armed is None or not self._armed[0](exchange):
                return None
            cut = self._armed[1]
            self._armed = None
            self.cut_at = exchange
            return cut

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                link = _Link(self, client)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._links.append(link)

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            links = list(self._links)
        for link in links:
            link.close()


class Proxied:
    """Connections into one test schema, through a :class:`CuttingProxy` or straight to
    the server (to see what the server holds after a cut); closed by the fixture."""

    def __init__(self, proxy: CuttingProxy, schema: str, dsn: str) -> None:
        self.proxy, self.schema, self._dsn = proxy, schema, dsn
        self._opened: list[Any] = []

    def through(self) -> Any:
        """An autocommit connection through the proxy (the one a cut breaks)."""
        return self._open(self.proxy.dsn(self._dsn, options=f"-c search_path={self.schema}"))

    def direct(self) -> Any:
        """An autocommit connection straight to the server."""
        from psycopg.conninfo import make_conninfo

        return self._open(make_conninfo(self._dsn, options=f"-c search_path={self.schema}"))

    def _open(self, dsn: str) -> Any:
        import psycopg

        connection = psycopg.connect(dsn, autocommit=True)
        self._opened.append(connection)
        return connection

    def close(self) -> None:
        for connection in self._opened:
            connection.close()


def proxied_connections(schema: str) -> Iterator[Proxied]:
    """A proxy in front of the test server and connections into ``schema`` (the body of
    a fixture: ``yield from``)."""
    from psycopg.conninfo import conninfo_to_dict

    from support.postgres import require_postgres

    dsn = require_postgres()
    parts = conninfo_to_dict(dsn)
    upstream = (str(parts.get("host") or "127.0.0.1"), int(parts.get("port") or 5432))
    with CuttingProxy(upstream) as proxy:
        connections = Proxied(proxy, schema, dsn)
        try:
            yield connections
        finally:
            connections.close()
