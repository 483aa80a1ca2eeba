"""The table version covers the code that decides (lifecycles.machines._versioning):
a changed guard, effect, invariant, step invariant, field rule or function beside the
table changes it, and so fails `lifecycles diagrams --check` until the pages are
regenerated; the same code gives the same version in every process."""

from __future__ import annotations

import shutil
import subprocess
import sys
from enum import StrEnum
from pathlib import Path
from typing import Any

import attrs
import pytest

from lifecycles.invariants._core import (
    FieldRule,
    InvariantSet,
    expressed,
    invariant,
    matches,
    step_invariant,
)
from lifecycles.invariants._expressions import Fields
from lifecycles.machines._core import Lifecycle
from lifecycles.machines._declaration import effect, guard
from lifecycles.machines._versioning import canonical, code_material

ROOT = Path(__file__).resolve().parents[2]


class Status(StrEnum):
    NEW = "new"
    DONE = "done"


def make_record(name_rule: FieldRule) -> type:
    @attrs.frozen
    class Item:
        key: str = attrs.field(validator=name_rule)
        status: Status = Status.NEW
        count: int = 0

    return Item


@guard(refusal_code="demo.not_ready")
def ready(r: Any, i: Any) -> bool:
    """The item is ready."""
    return bool(r.count < 3)


@effect("count")
def bump(r: Any, i: Any) -> dict[str, Any]:
    """Count one more."""
    return {"count": r.count + 1}


@invariant
def count_small(r: Any) -> bool:
    """count stays small."""
    return bool(r.count <= 5)


@step_invariant
def count_never_drops(before: Any, after: Any) -> bool:
    """count never decreases."""
    return bool(after.count >= before.count)


def beside(value: int) -> int:
    """A function the rows rely on."""
    return value + 1


KEY_RULE = matches("key_ok", r"[a-z]{1,8}")


def lifecycle(**changed: Any) -> Lifecycle[Any, Any]:
    declared: dict[str, Any] = dict(
        module=__name__, name="versioned", statuses=Status, initial=Status.NEW, final=[Status.DONE],
        creation="create",
        table=[{"trigger": "finish", "source": "new", "dest": "done",
                "conditions": ["ready"], "after": "bump"}],
        guards=[ready], effects=[bump],
        invariants=InvariantSet("demo.state_invalid", [count_small], steps=[count_never_drops]),
        record_type=make_record(KEY_RULE), key_field="key", not_allowed_code="demo.not_allowed",
        beside_the_table=[beside],
    )
    declared.update(changed)
    return Lifecycle(**declared)


BASE = lifecycle()


def test_the_same_declaration_gives_the_same_version() -> None:
    assert lifecycle().table_version == BASE.table_version
    pieces = code_material(BASE)
    assert set(pieces) == {
        "guard ready", "effect bump", "invariant count_small", "step count_never_drops",
        "field key key_ok", f"beside {__name__}.beside",
    }
    assert not any(digest.startswith("no source") for digest in pieces.values())


def _other_guard() -> Any:
    @guard(refusal_code="demo.not_ready")
    def ready(r: Any, i: Any) -> bool:
        """The item is ready."""
        return bool(r.count <= 3)  # one character differs

    return ready


def _other_effect() -> Any:
    @effect("count")
    def bump(r: Any, i: Any) -> dict[str, Any]:
        """Count one more."""
        return {"count": r.count + 2}

    return bump


def _other_invariant() -> Any:
    @invariant
    def count_small(r: Any) -> bool:
        """count stays small."""
        return bool(r.count <= 6)

    return count_small


def _other_step() -> Any:
    @step_invariant
    def count_never_drops(before: Any, after: Any) -> bool:
        """count never decreases."""
        return bool(after.count > before.count - 1)

    return count_never_drops


def _other_beside() -> Any:
    def beside(value: int) -> int:
        """A function the rows rely on."""
        return value + 2

    beside.__qualname__ = "beside"
    return beside


@pytest.mark.parametrize("change", ["guard", "effect", "invariant", "step", "field rule",
                                    "beside"])
def test_a_changed_body_changes_the_version(change: str) -> None:
    changed = {
        "guard": lambda: {"guards": [_other_guard()]},
        "effect": lambda: {"effects": [_other_effect()]},
        "invariant": lambda: {"invariants": InvariantSet(
            "demo.state_invalid", [_other_invariant()], steps=[count_never_drops])},
        "step": lambda: {"invariants": InvariantSet(
            "demo.state_invalid", [count_small], steps=[_other_step()])},
        "field rule": lambda: {"record_type": make_record(
            matches("key_ok", r"[a-z]{1,9}"))},
        "beside": lambda: {"beside_the_table": [_other_beside()]},
    }[change]()
    other = lifecycle(**changed)
    assert other.table_version != BASE.table_version
    differing = [piece for piece, digest in code_material(other).items()
                 if code_material(BASE).get(piece) != digest]
    assert len(differing) == 1


