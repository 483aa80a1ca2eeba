"""The child process of the outbox crash test (tests/outbox/test_outbox_crash.py).

It runs enqueues, identical and conflicting re-enqueues, reopenings and replays on a real
directory until it is killed, and appends to a log, with one write(2) per line and BEFORE
going on, every fact the parent will hold the store to:

    I <run_id> <transaction_id>   an enqueue is about to be called (intended)
    E <entry_id>                  enqueue returned a receipt (acknowledged)
    S <entry_id>                  the deliver callback is about to return success
    F <entry_id>                  the deliver callback is about to raise
    D <entry_id>                  replay returned and counted this entry delivered

A SIGKILL keeps every completed write(2): the bytes are in the page cache, and only
the process dies. It writes one byte to stdout once its imports are done, so the parent
can kill it anywhere from opening the store onwards. Any broken expectation ends the
child with exit status 3 and a message on stderr, which the parent reports.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
from pathlib import Path
from typing import Any, NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: tests/

from support.outbox import conflicting_request, load_outbox, make_request

BROKEN_EXPECTATION = 3


class DeliveryRefused(Exception):
    """The receiver refused this delivery (the outbox must keep the entry pending)."""


def broken(message: str) -> NoReturn:
    sys.stderr.write(f"outbox_child: {message}\n")
    sys.stderr.flush()
    os._exit(BROKEN_EXPECTATION)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", required=True)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--log", required=True, type=Path)
    parser.add_argument("--generation", required=True, type=int)
    parser.add_argument("--seed", required=True, type=int)
    args = parser.parse_args()

    outbox = load_outbox(args.impl)
    log_fd = os.open(args.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def log(*fields: str) -> None:
        os.write(log_fd, (" ".join(fields) + "\n").encode())

    rng = random.Random(args.seed)
    os.write(1, b"R")
    store = outbox.CloseOutbox(state_dir=args.state_dir)
    acknowledged: list[tuple[str, str]] = []
    run_id = f"run-g{args.generation}"
    sequence = 0
    succeeded: list[str] = []

    def deliver(request: Any) -> None:
        expected = make_request(outbox, request.run_id, request.transaction_id)
        if request.intent() != expected.intent():
            broken(f"deliver received {request.intent()!r}, enqueued {expected.intent()!r}")
        if rng.random() < 0.2:
            log("F", request.entry_id)
            raise DeliveryRefused(request.entry_id)
        log("S", request.entry_id)
        succeeded.append(request.entry_id)

    while True:
        choice = rng.random()
        if choice < 0.5 or not acknowledged:
            transaction_id = f"tx-{sequence}"
            sequence += 1
            request = make_request(outbox, run_id, transaction_id)
            log("I", run_id, transaction_id)
            receipt = store.enqueue(request)
            if (receipt.entry_id, receipt.created, receipt.state) != (
                request.entry_id,
                True,
                "pending",
            ):
                broken(f"first enqueue of {transaction_id} answered {receipt!r}")
            log("E", receipt.entry_id)
            acknowledged.append((run_id, transaction_id))
        elif choice < 0.6:
            known_run, known_transaction = rng.choice(acknowledged)
            request = make_request(outbox, known_run, known_transaction)
            try:
                receipt = store.enqueue(request)
            except outbox.OutboxCorruptError:
                continue  # quarantined material; the parent checks it has a reason
            if receipt.created or receipt.state not in ("pending", "delivered"):
                broken(f"identical enqueue of acknowledged {known_transaction}: {receipt!r}")
        elif choice < 0.65:
            known_run, known_transaction = rng.choice(acknowledged)
            try:
                store.enqueue(conflicting_request(outbox, known_run, known_transaction))
            except (outbox.OutboxConflictError, outbox.OutboxCorruptError):
                continue
            broken(f"a conflicting intent for {known_transaction} was accepted")
        elif choice < 0.7:
            store = outbox.CloseOutbox(state_dir=args.state_dir)
        else:
            succeeded.clear()
            report = store.replay(deliver, limit=rng.randint(1, 20))
            for entry_id in succeeded:
                log("D", entry_id)
            if report.delivered != len(succeeded):
                broken(f"replay reported {report!r} after {len(succeeded)} successes")


if __name__ == "__main__":
    main()
