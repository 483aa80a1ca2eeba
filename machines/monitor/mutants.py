"""The monitor's table mutants declared equivalent, each with why it is harmless
(``lifecycles check --mutants monitor`` kills every other one; the auditor page lists
these). See :mod:`lifecycles.machines._mutants`."""

from __future__ import annotations

from lifecycles.machines._mutants import EquivalentMutant

__all__ = [
    "EQUIVALENT_MUTANTS",
]

_ROUTES_NOT_VALUES = (
    "no row of the table can break it: rows choose where a record goes, and this rule "
    "holds the values the effects write and stored rows carry, which no table mutant "
    "changes; it refuses a wrong effect (the engine and monitor tests) and a foreign row on "
    "every read and in health()")

EQUIVALENT_MUTANTS: tuple[EquivalentMutant, ...] = (
    EquivalentMutant(
        "drop_guard 1 failures_remain",
        "no claimable record reachable from registration has spent its failures (an "
        "expiry or a failed read on the last allowed failure fails the item), so the guard "
        "never refuses one the table made; it refuses stored rows that would (edited by "
        "hand, or written by another version), as the reference's claim query does"),
    EquivalentMutant(
        "drop_guard 3 another_failure_allowed",
        "rows are tried in table order: row 2 takes every expiry another_failure_allowed "
        "admits, so row 3's `unless` only makes the row read complete on its own"),
    EquivalentMutant(
        "drop_guard 8 retry_is_allowed",
        "rows are tried in table order: row 7 takes every failure retry_is_allowed admits, "
        "so row 8's `unless` only makes the row read complete on its own"),
    *(EquivalentMutant(f"drop_invariant {name}", _ROUTES_NOT_VALUES) for name in (
        "failures_within_max", "polls_cover_failures", "failed_has_error_code",
        "receiver_status_has_bundle", "receiver_lease_iff_receiver_leased",
        "receiver_processed_iff_receiver_succeeded", "receiver_lease_expired_only_when_leased",
        "updated_not_before_created",
    )),
    EquivalentMutant(
        "drop_invariant claim_mints_a_new_lease_token",
        "every claim row writes the claimer's fresh token through grant_lease: only a wrong "
        "effect breaks it (examples/defects/reused_token.py is one, and it is found)"),
    EquivalentMutant(
        "drop_invariant poll_attempts_never_decrease",
        "only grant_lease writes poll_attempts, adding one: no row choice can lower it"),
    EquivalentMutant(
        "drop_invariant failures_reset_only_by_an_answer",
        "only the answer effects reset failures, and only the lease holder's answer rows "
        "run them: a row that reset failures otherwise would need a wrong effect"),
    EquivalentMutant(
        "drop_invariant final_records_never_change",
        "a row out of a final status is refused by the definition checks before anything "
        "runs (the exit_final mutants); the one row left on a final record (registering "
        "it again) changes nothing, as registering_again_changes_nothing checks"),
)