def test_an_expressed_invariant_is_covered_by_its_expression_constants_included() -> None:
    def small(limit: int) -> Any:
        def count_small(r: Fields[Any]) -> Any:
            """count stays small."""
            return r.count <= limit
        return expressed(count_small)

    assert canonical(small(5).expression) == canonical(small(5).expression)
    assert canonical(small(5).expression) != canonical(small(6).expression)
    versions = {lifecycle(invariants=InvariantSet("demo.state_invalid", [small(n)])).table_version
                for n in (5, 5, 6)}
    assert len(versions) == 2


def test_code_without_source_is_covered_by_its_name() -> None:
    namespace: dict[str, Any] = {}
    exec("def made(r, i):\n    '''Made at run time.'''\n    return True\n", namespace)
    assert canonical(namespace["made"]).startswith("no source: ")
    assert canonical(namespace["made"]).endswith(".made")


# The shipped lifecycles' table versions, pinned. A version digests the table and the
# source of every guard, effect, invariant, step invariant, field rule and function
# declared beside it (lifecycles.machines._versioning), so it changes whenever any of
# them changes, a comment or docstring inside them included. Updating a pin is
# deliberate: it says the shipped behaviour's code changed. Regenerate the pages in
# the same commit (`lifecycles diagrams`; `lifecycles diagrams --check` fails until
# then), and re-record the status snapshot (`lifecycles check --record-statuses`).
PINNED_TABLE_VERSIONS = {"monitor": "1899cd32a9a0", "outbox": "17d8c9004010"}


def test_the_shipped_table_versions_are_pinned() -> None:
    from lifecycles._registry import registered

    shipped = registered()
    assert {name: shipped[name].table_version for name in PINNED_TABLE_VERSIONS} == (
        PINNED_TABLE_VERSIONS)


@pytest.mark.parametrize("name", sorted(PINNED_TABLE_VERSIONS))
def test_the_pages_are_generated_from_the_pinned_version(name: str) -> None:
    page = (ROOT / "diagrams" / f"{name}.md").read_text()
    assert f"table version **`{PINNED_TABLE_VERSIONS[name]}`**" in page


def test_the_version_is_the_same_in_every_process() -> None:
    program = ("from lifecycles.machines.monitor import MONITOR; "
               "from lifecycles.machines.outbox import OUTBOX; "
               "print(MONITOR.table_version, OUTBOX.table_version)")
    seen = {
        subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                       env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}, check=True,
                       ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(seen) == 1


def test_a_changed_guard_body_fails_the_diagrams_check_until_regenerated(
    tmp_path: Path
) -> None:
    module = tmp_path / "jobs.py"
    shutil.copy(ROOT / "examples" / "defects" / "late_completion.py", module)
    pages = tmp_path / "diagrams"

    def diagrams(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "lifecycles", "diagrams", "--module", str(module),
             "--output", str(pages), *extra],
            cwd=tmp_path, capture_output=True, text=True, timeout=120)

    assert diagrams().returncode == 0
    assert diagrams("--check").returncode == 0
    source = module.read_text()
    body = "return r.lease_expires_at is not None and i.now < r.lease_expires_at"
    assert body in source
    module.write_text(source.replace(body, body.replace(" < ", " <= ")))
    drifted = diagrams("--check")
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    assert "leased_jobs_late_completion.md" in drifted.stdout + drifted.stderr
    assert diagrams().returncode == 0
    assert diagrams("--check").returncode == 0


def test_a_function_a_factory_made_is_versioned_with_what_it_was_made_with() -> None:
    """outcomes() gives one source whatever triggers it names: its closure tells them apart."""
    from lifecycles.machines._versioning import digest_of
    from lifecycles.machines._work import outcomes

    same = digest_of(outcomes(success="succeed", failure="fail"))
    assert same == digest_of(outcomes(success="succeed", failure="fail"))
    assert same != digest_of(outcomes(success="succeed", failure="give_up"))


def test_the_handling_is_part_of_the_version() -> None:
    import attrs

    from lifecycles._registry import import_target
    from lifecycles.machines._mutants import redeclared
    from lifecycles.machines._work import outcomes

    tasks = import_target(str(ROOT / "tests" / "support" / "tasks.py")).TASKS
    assert tasks.handling is not None
    other = redeclared(tasks, handling=attrs.evolve(
        tasks.handling, finish=outcomes(success="succeed", failure="expire")))
    assert other.table_version != tasks.table_version
    assert redeclared(tasks).table_version == tasks.table_version
