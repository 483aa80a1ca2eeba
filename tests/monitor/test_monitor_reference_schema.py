"""The monitor's reference schema: named SQL blocks, its status lists and claim-order index
rendered from the table (typed nowhere in the SQL text), the reference's column widths."""

from __future__ import annotations

import attrs
import pytest

from lifecycles.machines import lease
from lifecycles.machines.monitor import MONITOR
from lifecycles.monitor.schema import QUERIES, MonitorSchema, parse_named_blocks, render
from lifecycles.stores import SQLSchema
from lifecycles.stores.postgres import PostgresDialect
from lifecycles.stores.sqlite import SQLiteDialect


def test_named_blocks_parse_once_and_refuse_a_repeated_name() -> None:
    assert parse_named_blocks("-- head\n-- name: a\n-- what a is\nSELECT 1\n") == {
        "a": "SELECT 1"
    }
    with pytest.raises(ValueError, match="two SQL blocks"):
        parse_named_blocks("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")
    assert {"create_meta", "bind_meta", "create_table"} <= set(QUERIES)


@pytest.mark.parametrize("dialect", [SQLiteDialect(), PostgresDialect()], ids=lambda d: d.name)
def test_status_lists_in_the_schema_come_from_the_table(dialect: SQLiteDialect) -> None:
    create = render("create_table", dialect)
    statuses = ", ".join(f"'{status.value}'" for status in MONITOR.statuses)
    assert f"status IN ({statuses})" in create
    assert f"status = '{lease.leased_status(MONITOR)}'" in create
    for status in MONITOR.statuses:  # typed nowhere in the SQL text itself
        assert f"'{status.value}'" not in "\n".join(QUERIES.values())


def test_the_claim_order_index_and_due_query_name_the_claimable_statuses() -> None:
    claimable = lease.claimable_statuses(MONITOR)
    index = PostgresDialect().claim_order_index(MonitorSchema("c" * 64))
    assert index is not None
    assert index.endswith(f"IN ({', '.join(repr(s) for s in claimable)})")




def test_the_generic_and_the_reference_schema_type_the_monitor_s_columns() -> None:
    schema = SQLSchema(MONITOR)
    assert schema.table == "lifecycle_monitor" and schema.code_prefix == "lifecycles."
    assert schema.column_names == tuple(f.name for f in attrs.fields(MONITOR.record_type))
    kinds = {column.name: column.kind for column in schema.columns}
    assert kinds["created_at"] == "real" and kinds["failures"] == "bigint"
    assert kinds["status"] == "text"
    assert MonitorSchema("c" * 64).columns[6].kind == "integer"  # the reference's width
