-- The lifetime ledger in PostgreSQL, set up once by the administrator (docs/deployment.md):
--
--   psql -v steward=selpe_steward [-v max_epsilon=10 -v max_delta=1e-5] \
--        -f scripts/ledger-postgres.sql postgresql://admin@host/db
--
-- Run it as the role that is to own the ledger (never the steward's). The steward's role gets
-- no table at all: only EXECUTE on the functions below, which run as the owner (SECURITY
-- DEFINER) and check every event before they write it. The database assigns release ids,
-- sequence numbers and times; refuses a number that is not finite or is negative, a second
-- reservation of a dataset past the ceiling, a people record or an end for a release that was
-- not reserved (or twice); and computes each person's spend itself, from its own record of
-- every release's epsilon, refusing a release that takes anyone past the ceiling. A trigger
-- refuses every UPDATE, DELETE and TRUNCATE, whoever asks. (The owner can still drop the
-- triggers: keep the owner's credentials away from the enclave.)
--
-- Two secrets are made here from PostgreSQL's random UUIDs: the record key (the steward reads
-- it, through ledger_info, to hash records) and the linkage key, which never leaves the
-- database: ledger_link hashes the linkage digests a release sends with it.

\set ON_ERROR_STOP on
\if :{?max_epsilon}
\else
\set max_epsilon 10
\endif
\if :{?max_delta}
\else
\set max_delta 1e-5
\endif
SELECT current_schema() AS ledger_schema \gset

CREATE TABLE ledger_meta (
    ledger_id text NOT NULL CHECK (ledger_id ~ '^[0-9a-f]{16}$'),
    key bytea NOT NULL CHECK (length(key) = 32),
    link_key bytea NOT NULL CHECK (length(link_key) = 32),
    max_epsilon float8 NOT NULL CHECK (max_epsilon > 0 AND max_epsilon < 'Infinity'),
    max_delta float8 NOT NULL CHECK (max_delta >= 0 AND max_delta < 1)
);
CREATE TABLE ledger_events (
    seq bigserial PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT now(),
    event jsonb NOT NULL
);
-- one row per release: what the functions check against (the events say the same)
CREATE TABLE ledger_releases (
    number integer PRIMARY KEY,           -- 0, 1, 2...: the bit of the people's histories
    rid text NOT NULL UNIQUE CHECK (rid ~ '^[0-9a-f]{12}$'),
    dataset text NOT NULL,
    epsilon float8 NOT NULL CHECK (epsilon > 0 AND epsilon < 'Infinity'),
    delta float8 NOT NULL CHECK (delta >= 0 AND delta < 1),
    people boolean NOT NULL DEFAULT false,
    measuring boolean NOT NULL DEFAULT false,
    status text CHECK (status IN ('released', 'aborted'))
);
CREATE TABLE ledger_people (
    rid text PRIMARY KEY REFERENCES ledger_releases (rid),
    people bytea NOT NULL,
    history bytea NOT NULL,               -- each person's releases, words x 8 bytes, LE
    words integer NOT NULL CHECK (words >= 0)
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
-- a release's row changes only forward (its flags set once, its status once), never back
CREATE FUNCTION ledger_release_forward() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'UPDATE' OR NEW.number <> OLD.number OR NEW.rid <> OLD.rid
            OR NEW.dataset <> OLD.dataset OR NEW.epsilon <> OLD.epsilon
            OR NEW.delta <> OLD.delta OR (OLD.people AND NOT NEW.people)
            OR (OLD.measuring AND NOT NEW.measuring)
            OR (OLD.status IS NOT NULL AND NEW.status IS DISTINCT FROM OLD.status) THEN
        RAISE EXCEPTION 'the lifetime ledger is append-only: % on % refused', TG_OP,
            TG_TABLE_NAME USING ERRCODE = '42501';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER ledger_releases_forward BEFORE UPDATE OR DELETE ON ledger_releases
    FOR EACH ROW EXECUTE FUNCTION ledger_release_forward();
CREATE TRIGGER ledger_releases_no_truncate BEFORE TRUNCATE ON ledger_releases
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();

INSERT INTO ledger_meta (ledger_id, key, link_key, max_epsilon, max_delta) VALUES (
    substr(replace(gen_random_uuid()::text, '-', ''), 1, 16),
    decode(replace(gen_random_uuid()::text, '-', '')
           || replace(gen_random_uuid()::text, '-', ''), 'hex'),
    decode(replace(gen_random_uuid()::text, '-', '')
           || replace(gen_random_uuid()::text, '-', ''), 'hex'),
    :'max_epsilon'::float8, :'max_delta'::float8);

-- ----- the steward's functions ---------------------------------------------------------------
-- Each runs as the owner with a fixed search_path (this schema, then pg_temp), takes the
-- ledger's lock for its transaction, checks, and writes the event itself.

CREATE FUNCTION ledger_refuse(why text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'selpe-audit ledger: %', why USING ERRCODE = '22023';
END
$$;

CREATE FUNCTION ledger_is_number(x float8, upper float8) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS $$ SELECT x IS NOT NULL AND x >= 0 AND x < upper $$;

CREATE FUNCTION ledger_info(OUT ledger_id text, OUT key bytea, OUT max_epsilon float8,
                            OUT max_delta float8)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = :"ledger_schema", pg_temp AS $$
    SELECT ledger_id, key, max_epsilon, max_delta FROM ledger_meta
$$;

CREATE FUNCTION ledger_read(OUT seq bigint, OUT event text)
    RETURNS SETOF record
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = :"ledger_schema", pg_temp AS $$
    SELECT seq, (CASE WHEN event->>'kind' = 'raise' THEN event  -- signed as it is
                      ELSE event || jsonb_build_object('at', to_char(
                          at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')) END)::text
    FROM ledger_events ORDER BY seq
$$;

CREATE FUNCTION ledger_read_people(p_rid text, OUT people bytea, OUT history bytea,
                                   OUT words integer)
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = :"ledger_schema", pg_temp AS $$
    SELECT people, history, words FROM ledger_people WHERE rid = p_rid
$$;

-- Linkage digests (8 bytes each, concatenated) keyed with the linkage key: 8 bytes each.
CREATE FUNCTION ledger_link(digests bytea) RETURNS bytea
    LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = :"ledger_schema", pg_temp AS $$
DECLARE
    k bytea := (SELECT link_key FROM ledger_meta);
    out bytea;
BEGIN
    IF digests IS NULL OR length(digests) % 8 <> 0 THEN
        PERFORM ledger_refuse('linkage digests must be 8 bytes each');
    END IF;
    SELECT coalesce(string_agg(substr(sha256(k || substr(digests, i * 8 + 1, 8)), 1, 8), ''
                               ORDER BY i), ''::bytea)
        INTO out FROM generate_series(0, length(digests) / 8 - 1) AS i;
    RETURN out;
END
$$;

-- What a release counts for: what it reserved, unless aborted before its first mechanism.
CREATE FUNCTION ledger_counts(r ledger_releases) RETURNS boolean
    LANGUAGE sql IMMUTABLE AS $$
    SELECT NOT (r.status IS NOT DISTINCT FROM 'aborted' AND NOT r.measuring)
$$;

CREATE FUNCTION ledger_reserve(p_dataset text, p_epsilon float8, p_delta float8, p_note text,
                               p_lifetime_epsilon float8, p_lifetime_delta float8)
    RETURNS text
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = :"ledger_schema", pg_temp AS $$
DECLARE
    m ledger_meta;
    rid text := substr(replace(gen_random_uuid()::text, '-', ''), 1, 12);
    n integer;
    spent float8;
BEGIN
    PERFORM pg_advisory_xact_lock(6467115472613);
    SELECT * INTO m FROM ledger_meta;
    IF p_dataset IS NULL OR p_dataset = '' OR length(p_dataset) > 200 THEN
        PERFORM ledger_refuse('a dataset name of 1 to 200 characters');
    END IF;
    IF NOT ledger_is_number(p_epsilon, 'Infinity') OR p_epsilon = 0
            OR NOT ledger_is_number(p_delta, 1) THEN
        PERFORM ledger_refuse('epsilon must be finite and above 0, delta in [0, 1)');
    END IF;
    IF NOT EXISTS (SELECT 1 FROM ledger_events
                   WHERE event->>'kind' = 'dataset' AND event->>'dataset' = p_dataset) THEN
        IF NOT ledger_is_number(p_lifetime_epsilon, 'Infinity') OR p_lifetime_epsilon = 0
                OR NOT ledger_is_number(p_lifetime_delta, 1) THEN
            PERFORM ledger_refuse('a dataset''s lifetime epsilon must be finite and above 0, '
                                  'its delta in [0, 1)');
        END IF;
        INSERT INTO ledger_events (event) VALUES (jsonb_build_object(
            'kind', 'dataset', 'dataset', p_dataset,
            'lifetime_epsilon', least(p_lifetime_epsilon, m.max_epsilon),
            'lifetime_delta', least(p_lifetime_delta, m.max_delta)));
    END IF;
    SELECT coalesce(sum(r.epsilon) FILTER (WHERE ledger_counts(r)), 0) INTO spent
        FROM ledger_releases r WHERE r.dataset = p_dataset;
    IF spent + p_epsilon > m.max_epsilon * (1 + 1e-12) THEN
        PERFORM ledger_refuse(format('dataset %s: %s spent + %s asked passes the ceiling %s',
                                     p_dataset, spent, p_epsilon, m.max_epsilon));
    END IF;
    SELECT coalesce(max(number) + 1, 0) INTO n FROM ledger_releases;
    INSERT INTO ledger_releases (number, rid, dataset, epsilon, delta)
        VALUES (n, rid, p_dataset, p_epsilon, p_delta);
    INSERT INTO ledger_events (event) VALUES (jsonb_build_object(
        'kind', 'reserve', 'rid', rid, 'dataset', p_dataset, 'epsilon', p_epsilon,
        'delta', p_delta, 'note', left(coalesce(p_note, ''), 500)));
    RETURN rid;
END
$$;

-- A release's people (People.to_bytes) with each one's history: the releases they matched,
-- as bits over the release numbers. Refused unless the release is reserved and has not
-- started or ended; each person's spend is computed here, and must stay within the ceiling.
CREATE FUNCTION ledger_charge(p_rid text, p_people bytea, p_count integer, p_history bytea,
                              p_words integer)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = :"ledger_schema", pg_temp AS $$
DECLARE
    m ledger_meta;
    r ledger_releases;
    h bytea;
    worst_eps float8 := 0;
    worst_delta float8 := 0;
    eps float8;
    del float8;
    b integer;
    rel ledger_releases;
BEGIN
    PERFORM pg_advisory_xact_lock(6467115472613);
    SELECT * INTO m FROM ledger_meta;
    SELECT * INTO r FROM ledger_releases WHERE rid = p_rid;
    IF NOT FOUND THEN
        PERFORM ledger_refuse('people for a release that was not reserved');
    END IF;
    IF r.people OR r.measuring OR r.status IS NOT NULL THEN
        PERFORM ledger_refuse('people for a release already charged, started or ended');
    END IF;
    IF p_people IS NULL OR p_count IS NULL OR p_count < 0 OR p_words IS NULL OR p_words < 0
            OR p_history IS NULL OR length(p_history) <> p_count * p_words * 8
            OR p_words * 64 < r.number + 1 THEN
        PERFORM ledger_refuse('a people record needs a history of words x 8 bytes a person, '
                              'wide enough for this release');
    END IF;
    -- every distinct history once: its releases (bits), their epsilons as recorded here
    FOR h IN SELECT DISTINCT substr(p_history, i * p_words * 8 + 1, p_words * 8)
             FROM generate_series(0, p_count - 1) AS i LOOP
        eps := 0;
        del := 0;
        FOR b IN SELECT g FROM generate_series(0, p_words * 64 - 1) AS g
                 WHERE get_bit(h, g) = 1 LOOP
            SELECT * INTO rel FROM ledger_releases WHERE number = b;
            IF NOT FOUND OR b > r.number THEN
                PERFORM ledger_refuse('a history names a release the ledger does not hold');
            END IF;
            IF b <> r.number AND ledger_counts(rel) THEN
                eps := eps + rel.epsilon;
                del := del + rel.delta;
            END IF;
        END LOOP;
        IF get_bit(h, r.number) = 0 THEN
            PERFORM ledger_refuse('a history must hold the release that charges it');
        END IF;
        worst_eps := greatest(worst_eps, eps);
        worst_delta := greatest(worst_delta, del);
    END LOOP;
    IF worst_eps + r.epsilon > m.max_epsilon * (1 + 1e-12)
            OR worst_delta + r.delta > m.max_delta * (1 + 1e-9) THEN
        PERFORM ledger_refuse(format('a person would pass the ceiling (epsilon %s, delta %s)',
                                     m.max_epsilon, m.max_delta));
    END IF;
    INSERT INTO ledger_people (rid, people, history, words)
        VALUES (p_rid, p_people, p_history, p_words);
    UPDATE ledger_releases SET people = true WHERE rid = p_rid;
    INSERT INTO ledger_events (event) VALUES (jsonb_build_object(
        'kind', 'people', 'rid', p_rid, 'people', p_count,
        'sha256', encode(sha256(p_people), 'hex')));
END
$$;

CREATE FUNCTION ledger_measuring(p_rid text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = :"ledger_schema", pg_temp AS $$
DECLARE
    r ledger_releases;
BEGIN
    PERFORM pg_advisory_xact_lock(6467115472613);
    SELECT * INTO r FROM ledger_releases WHERE rid = p_rid;
    IF NOT FOUND OR NOT r.people OR r.measuring OR r.status IS NOT NULL THEN
        PERFORM ledger_refuse('a mechanism may start only once, for a reserved release whose '
                              'people were charged');
    END IF;
    UPDATE ledger_releases SET measuring = true WHERE rid = p_rid;
    INSERT INTO ledger_events (event) VALUES (jsonb_build_object('kind', 'measuring',
                                                                 'rid', p_rid));
END
$$;

-- How a release ended: released (after its first mechanism; what it spent, at most what it
-- reserved) or aborted (refunded only before its first mechanism).
CREATE FUNCTION ledger_end(p_rid text, p_status text, p_epsilon float8, p_delta float8,
                           p_why text)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = :"ledger_schema", pg_temp AS $$
DECLARE
    r ledger_releases;
    e jsonb;
BEGIN
    PERFORM pg_advisory_xact_lock(6467115472613);
    SELECT * INTO r FROM ledger_releases WHERE rid = p_rid;
    IF NOT FOUND OR r.status IS NOT NULL THEN
        PERFORM ledger_refuse('an end for a release that was not reserved, or ended');
    END IF;
    IF p_status IS NULL OR p_status NOT IN ('released', 'aborted')
            OR (p_status = 'released' AND NOT r.measuring) THEN
        PERFORM ledger_refuse('a release ends released (after its mechanisms) or aborted');
    END IF;
    IF (p_epsilon IS NOT NULL AND NOT (ledger_is_number(p_epsilon, 'Infinity')
                                       AND p_epsilon <= r.epsilon * (1 + 1e-9)))
            OR (p_delta IS NOT NULL AND NOT (ledger_is_number(p_delta, 1)
                                             AND p_delta <= r.delta * (1 + 1e-9) + 1e-300)) THEN
        PERFORM ledger_refuse('a release spends a finite epsilon and delta, at most what it '
                              'reserved');
    END IF;
    UPDATE ledger_releases SET status = p_status WHERE rid = p_rid;
    e := jsonb_build_object('kind', 'end', 'rid', p_rid, 'status', p_status);
    IF p_epsilon IS NOT NULL THEN e := e || jsonb_build_object('epsilon', p_epsilon); END IF;
    IF p_delta IS NOT NULL THEN e := e || jsonb_build_object('delta', p_delta); END IF;
    IF p_why IS NOT NULL THEN e := e || jsonb_build_object('why', left(p_why, 200)); END IF;
    INSERT INTO ledger_events (event) VALUES (e);
END
$$;

-- A signed raise of a dataset's caps: kept as it is (selpe-audit checks its signature against
-- the installation's raise keys when it reads the ledger); never past the ceiling.
CREATE FUNCTION ledger_raise(p_record text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = :"ledger_schema", pg_temp AS $$
DECLARE
    m ledger_meta;
    e jsonb := p_record::jsonb;
BEGIN
    PERFORM pg_advisory_xact_lock(6467115472613);
    SELECT * INTO m FROM ledger_meta;
    IF jsonb_typeof(e) <> 'object' OR e->>'kind' <> 'raise'
            OR NOT EXISTS (SELECT 1 FROM ledger_events WHERE event->>'kind' = 'dataset'
                           AND event->>'dataset' = e->>'dataset')
            OR jsonb_typeof(e->'lifetime_epsilon'->'to') <> 'number'
            OR jsonb_typeof(e->'lifetime_delta'->'to') <> 'number'
            OR NOT ledger_is_number((e->'lifetime_epsilon'->>'to')::float8, 'Infinity')
            OR NOT ledger_is_number((e->'lifetime_delta'->>'to')::float8, 1)
            OR (e->'lifetime_epsilon'->>'to')::float8 > m.max_epsilon
            OR (e->'lifetime_delta'->>'to')::float8 > m.max_delta THEN
        PERFORM ledger_refuse('a raise names a dataset of the ledger and finite caps within '
                              'the ceiling');
    END IF;
    INSERT INTO ledger_events (event) VALUES (e);
END
$$;

REVOKE ALL ON ledger_meta, ledger_events, ledger_releases, ledger_people FROM PUBLIC;
REVOKE ALL ON FUNCTION ledger_info(), ledger_read(), ledger_read_people(text),
    ledger_link(bytea), ledger_reserve(text, float8, float8, text, float8, float8),
    ledger_charge(text, bytea, integer, bytea, integer), ledger_measuring(text),
    ledger_end(text, text, float8, float8, text), ledger_raise(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_info(), ledger_read(), ledger_read_people(text),
    ledger_link(bytea), ledger_reserve(text, float8, float8, text, float8, float8),
    ledger_charge(text, bytea, integer, bytea, integer), ledger_measuring(text),
    ledger_end(text, text, float8, float8, text), ledger_raise(text) TO :"steward";
