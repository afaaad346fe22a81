-- The lifetime ledger in PostgreSQL, set up once by the administrator (docs/deployment.md):
--
--   psql -v steward=selpe_steward -f scripts/ledger-postgres.sql postgresql://admin@host/db
--
-- Run it as the role that is to own the ledger (never the steward's). It creates three
-- tables, owned by that role, which the steward's role may read and append to only:
-- a trigger refuses every UPDATE, DELETE and TRUNCATE, whoever asks, and the steward is
-- granted nothing else, so no rollback or rewrite is possible from the enclave's account.
-- (The owner can still drop the triggers: keep the owner's credentials away from the
-- enclave.) The ledger's id and its secret key (which keys the people's hashes) are made
-- here from PostgreSQL's random UUIDs; `selpe-audit` reads them from ledger_meta.

\set ON_ERROR_STOP on

CREATE TABLE ledger_meta (
    ledger_id text NOT NULL CHECK (ledger_id ~ '^[0-9a-f]{16}$'),
    key bytea NOT NULL CHECK (length(key) = 32)
);
CREATE TABLE ledger_events (
    seq bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    event jsonb NOT NULL
);
CREATE TABLE ledger_people (
    rid text PRIMARY KEY,
    people bytea NOT NULL
);

CREATE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the lifetime ledger is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = '42501';
END
$$;

CREATE TRIGGER ledger_meta_append_only BEFORE UPDATE OR DELETE ON ledger_meta
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_meta_no_truncate BEFORE TRUNCATE ON ledger_meta
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_events_append_only BEFORE UPDATE OR DELETE ON ledger_events
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_events_no_truncate BEFORE TRUNCATE ON ledger_events
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_people_append_only BEFORE UPDATE OR DELETE ON ledger_people
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_people_no_truncate BEFORE TRUNCATE ON ledger_people
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();

INSERT INTO ledger_meta (ledger_id, key) VALUES (
    substr(replace(gen_random_uuid()::text, '-', ''), 1, 16),
    decode(replace(gen_random_uuid()::text, '-', '')
           || replace(gen_random_uuid()::text, '-', ''), 'hex'));

REVOKE ALL ON ledger_meta, ledger_events, ledger_people FROM PUBLIC;
GRANT SELECT ON ledger_meta TO :"steward";
GRANT SELECT, INSERT ON ledger_events, ledger_people TO :"steward";
GRANT USAGE ON SEQUENCE ledger_events_seq_seq TO :"steward";
