"""Every behaviour in which lifecycles' outbox deliberately differs from the reference.

One test per difference. Each runs both implementations on the same directory content
and asserts what each of them does, exactly, so that a difference can neither appear
nor vanish unnoticed; its docstring says what differs and why. Everything else is the
same (tests/outbox/test_outbox_compat.py). README's drop-in section lists these differences.

Properties that only lifecycles has, and that the reference fails, are tested on
lifecycles alone elsewhere and referenced here: planted links are never followed
(tests/outbox/test_outbox_security.py), no directory entry blocks the queue
(tests/outbox/test_outbox_hostile_entries.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.outbox import alarm
from support.reference import require_reference

import lifecycles.outbox.facade as ours

ref = require_reference("close_outbox")

FIXED_NOW = "2026-01-02T03:04:05.000006+00:00"
BOTH = pytest.mark.parametrize("module", [ref, ours], ids=["reference", "lifecycles"])


class Blocked(BaseException):
    """A call did not return within the alarm (a BaseException: deliver's `except
    Exception` in either implementation must not swallow it)."""


@pytest.fixture(autouse=True)
def fixed_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ref, "_now", lambda: FIXED_NOW)
    monkeypatch.setattr(ours, "_now", lambda: FIXED_NOW)


def request(module: ModuleType, i: int) -> Any:
    return module.CloseRequest(
        run_id="run-diff", transaction_id=f"tx-{i}", action="complete", result={"i": i}
    )


def entry_id(i: int) -> str:
    return str(ours.CloseRequest(
        run_id="run-diff", transaction_id=f"tx-{i}", action="complete", result={"i": i}
    ).entry_id)


def record_values(i: int, **changes: Any) -> dict[str, Any]:
    values = {
        **request(ours, i).intent(),
        "state": "pending",
        "created_at": FIXED_NOW,
        "attempts": 0,
        "last_attempt_at": None,
        "last_error": None,
    }
    values.update(changes)
    return values


def record_file(i: int, **changes: Any) -> bytes:
    return bytes(ref._json_bytes(record_values(i, **changes))) + b"\n"


def quarantine(outbox: Any) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(outbox.quarantine_dir).iterdir())}


def reasons(outbox: Any) -> list[str]:
    return [
        json.loads(data)["reason"]
        for name, data in quarantine(outbox).items()
        if name.endswith(".error.json")
    ]


def materials(outbox: Any) -> dict[str, bytes]:
    return {n: d for n, d in quarantine(outbox).items() if not n.endswith(".error.json")}


def accept_all(request: Any) -> None:
    """A receiver that accepts every delivery."""


# --- quarantine ---------------------------------------------------------------------


def test_a_conflicting_pending_copy_is_quarantined_as_a_rewritten_record(
    tmp_path: Path,
) -> None:
    """A pending copy beside a delivered one that is not the source of that delivery
    (here: it predates the attempt). The reference moves the file as it is; lifecycles
    quarantines it by a row of the table, so the material is a record in its final
    status, ``state: "quarantined"`` with the reason in ``last_error``, and the
    quarantine reads back as records with the reason (the reason file is the same).
    Moved to here from test_outbox_compat.py."""
    outcomes = {}
    for module in (ref, ours):
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        outbox.enqueue(request(module, 1))
        copy = (outbox.pending_dir / f"{entry_id(1)}.json").read_bytes()
        outbox.replay(accept_all)
        (outbox.pending_dir / f"{entry_id(1)}.json").write_bytes(copy)
        report = outbox.replay(lambda r: pytest.fail("must not deliver again"))
        assert (report.quarantined, report.attempted, report.remaining) == (1, 0, 0)
        (material,) = materials(outbox).values()
        outcomes[module] = (json.loads(material), reasons(outbox), copy)
    reason = "pending entry conflicts with existing delivered material"
    theirs, their_reasons, copy = outcomes[ref]
    assert theirs == json.loads(copy) and theirs["state"] == "pending"
    mine, my_reasons, _ = outcomes[ours]
    assert mine == {**theirs, "state": "quarantined", "last_error": reason}
    assert their_reasons == my_reasons == [reason]
    # both still answer for the identity from delivered/
    assert ours.CloseOutbox(state_dir=tmp_path / ref.__name__).enqueue(
        request(ours, 1)
    ).state == "delivered"


def test_quarantine_reasons_name_the_broken_rules(tmp_path: Path) -> None:
    """The reason file's ``reason`` is the reference's message followed by
    ``(rules: ...)``: the named rules the material breaks, so an operator (and
    ``lifecycles outbox status``) can tell which check refused it."""
    found = {}
    for module in (ref, ours):
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        (outbox.pending_dir / f"{entry_id(1)}.json").write_text("not json")
        (outbox.pending_dir / f"{entry_id(2)}.json").write_bytes(record_file(2, attempts=-1))
        assert outbox.replay(accept_all).quarantined == 2
        found[module] = sorted(reasons(outbox))
    assert found[ref] == [
        "attempts must be a non-negative integer",
        f"cannot decode outbox record {entry_id(1)}.json: JSONDecodeError",
    ]
    assert found[ours] == [
        "attempts must be a non-negative integer (rules: attempts_non_negative)",
        f"cannot decode outbox record {entry_id(1)}.json: JSONDecodeError (rules: record_decodes)",
    ]


def test_quarantined_material_is_made_private_unless_it_is_not_the_stores(
    tmp_path: Path,
) -> None:
    """The reference moves material into quarantine with whatever mode it had;
    lifecycles makes it 0600 like every file of the store, except what is not the
    store's to change: a file another name shares (hard link), or another user's."""
    modes = {}
    for module in (ref, ours):
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        planted = outbox.pending_dir / f"{entry_id(1)}.json"
        planted.write_text("not json")
        planted.chmod(0o644)
        outside = tmp_path / f"outside-{module.__name__}"
        outside.write_text("someone else's file")
        outside.chmod(0o644)
        os.link(outside, outbox.pending_dir / f"{entry_id(2)}.json")
        assert outbox.replay(accept_all).quarantined == 2
        modes[module] = sorted(
            (name.split(".")[0] == entry_id(2), stat.S_IMODE(os.lstat(
                Path(outbox.quarantine_dir) / name).st_mode))
            for name in materials(outbox)
        )
        assert stat.S_IMODE(outside.stat().st_mode) == 0o644
    assert modes[ref] == [(False, 0o644), (True, 0o644)]
    assert modes[ours] == [(False, 0o600), (True, 0o644)]


def test_an_unsafe_name_is_quarantined_under_a_generated_one(tmp_path: Path) -> None:
    """Both quarantine material under its own stem (``.hidden.json`` becomes
    ``.hidden.<tag>.json``). A stem that is not a safe file name (not UTF-8, control
    characters, too long for the quarantine's names) gets ``invalid-name-<hash>`` in
    lifecycles, and the reason file records ``original_name`` as escaped text. The
    reference keeps such a stem; one that is not UTF-8 cannot go into its JSON reason
    file, so it moves the material and then raises ``UnicodeEncodeError``, leaving the
    material without a reason, on this replay and again on every later one."""
    names = [b".hidden.json", b"line\nbreak.json", b"bad-\xff.json"]
    stems = {}
    for module in (ref, ours):
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        for raw in names[:2]:
            with open(os.fsencode(outbox.pending_dir) + b"/" + raw, "wb") as handle:
                handle.write(b"not json")
        assert outbox.replay(accept_all).quarantined == 2
        with open(os.fsencode(outbox.pending_dir) + b"/" + names[2], "wb") as handle:
            handle.write(b"not json")
        if module is ref:
            with pytest.raises(UnicodeEncodeError):
                outbox.replay(accept_all)
        else:
            assert outbox.replay(accept_all).quarantined == 1
        stems[module] = sorted(stem_and_original(outbox, name) for name in materials(outbox))
    assert stems[ref] == [
        (".hidden", None), ("bad-\udcff", "no reason file"), ("line\nbreak", None)
    ]
    assert stems[ours][0] == (".hidden", None)
    generated = dict(stems[ours][1:])
    assert sorted(map(str, generated.values())) == ["bad-\\xff.json", "line\nbreak.json"]
    assert all(stem.startswith("invalid-name-") for stem in generated)


QUARANTINED = re.compile(r"(?P<stem>.*)\.(?P<tag>[0-9a-f]{12})\.json", re.DOTALL)


def stem_and_original(outbox: Any, name: str) -> tuple[str, str | None]:
    """A material's stem, and the original name its reason file records (if any)."""
    found = QUARANTINED.fullmatch(name)
    assert found, name
    reason = Path(outbox.quarantine_dir) / f"{found['stem']}.{found['tag']}.error.json"
    if not reason.exists():
        return found["stem"], "no reason file"
    return found["stem"], json.loads(reason.read_bytes()).get("original_name")


# --- reading rules ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "rule"),
    [
        ("duplicate_key", "record_decodes"),
        ("error_not_normalised", "error_text_normalised"),
        ("error_too_long", "error_length_bound"),
        ("name_not_entry_id", "file_name_matches_key"),
    ],
)
def test_a_record_file_the_reference_reads_leniently_is_untrusted(
    tmp_path: Path, damage: str, rule: str
) -> None:
    """Stricter reading: the reference repairs or ignores what no writer of the format
    produces, and delivers the record; lifecycles quarantines it with the rule it
    breaks. A duplicate JSON key (the reference keeps the last value: two readers could
    disagree on what the record says), error text that is not whitespace-normalised or
    longer than 2000 characters (the reference normalises and cuts it on reading, so it
    delivers a request other than the stored one), a file whose name is not its
    entry id (the reference delivers it and moves it to delivered/ under that name,
    where enqueue never finds it)."""
    fail = {"action": "fail", "error": "boom"}
    contents = {
        "duplicate_key": (
            f"{entry_id(1)}.json",
            record_file(1).replace(b'"attempts":0', b'"attempts":0,"attempts":5'),
        ),
        "error_not_normalised": (
            f"{entry_id(1)}.json", record_file(1, **{**fail, "error": "  boom \n  now "})
        ),
        "error_too_long": (f"{entry_id(1)}.json", record_file(1, **{**fail, "error": "e" * 2001})),
        "name_not_entry_id": (f"{'0' * 32}.json", record_file(1)),
    }
    name, data = contents[damage]
    delivered = {}
    for module in (ref, ours):
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        (outbox.pending_dir / name).write_bytes(data)
        seen: list[Any] = []
        report = outbox.replay(seen.append)
        delivered[module] = (report.delivered, report.quarantined, reasons(outbox))
    assert delivered[ref] == (1, 0, [])
    (my_reason,) = delivered[ours][2]
    assert delivered[ours][:2] == (0, 1) and my_reason.endswith(f"(rules: {rule})")


def test_links_and_special_files_are_refused(tmp_path: Path) -> None:
    """The reference opens whatever sits at a record name: it delivers a record read
    through a symbolic link or a hard link to a file outside the store, and blocks for
    ever on a FIFO. lifecycles checks an entry's kind before opening it and quarantines
    a link, a FIFO, a socket, a device, or a file with more than one hard link, by moving
    its name only (tests/outbox/test_outbox_security.py and
    tests/outbox/test_outbox_hostile_entries.py test the rest on lifecycles)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "symlinked.json").write_bytes(record_file(1))
    (outside / "hard-linked.json").write_bytes(record_file(2))
    results: dict[ModuleType, tuple[object, ...]] = {}
    for module in (ref, ours):
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        (outbox.pending_dir / f"{entry_id(1)}.json").symlink_to(outside / "symlinked.json")
        os.link(outside / "hard-linked.json", outbox.pending_dir / f"{entry_id(2)}.json")
        seen: list[str] = []
        report = outbox.replay(lambda r, seen=seen: seen.append(r.transaction_id))
        results[module] = (sorted(seen), report.quarantined)
        os.mkfifo(outbox.pending_dir / f"{entry_id(3)}.json")
        try:
            with alarm(1.0, Blocked):
                report = outbox.replay(accept_all)
            results[module] += (f"fifo quarantined: {report.quarantined}",)
        except Blocked:
            results[module] += ("blocked on the fifo",)
    assert results[ref] == (["tx-1", "tx-2"], 0, "blocked on the fifo")
    assert results[ours] == ([], 2, "fifo quarantined: 1")


@BOTH
def test_a_lock_that_is_a_directory(tmp_path: Path, module: ModuleType) -> None:
    """A directory at ``.lock``: the reference raises ``IsADirectoryError`` from every
    call; lifecycles refuses with its own ``OutboxUnsafePathError``, as for a link."""
    outbox = module.CloseOutbox(state_dir=tmp_path)
    with contextlib.suppress(FileNotFoundError):  # the reference makes it on first use
        Path(outbox.lock_path).unlink()
    Path(outbox.lock_path).mkdir()
    expected = ours.OutboxUnsafePathError if module is ours else IsADirectoryError
    with pytest.raises(expected):
        outbox.pending_count()
    with pytest.raises(expected):
        module.CloseOutbox(state_dir=tmp_path).enqueue(request(module, 1))


def test_enqueue_validates_the_request_again(tmp_path: Path) -> None:
    """A frozen dataclass can still be changed with ``object.__setattr__``. The
    reference writes what it is given; lifecycles validates a private copy and refuses
    (tests/outbox/test_outbox_security.py tries every escaping identifier)."""
    written = {}
    for module in (ref, ours):
        forged = request(module, 1)
        object.__setattr__(forged, "run_id", "../escape")
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        try:
            written[module] = outbox.enqueue(forged).created
        except module.InvalidCloseRequestError as error:
            written[module] = str(error)
    assert written == {ref: True, ours: "run_id must be a bounded, path-safe identifier"}


# --- replay ------------------------------------------------------------------------------


def test_every_attempt_is_recorded_before_the_first_delivery(tmp_path: Path) -> None:
    """The reference records each attempt just before its own deliver call and each
    outcome just after it; lifecycles records all attempts of a replay in one batch
    before the first deliver call, and all outcomes in one batch after the last (the
    entries share their fsyncs: 23 instead of 60 for replay(limit=10)). Seen from
    deliver: the attempts of later entries are already counted, and the earlier
    entries are not yet in delivered/. An interrupt (KeyboardInterrupt) leaves the
    entries not reached pending with their attempt counted."""
    seen = {}
    for module in (ref, ours):
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        for i in range(3):
            outbox.enqueue(request(module, i))
        order = sorted(entry_id(i) for i in range(3))
        views: list[tuple[list[int], int]] = []

        def deliver(
            r: Any, outbox: Any = outbox, views: list[Any] = views, order: list[str] = order
        ) -> None:
            attempts = [
                json.loads((outbox.pending_dir / f"{e}.json").read_bytes())["attempts"]
                if (outbox.pending_dir / f"{e}.json").exists() else -1
                for e in order
            ]
            views.append((attempts, len(os.listdir(outbox.delivered_dir))))
            if r.entry_id == order[1]:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            outbox.replay(deliver)
        final = [
            json.loads((outbox.pending_dir / f"{e}.json").read_bytes())["attempts"]
            for e in order[1:]
        ]
        seen[module] = (views, final)
    # -1: already moved to delivered/
    assert seen[ref] == ([([1, 0, 0], 0), ([-1, 1, 0], 1)], [1, 0])
    assert seen[ours] == ([([1, 1, 1], 0), ([1, 1, 1], 0)], [1, 1])


CRASHING_CHILD = """
import os, sys
sys.path.insert(0, sys.argv[3])
from support.reference import load_reference
import lifecycles.outbox
module = load_reference("close_outbox") if sys.argv[1] == "reference" else lifecycles.outbox
calls = 0
def deliver(request):
    global calls
    calls += 1
    with open(sys.argv[4], "a") as log:
        log.write(request.transaction_id + "\\n")
    if calls == 3:
        os._exit(9)  # a crash during the third delivery
module.CloseOutbox(state_dir=sys.argv[2]).replay(deliver, limit=10)
"""


def test_a_crash_during_replay_repeats_at_most_that_replays_deliveries(tmp_path: Path) -> None:
    """At-least-once in both. After a crash during a replay's deliveries, the reference
    repeats only the delivery in progress (each outcome was durable right after its
    call); lifecycles repeats every delivery of the crashed replay, since its outcomes
    are written in one batch after the last call: the bound is the replay's ``limit``,
    the price of sharing fsyncs across the batch."""
    repeated = {}
    for module, name in ((ref, "reference"), (ours, "lifecycles")):
        state_dir = tmp_path / name
        outbox = module.CloseOutbox(state_dir=state_dir)
        for i in range(4):
            outbox.enqueue(request(module, i))
        log = tmp_path / f"{name}.log"
        child = subprocess.run(
            [sys.executable, "-c", CRASHING_CHILD, name, str(state_dir),
             str(Path(__file__).resolve().parents[1]), str(log)],
            env={**os.environ}, capture_output=True, text=True, check=False, timeout=60,
        )
        assert child.returncode == 9, child.stderr
        first = log.read_text().split()
        again: list[str] = []
        module.CloseOutbox(state_dir=state_dir).replay(
            lambda r, again=again: again.append(r.transaction_id)
        )
        repeated[name] = (len(first), sorted(set(first) & set(again)), len(again))
    order = [f"tx-{i}" for i in sorted(range(4), key=entry_id)]  # replay's order
    assert repeated["reference"] == (3, [order[2]], 2)
    assert repeated["lifecycles"] == (3, sorted(order[:3]), 4)


def test_replay_from_inside_deliver(tmp_path: Path) -> None:
    """The reference's nested replay opens the lock file again and waits for its own
    flock: it blocks for ever. lifecycles refuses it at once with
    ``OutboxReentryError`` (a ``CloseOutboxError``), and the outer replay carries on."""
    outcomes = {}
    for module in (ref, ours):
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        outbox.enqueue(request(module, 1))
        inner: list[str] = []

        def deliver(r: Any, outbox: Any = outbox, inner: list[str] = inner) -> None:
            try:
                outbox.replay(accept_all)
            except ours.CloseOutboxError as error:
                inner.append(type(error).__name__)

        try:
            with alarm(1.0, Blocked):
                report = outbox.replay(deliver)
            outcomes[module] = (inner, report.delivered)
        except Blocked:
            outcomes[module] = (inner, "blocked")
    assert outcomes == {ref: ([], "blocked"), ours: (["OutboxReentryError"], 1)}


# --- crash leftovers ---------------------------------------------------------------------


def test_the_source_of_an_interrupted_move_is_neither_pending_nor_quarantined(
    tmp_path: Path,
) -> None:
    """lifecycles moves a delivered record by writing delivered/ and then unlinking
    pending/ (so the moves of a batch share fsyncs); a crash in between leaves the
    attempted copy in both. It is not pending (``pending_count`` and ``remaining``
    leave it out: ``delivered/`` answers for the identity), and the next replay removes
    it once proven to be exactly the source of that move. The reference counts it as
    pending and quarantines it as a conflict, although the intent was delivered.
    Moved to here from test_outbox_compat.py."""
    found = {}
    for module in (ref, ours):
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        outbox.enqueue(request(module, 1))
        outbox.replay(accept_all)
        delivered = json.loads((outbox.delivered_dir / f"{entry_id(1)}.json").read_bytes())
        leftover = ref._json_bytes({**delivered, "state": "pending"}) + b"\n"
        (outbox.pending_dir / f"{entry_id(1)}.json").write_bytes(leftover)
        count = outbox.pending_count()
        report = outbox.replay(lambda r: pytest.fail("must not deliver again"))
        found[module] = (count, report.quarantined, report.remaining, len(materials(outbox)))
        assert not (outbox.pending_dir / f"{entry_id(1)}.json").exists()
        assert json.loads((outbox.delivered_dir / f"{entry_id(1)}.json").read_bytes()) == (
            delivered
        )
    assert found == {ref: (1, 1, 0, 1), ours: (0, 0, 0, 0)}


def test_temporary_files_left_by_a_killed_writer_are_removed(tmp_path: Path) -> None:
    """The reference never removes the temporary file of a writer killed mid-write.
    lifecycles removes such leftovers (regular files with one link, named like a
    writer's temporary file): from pending/ on every listing, from quarantine/ on its
    listing (every enqueue), and from delivered/ when a replay finds the sign of an
    interrupted one (an attempt counted without its outcome). Look-alikes of another
    kind stay."""
    left = {}
    for module in (ref, ours):
        state_dir = tmp_path / module.__name__
        outbox = module.CloseOutbox(state_dir=state_dir)
        outbox.enqueue(request(module, 1))
        # as a replay killed while writing its outcomes leaves it
        (outbox.pending_dir / f"{entry_id(1)}.json").write_bytes(
            record_file(1, attempts=1, last_attempt_at=FIXED_NOW)
        )
        for directory in ("pending", "delivered", "quarantine"):
            path = Path(outbox.root) / directory / f".{entry_id(1)}.json.{'a' * 32}.tmp"
            path.write_bytes(b'{"half')
        (outbox.pending_dir / f".x.json.{'b' * 32}.tmp").mkdir()
        assert module.CloseOutbox(state_dir=state_dir).replay(accept_all).delivered == 1
        left[module] = sorted(
            f"{directory}/{'leftover' if name.startswith('.' + entry_id(1)) else name}"
            for directory in ("pending", "delivered", "quarantine")
            for name in os.listdir(Path(outbox.root) / directory)
            if not name.endswith(".json")
        )
    look_alike = f"pending/.x.json.{'b' * 32}.tmp"
    assert left[ref] == sorted(
        ["delivered/leftover", "pending/leftover", look_alike, "quarantine/leftover"]
    )
    assert left[ours] == [look_alike]


# --- text no UTF-8 can hold, and NaN in a stored record -------------------------------


def test_a_request_holding_a_lone_surrogate_is_refused_as_an_invalid_request() -> None:
    """A lone surrogate (``"\\ud800"``) is a ``str`` that UTF-8 cannot encode. The
    reference lets the ``UnicodeEncodeError`` of its size check escape from
    ``CloseRequest``; lifecycles refuses it as an ``InvalidCloseRequestError`` naming
    ``intent_within_payload_bound`` (an intent that cannot be encoded has no size within
    the bound), whose message is the payload bound's."""
    fields = {"run_id": "r", "transaction_id": "t", "action": "complete",
              "result": {"a": "\ud800"}}
    with pytest.raises(UnicodeEncodeError):
        ref.CloseRequest(**fields)
    with pytest.raises(ours.InvalidCloseRequestError) as refused:
        ours.CloseRequest(**fields)
    assert str(refused.value) == "close request exceeds 65536 encoded bytes"
    assert refused.value.rules == ("intent_within_payload_bound",)


@pytest.mark.parametrize(
    ("result", "theirs", "mine"),
    [
        ('{"a":"\\ud800"}', "cannot decode outbox record {name}: UnicodeEncodeError",
         "close request exceeds 65536 encoded bytes (rules: intent_within_payload_bound)"),
        ('{"a":NaN}', "result floats must be finite",
         "cannot decode outbox record {name}: ValueError (rules: record_decodes)"),
    ],
    ids=["lone surrogate", "NaN"],
)
def test_a_stored_record_the_reference_decodes_differently_is_quarantined_with_another_reason(
    tmp_path: Path, result: str, theirs: str, mine: str
) -> None:
    """Both quarantine a stored record whose result holds an escaped lone surrogate, or
    ``NaN`` (which JSON does not have), but with other reasons. A surrogate: the
    reference fails to encode the intent while it decodes the file (``cannot decode``);
    lifecycles decodes it and finds the intent past the payload bound. ``NaN``: the
    reference's decoder accepts it and its finite-float rule refuses it; lifecycles'
    decoder refuses it as no JSON (``record_decodes``)."""
    name = f"{entry_id(1)}.json"
    data = record_file(1).replace(b'"result":{"i":1}', b'"result":' + result.encode())
    assert data != record_file(1)
    found = {}
    for module in (ref, ours):
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        (outbox.pending_dir / name).write_bytes(data)
        assert outbox.replay(accept_all).quarantined == 1
        found[module] = reasons(outbox)
    assert found == {ref: [theirs.format(name=name)], ours: [mine.format(name=name)]}


# --- requests: values nested deep, and a request changed after it was built ---------------


def deeply_nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def test_a_version_nested_thousands_deep_is_an_invalid_request() -> None:
    """The reference's message for an unsupported version is ``repr`` of the value,
    which recurses once per level: a list nested 3,000 deep raises ``RecursionError``
    from its ``CloseRequest``. lifecycles refuses it as an ``InvalidCloseRequestError``
    naming ``version_supported``, its message showing the value down to the JSON depth
    bound (8 levels, then ``[...]``), as for any value nested deeper than that bound;
    within it the message is the reference's (tests/outbox/test_outbox_request_values.py
    tries every field, a changed request, and stored records)."""
    fields = {"run_id": "r", "transaction_id": "t", "action": "complete", "result": {}}
    with pytest.raises(RecursionError):
        ref.CloseRequest(**fields, version=deeply_nested(3000))
    with pytest.raises(ours.InvalidCloseRequestError) as refused:
        ours.CloseRequest(**fields, version=deeply_nested(3000))
    assert refused.value.rules == ("version_supported",)
    assert str(refused.value) == "unsupported close request version " + "[" * 9 + "..." + (
        "]" * 9)
    shallow = deeply_nested(5)
    messages = []
    for module in (ref, ours):
        with pytest.raises(module.InvalidCloseRequestError) as refused:
            module.CloseRequest(**fields, version=shallow)
        messages.append(str(refused.value))
    assert messages[0] == messages[1] == f"unsupported close request version {shallow!r}"


@pytest.mark.parametrize(("action", "forged"), [("complete", " "), ("fail", "a  b")])
def test_a_request_whose_error_was_changed_after_it_was_built_is_refused(
    tmp_path: Path, action: str, forged: str
) -> None:
    """The constructor normalises ``error``; an ``error`` changed afterwards
    (``object.__setattr__``) to text it would have normalised: the reference writes it
    as given (its own next read normalises it), lifecycles refuses the request with
    ``error_text_normalised`` (the rule a stored file holding it breaks) and writes
    nothing, rather than store another request than the one it was given."""
    stored = {}
    for module in (ref, ours):
        built = module.CloseRequest(run_id="run-diff", transaction_id="tx-1", action=action,
                                    result={}, error="refused" if action == "fail" else "")
        object.__setattr__(built, "error", forged)
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        try:
            outbox.enqueue(built)
        except module.InvalidCloseRequestError as error:
            stored[module] = (error.rules, os.listdir(outbox.pending_dir))
        else:
            (name,) = os.listdir(outbox.pending_dir)
            stored[module] = json.loads((outbox.pending_dir / name).read_bytes())["error"]
    assert stored == {ref: forged, ours: (("error_text_normalised",), [])}


# --- the store's directories: changed or gone under an open outbox, and OS errors ---------


@pytest.mark.parametrize("change", ["delivered/ a link", "quarantine/ a file"])
def test_a_directory_changed_under_an_open_outbox(tmp_path: Path, change: str) -> None:
    """``delivered/`` replaced by a link (or ``quarantine/`` by a file) under an open
    outbox, with nothing pending. The reference answers ``pending_count`` and ``replay``
    (they touch neither directory then); a reference outbox opened afterwards accepts the
    link (its ``mkdir`` finds a directory there, its ``chmod`` follows the link) and raises
    ``FileExistsError`` for the file. lifecycles refuses every
    call of the open outbox, and its constructor, with ``OutboxUnsafePathError``: each
    call checks every directory of the layout under the lock (one ``lstat`` each)."""
    answers: dict[ModuleType, list[str]] = {}
    for module in (ref, ours):
        state = tmp_path / module.__name__
        outbox = module.CloseOutbox(state_dir=state)
        elsewhere = tmp_path / f"elsewhere-{module.__name__}"
        elsewhere.mkdir()
        name = "delivered" if change.startswith("delivered") else "quarantine"
        directory = Path(outbox.root) / name
        directory.rmdir()
        if name == "delivered":
            directory.symlink_to(elsewhere)
        else:
            directory.write_bytes(b"")
        answers[module] = []
        for call in (outbox.pending_count, lambda outbox=outbox: outbox.replay(accept_all),
                     lambda state=state, module=module: module.CloseOutbox(state_dir=state)):
            try:
                call()
                answers[module].append("returned")
            except Exception as error:
                answers[module].append(type(error).__name__)
    opened_again = "returned" if change.startswith("delivered") else "FileExistsError"
    assert answers == {ref: ["returned", "returned", opened_again],
                       ours: ["OutboxUnsafePathError"] * 3}


@pytest.mark.parametrize("removed", ["close-outbox", "pending"])
def test_a_directory_removed_under_an_open_outbox(tmp_path: Path, removed: str) -> None:
    """The reference raises ``FileNotFoundError`` from each call that opens something
    inside the removed directory (all of them for the store's own directory), and answers
    ``pending_count`` and ``replay`` as if ``pending/`` were empty when that is the one
    removed. lifecycles refuses every call with ``OutboxStorageError`` (an ``OSError``,
    errno ``ENOENT``) and creates nothing again behind the caller's back: a directory
    whose file system was unmounted would come back empty, hiding what it held.
    Opening an outbox creates it, in both."""
    answers: dict[ModuleType, list[object]] = {}
    for module in (ref, ours):
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        outbox.enqueue(request(module, 1))
        shutil.rmtree(outbox.root if removed == "close-outbox" else outbox.pending_dir)
        answers[module] = []
        for call in (outbox.pending_count, lambda outbox=outbox: outbox.replay(accept_all),
                     lambda outbox=outbox, module=module: outbox.enqueue(request(module, 2))):
            try:
                answers[module].append(repr(call())[:12])
            except OSError as error:
                answers[module].append((type(error).__name__, errno.errorcode[error.errno]))
        assert module.CloseOutbox(state_dir=tmp_path / module.__name__).pending_count() == 0
    refused = ("OutboxStorageError", "ENOENT")
    not_found = ("FileNotFoundError", "ENOENT")
    if removed == "close-outbox":
        assert answers[ref] == [not_found] * 3
    else:
        assert answers[ref] == ["0", "ReplayReport", not_found]
    assert answers[ours] == [refused] * 3


def test_an_os_error_is_still_an_os_error_with_its_errno(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reference lets the OS's error out as it is (an ``OSError``, or one of its
    subclasses such as ``PermissionError``). lifecycles raises ``OutboxStorageError``:
    a ``CloseOutboxError`` with the stable code ``close_outbox.storage_unavailable``,
    and an ``OSError`` carrying the same ``errno``, ``strerror`` and ``filename``, so an
    ``except OSError`` written for the reference still catches it; an ``except`` of a
    subclass (``PermissionError``, ``FileNotFoundError``) does not
    (tests/outbox/test_outbox_os_errors.py: a full file system, an unprivileged user,
    a damaged file system; tests/outbox/test_outbox_faults.py: every write call)."""
    caught = {}
    for module in (ref, ours):
        outbox = module.CloseOutbox(state_dir=tmp_path / module.__name__)
        real_fsync = os.fsync

        def failing(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(os, "fsync", failing)
        try:
            outbox.enqueue(request(module, 1))
        except OSError as error:
            caught[module] = (type(error).__name__, error.errno, error.strerror,
                              getattr(error, "code", None))
        finally:
            monkeypatch.setattr(os, "fsync", real_fsync)
        assert os.listdir(outbox.pending_dir) == []
    assert caught == {
        ref: ("OSError", errno.EIO, "Input/output error", None),
        ours: ("OutboxStorageError", errno.EIO, "Input/output error",
               "close_outbox.storage_unavailable"),
    }
    assert not issubclass(ours.OutboxStorageError, PermissionError)
