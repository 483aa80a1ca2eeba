"""The refund worker's handler: `lifecycles worker refund --module
examples/refund/lifecycle.py --handler examples/refund/handler.py:pay_back --db refunds.db`."""

from examples.refund.provider import provider


def pay_back(refund, lease):  # type: ignore[no-untyped-def]
    """Refund the amount; raising fails the attempt (retried unless it is Permanent)."""
    if lease.renew():  # still ours, for another lease length: safe to pay now
        provider().pay(refund.refund_id, refund.amount_cents, refund.currency,
                       idempotency_key=refund.refund_id, fencing_token=lease.token)
