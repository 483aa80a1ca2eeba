-- The reference monitor's schema, as named blocks: `-- name: <name>`, a one-line
-- description, then the statement. lifecycles/monitor_schema.py parses this text once
-- and renders each block once per dialect. Braces are filled from the dialect and from
-- the monitor's table, never from input: {text} {integer} {real} type names,
-- {collation} the text collation, {param} the driver's parameter marker, {statuses}
-- every declared status, {leased} the lease trigger's dest, {version} the schema
-- version. Values travel as parameters.
--
-- The table keeps the reference's name, columns and CHECKs, so a database written by
-- either implementation opens in the other. Its lease-order index is derived by the
-- store from the lease declaration (cms_source_terminal_processing_due).

-- name: create_meta
-- The meta table: one row binding the database to one capabilities hash.
CREATE TABLE IF NOT EXISTS cms_source_terminal_processing_meta (
    singleton {integer} PRIMARY KEY CHECK (singleton = 1),
    schema_version {integer} NOT NULL CHECK (schema_version = {version}),
    expected_capabilities_sha256 {text} NOT NULL
)

-- name: bind_meta
-- Bind a new database (version, capabilities); an existing row stays, and is verified.
INSERT INTO cms_source_terminal_processing_meta VALUES (1, {param}, {param})
ON CONFLICT (singleton) DO NOTHING

-- name: create_table
-- The records: a lease's owner, token and expiry are set exactly while leased.
CREATE TABLE IF NOT EXISTS cms_source_terminal_processing (
    event_id {text}{collation} PRIMARY KEY, notification_id {text} NOT NULL UNIQUE,
    site_id {text} NOT NULL, terminal_status {text} NOT NULL,
    notification_sha256 {text} NOT NULL,
    status {text} NOT NULL CHECK (status IN ({statuses})),
    poll_attempts {integer} NOT NULL CHECK (poll_attempts >= 0),
    failures {integer} NOT NULL CHECK (failures >= 0),
    max_failures {integer} NOT NULL CHECK (max_failures BETWEEN 1 AND 20),
    next_poll_at {real} NOT NULL, lease_owner {text}, lease_token {text},
    lease_expires_at {real}, last_error_code {text}, receiver_status {text},
    receiver_attempts {integer}, receiver_max_attempts {integer},
    receiver_next_attempt_at {real}, receiver_lease_expires_at {real},
    receiver_lease_expired {integer}, receiver_error_code {text},
    receiver_processed_at {real}, created_at {real} NOT NULL,
    updated_at {real} NOT NULL,
    CHECK ((status = {leased} AND lease_owner IS NOT NULL
            AND lease_token IS NOT NULL AND lease_expires_at IS NOT NULL)
           OR (status <> {leased} AND lease_owner IS NULL
               AND lease_token IS NULL AND lease_expires_at IS NULL))
)

-- name: legacy_meta
-- A version-1 meta table's row: (1, 1) when the database predates the binding.
SELECT singleton, schema_version FROM cms_source_terminal_processing_meta

-- name: any_record
-- One record, if there is any: a version-1 database holding rows cannot be bound.
SELECT 1 FROM cms_source_terminal_processing LIMIT 1

-- name: drop_legacy_meta
-- Migration from version 1 (empty database): the meta table is created again, bound.
DROP TABLE cms_source_terminal_processing_meta
