package pgxstore

import (
	_ "embed"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed schema.sql
var schemaSQL string

// Names used in schema.sql, replaced by the configured ones.
const (
	defaultTable = "idempotency_keys"
	defaultIndex = "idempotency_keys_created_at_idx"
)

// migrateLock is the advisory lock Migrate holds, so that instances starting together do
// not race on CREATE TABLE IF NOT EXISTS (which can fail on the catalog's unique index).
const migrateLock = 0x69_64_65_6d_6b_69_74 // "idemkit"

// SQL fragments shared by the statements. Every time comparison uses the database clock.
const (
	// live is true for a started key whose lease has not run out.
	liveExpr = `(state = 'started' AND locked_until IS NOT NULL AND locked_until > now())`
	// recordCols are what a Record is built from (see claimRow.dest), between the
	// claimed flag and the clock.
	recordCols = `request_hash, method, path, state, recovery_point, locked_until, response_code,
		response_headers, response_body, created_at, completed_at`
)

// queries holds the statements of one store, with its table name quoted in.
type queries struct {
	schema   string // the DDL of schema.sql
	migrate  string // schema under an advisory lock
	claim    string // phased: claim, or return the row holding the key
	insert   string // atomic by default: claim only
	tryLock  string // atomic: the key's advisory lock, if free, and the lock wait
	lock     string // atomic: the key's advisory lock, waiting for it
	record   string // atomic: insert the completed key row
	lookup   string
	replace  string
	takeover string
	phase    string
	renew    string
	complete string
	drop     string // release a key no phase committed
	unlease  string // release a key some phase committed
	sweep    string // DeleteExpired
	count    string // CountKeys
	oldest   string // CountKeys: the oldest key
}

func newQueries(table pgx.Identifier) queries {
	t := table.Sanitize()
	index := pgx.Identifier{table[len(table)-1] + "_created_at_idx"}.Sanitize()
	schema := strings.NewReplacer(defaultIndex, index, defaultTable, t).Replace(schemaSQL)

	// expired is true for a key created longer ago than the retention ($n microseconds;
	// zero or less keeps keys for ever). With liveExpr it guards the writes that act on
	// storage.Decide's verdict (replace, takeover), in the same terms, so that a row that
	// changed since it was read is not written.
	expired := func(n int) string {
		return fmt.Sprintf(`($%[1]d::bigint > 0 AND created_at < now() - $%[1]d::bigint * interval '1 microsecond')`, n)
	}

	return queries{
		schema:  schema,
		migrate: fmt.Sprintf("SELECT pg_advisory_xact_lock(%d);\n%s", migrateLock, schema),

		// The phased claim, committing on its own. The INSERT either creates the key or,
		// when a committed row holds it, does nothing and the second branch returns that
		// row with the database's clock, for storage.Decide, so a replay is this one
		// statement. A twin in flight makes the INSERT wait for it; set_config bounds that
		// wait (lock_timeout, 55P03). It sits in the INSERT's WHERE so it runs before the
		// row is inserted, and is local to the transaction.
		//
		// $1 scope, $2 key, $3 fingerprint, $4 method, $5 path, $6 lease token,
		// $7 lease (µs), $8 lock_timeout (ms), $9 the kept request (NULL: none).
		claim: fmt.Sprintf(`WITH ins AS (
	INSERT INTO %[1]s (scope, idem_key, request_hash, method, path, state, recovery_point,
		locked_until, lease_token, created_at, request)
	SELECT $1::text, $2::text, $3::bytea, $4::text, $5::text, 'started', 'started',
		now() + $7::bigint * interval '1 microsecond', $6::uuid, now(), $9::bytea
	WHERE set_config('lock_timeout', $8::text, true) IS NOT NULL
	ON CONFLICT (scope, idem_key) DO NOTHING
	RETURNING created_at
)
SELECT true, NULL::bytea, NULL::text, NULL::text, NULL::text, NULL::text, NULL::timestamptz,
	NULL::integer, NULL::bytea, NULL::bytea, created_at, NULL::timestamptz, now()
FROM ins
UNION ALL
SELECT false, %[2]s, now()
FROM %[1]s
WHERE scope = $1 AND idem_key = $2 AND NOT EXISTS (SELECT 1 FROM ins)`, t, recordCols),

		// insert is the atomic claim: the transaction's first write, nothing else, so the
		// first request (the common case) pays for no more than the INSERT; on a conflict
		// lookup reads the holder. Arguments as for claim.
		insert: fmt.Sprintf(`INSERT INTO %s (scope, idem_key, request_hash, method, path, state, recovery_point,
	locked_until, lease_token, created_at)
SELECT $1::text, $2::text, $3::bytea, $4::text, $5::text, 'started', 'started',
	now() + $7::bigint * interval '1 microsecond', $6::uuid, now()
WHERE set_config('lock_timeout', $8::text, true) IS NOT NULL
ON CONFLICT (scope, idem_key) DO NOTHING
RETURNING true`, t),

		// tryLock takes the transaction-scoped advisory lock of a key (its hash: see
		// lockHash) without waiting, if no row holds the key: true, got it; false, a twin
		// holds it; NULL, a row holds the key (its row lock serialises what follows, so a
		// replay never touches the advisory lock). lock takes it waiting up to
		// lock_timeout. Both set lock_timeout for the rest of the transaction (the
		// handler's statements included, as the default claim INSERT does);
		// the target list is evaluated in order, so it is set before lock waits.
		// $1 lock_timeout (ms), $2 the key's hash, $3 scope, $4 key.
		tryLock: fmt.Sprintf(`SELECT set_config('lock_timeout', $1::text, true),
	CASE WHEN EXISTS (SELECT 1 FROM %s WHERE scope = $3 AND idem_key = $4) THEN NULL
	ELSE pg_try_advisory_xact_lock($2::bigint) END`, t),
		lock: `SELECT set_config('lock_timeout', $1::text, true), pg_advisory_xact_lock($2::bigint)`,

		// record inserts the completed key row, the one write of an atomic request, just
		// before COMMIT. A plain INSERT: if a twin recorded the key first it fails (23505)
		// and aborts the transaction, so the COMMIT sent with it cannot commit the
		// handler's writes. $1 scope, $2 key, $3 fingerprint, $4 method, $5 path,
		// $6 recovery point, $7 status, $8 headers, $9 body.
		record: fmt.Sprintf(`INSERT INTO %s (scope, idem_key, request_hash, method, path, state, recovery_point,
	response_code, response_headers, response_body, created_at, completed_at)
VALUES ($1, $2, $3, $4, $5, 'completed', $6, $7, $8, $9, now(), statement_timestamp())`, t),

		// lookup reads a key without claiming it, with the database's clock. $1 scope,
		// $2 key.
		lookup: fmt.Sprintf(`SELECT false, %[2]s, now() FROM %[1]s WHERE scope = $1 AND idem_key = $2`, t, recordCols),

		// replace claims a key past retention whose lease is not live, as if it were
		// absent. Conditional, so of several racers exactly one wins.
		// $1 scope, $2 key, $3 fingerprint, $4 method, $5 path, $6 token, $7 lease (µs),
		// $8 retention (µs), $9 the kept request (NULL: none).
		replace: fmt.Sprintf(`UPDATE %[1]s SET request_hash = $3, method = $4, path = $5, state = 'started',
	recovery_point = 'started', locked_until = now() + $7::bigint * interval '1 microsecond',
	lease_token = $6::uuid, response_code = NULL, response_headers = NULL, response_body = NULL,
	created_at = now(), completed_at = NULL, request = $9::bytea, completer_attempts = 0, next_attempt = NULL,
	released_at = NULL
WHERE scope = $1 AND idem_key = $2 AND %[2]s AND NOT %[3]s
RETURNING created_at`, t, expired(8), liveExpr),

		// takeover claims a started key whose lease ran out, for the same request, with a
		// fresh token; it keeps the recovery point. Exactly one racer wins.
		// $1 scope, $2 key, $3 fingerprint, $4 token, $5 lease (µs), $6 retention (µs).
		takeover: fmt.Sprintf(`UPDATE %[1]s SET lease_token = $4::uuid,
	locked_until = now() + $5::bigint * interval '1 microsecond'
WHERE scope = $1 AND idem_key = $2 AND state = 'started' AND request_hash = $3
	AND (locked_until IS NULL OR locked_until <= now()) AND NOT %[2]s
RETURNING recovery_point`, t, expired(6)),

		// phase records a recovery point and renews the lease, fenced by the token.
		// $1 scope, $2 key, $3 token, $4 point, $5 lease (µs).
		phase: fmt.Sprintf(`UPDATE %s SET recovery_point = $4,
	locked_until = statement_timestamp() + $5::bigint * interval '1 microsecond'
WHERE scope = $1 AND idem_key = $2 AND lease_token = $3::uuid AND state = 'started'`, t),

		// renew extends the lease, fenced by the token, unless Release ended it (a
		// renewal still in flight then extends nothing). $1 scope, $2 key, $3 token,
		// $4 lease (µs).
		renew: fmt.Sprintf(`UPDATE %s SET locked_until = statement_timestamp() + $4::bigint * interval '1 microsecond'
WHERE scope = $1 AND idem_key = $2 AND lease_token = $3::uuid AND state = 'started' AND locked_until IS NOT NULL`, t),

		// complete records the response, fenced by the token, which the completed row
		// keeps: a Release after a completion whose reply was lost recognises it (unlease).
		// $1 scope, $2 key, $3 token, $4 status, $5 headers, $6 body.
		complete: fmt.Sprintf(`UPDATE %s SET state = 'completed', response_code = $4, response_headers = $5,
	response_body = $6, completed_at = statement_timestamp(), locked_until = NULL, request = NULL
WHERE scope = $1 AND idem_key = $2 AND lease_token = $3::uuid AND state = 'started'`, t),

		// $1 scope, $2 key, $3 token.
		// Only a key still at its first point: a phase whose COMMIT outcome this worker
		// never learned (connection lost) may have committed, and its progress must stay.
		drop: fmt.Sprintf(`DELETE FROM %s
WHERE scope = $1 AND idem_key = $2 AND lease_token = $3::uuid AND state = 'started' AND recovery_point = 'started'`, t),
		// unlease ends the lease of a key this token holds and keeps the token, or finds
		// the key completed by this token (a completion whose reply was lost) and changes
		// nothing: its locked_until is already NULL. A started key records when it was
		// released (released_at): core.Completer's grace runs from it. $1 scope, $2 key,
		// $3 token.
		unlease: fmt.Sprintf(`UPDATE %s SET locked_until = NULL,
	released_at = CASE WHEN state = 'started' THEN now() ELSE released_at END
WHERE scope = $1 AND idem_key = $2 AND lease_token = $3::uuid`, t),

		// DeleteExpired: the oldest keys created before $1, at most $2, skipping live
		// leases and rows another transaction holds, by primary key (ctid is not stable
		// on every PostgreSQL-like engine).
		sweep: fmt.Sprintf(`DELETE FROM %[1]s AS k USING (
	SELECT scope, idem_key FROM %[1]s WHERE created_at < $1 AND NOT %[2]s
	ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED) AS d
WHERE k.scope = d.scope AND k.idem_key = d.idem_key`, t, liveExpr),

		// CountKeys, an operator's query over the whole table. $1 retention (µs).
		count: fmt.Sprintf(`SELECT count(*) FILTER (WHERE state = 'started'), count(*) FILTER (WHERE state = 'completed'),
	count(*) FILTER (WHERE %[2]s), count(*) FILTER (WHERE %[3]s), count(*) FILTER (WHERE %[3]s AND %[2]s), now()
FROM %[1]s`, t, liveExpr, expired(1)),
		oldest: fmt.Sprintf(`SELECT scope, idem_key, state, created_at FROM %s ORDER BY created_at LIMIT 1`, t),
	}
}
