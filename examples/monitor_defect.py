"""The monitor with the reference's defect put back, to show the checker finds it.

The reference's ``_complete`` accepted a receiver answer with remote status
``retry_wait`` or ``failed`` and no error code, and stored it: a record that breaks
``receiver_error_iff_receiver_waiting_or_failed``, after which every read of the queue
failed with ``state_invalid``. :func:`accept_answer_as_is` is that rule: it fires the
answer's trigger and nothing more, where :func:`complete_with_answer` turns an answer
whose record would break an invariant into ``fail_attempt`` with ``response_invalid``.

    lifecycles check --module examples/monitor_defect.py     # exits 1 with a trace
"""

from __future__ import annotations

import attrs

from lifecycles.invariants.monitor import RESPONSE_INVALID, MonitorRecord
from lifecycles.machines.monitor import (
    FireMonitor,
    MonitorInputs,
    ReceiverAnswer,
    trigger_for_answer,
)
from lifecycles.machines.monitor.inputs import monitor_exploration


def accept_answer_as_is(record: MonitorRecord, answer: ReceiverAnswer | None,
                        inputs: MonitorInputs, fire: FireMonitor) -> MonitorRecord:
    """The reference's rule: an answer that parses is taken as it is (the defect)."""
    if answer is None:
        rejected = attrs.evolve(inputs, error_code=RESPONSE_INVALID, retryable=False)
        return fire("fail_attempt", record, rejected)
    return fire(trigger_for_answer(answer), record, attrs.evolve(inputs, answer=answer))


DEFECT_PUT_BACK = monitor_exploration(accept_answer_as_is)
