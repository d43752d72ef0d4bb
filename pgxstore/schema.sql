-- pgxstore: the idempotency key table (PostgreSQL 13+, also CockroachDB/YugabyteDB/Citus).
--
-- Store.Migrate runs this file with the configured table name substituted for
-- idempotency_keys; it is idempotent and may be run by hand instead. One row per
-- (scope, idem_key): the scope is the caller (account, tenant), so keys never collide
-- across callers, and every statement the store runs filters on it (a Citus table is
-- distributed by scope).
CREATE TABLE IF NOT EXISTS idempotency_keys (
    scope            text        NOT NULL,
    idem_key         text        NOT NULL,
    -- SHA-256 of the canonical request (method, path, body): a key sent again with
    -- another request is answered 422. The request body itself is never stored.
    request_hash     bytea       NOT NULL,
    method           text        NOT NULL DEFAULT '',
    path             text        NOT NULL DEFAULT '',
    -- started: a request holds (or held) the key; completed: the response is recorded.
    state            text        NOT NULL DEFAULT 'started'
                                 CHECK (state IN ('started', 'completed')),
    -- Last committed phase of a phased request ('started' before any).
    recovery_point   text        NOT NULL DEFAULT 'started',
    -- Lease of a started key (database clock) and its fencing token: a phase commit,
    -- the completion and a release only apply while lease_token is still theirs.
    locked_until     timestamptz,
    lease_token      uuid,
    -- The recorded response, replayed byte for byte: status, allow-listed headers
    -- ("Name: value" lines, storage.EncodeHeader) and the body as bytes, never jsonb.
    response_code    integer,
    response_headers bytea,
    response_body    bytea,
    created_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    -- core.Completer (core.Config.KeepRequest): the request kept to run an abandoned
    -- operation again (storage.EncodeRequest; NULL unless kept, cleared on completion),
    -- the completer's attempts on the key, when it may try next, and when a failed
    -- attempt released the lease (its grace runs from then).
    request            bytea,
    completer_attempts integer     NOT NULL DEFAULT 0,
    next_attempt       timestamptz,
    released_at        timestamptz,
    PRIMARY KEY (scope, idem_key)
);

-- A table made before the completer's columns existed gets them here.
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS request bytea,
    ADD COLUMN IF NOT EXISTS completer_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS next_attempt timestamptz,
    ADD COLUMN IF NOT EXISTS released_at timestamptz;

-- Expiry: DeleteExpired removes the oldest keys first.
CREATE INDEX IF NOT EXISTS idempotency_keys_created_at_idx ON idempotency_keys (created_at);
