package pgxstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemkit/idem/core/storage"
)

var _ storage.Completable = (*Store)(nil)

// completerQueries are the statements of core.Completer (storage.Completable) and the
// Lookup that reports what it keeps.
type completerQueries struct {
	lookup    string
	abandoned string
	begin     string
}

func newCompleterQueries(table pgx.Identifier) completerQueries {
	t := table.Sanitize()
	abandoned := fmt.Sprintf(`SELECT scope, idem_key, request_hash, method, path, recovery_point, locked_until,
		created_at, request, completer_attempts, next_attempt
	FROM %[1]s
	WHERE state = 'started' AND request IS NOT NULL
		AND coalesce(locked_until, released_at, '-infinity') <= now() - $1::bigint * interval '1 microsecond'
		AND created_at > now() - $2::bigint * interval '1 microsecond'
		AND completer_attempts < $3 AND (next_attempt IS NULL OR next_attempt <= now())
	ORDER BY created_at LIMIT $4`, t)
	return completerQueries{
		// lookup is the store's lookup with the completer's columns after the clock.
		// $1 scope, $2 key.
		lookup: fmt.Sprintf(`SELECT false, %[2]s, now(), request, completer_attempts, next_attempt
FROM %[1]s WHERE scope = $1 AND idem_key = $2`, t, recordCols),
		// abandoned: one row of arrays (the DB interface has no Query), oldest first.
		// $1 grace (µs), $2 horizon (µs), $3 max attempts, $4 limit.
		abandoned: `SELECT coalesce(array_agg(scope ORDER BY created_at), '{}'), coalesce(array_agg(idem_key ORDER BY created_at), '{}'),
	coalesce(array_agg(request_hash ORDER BY created_at), '{}'), coalesce(array_agg(method ORDER BY created_at), '{}'),
	coalesce(array_agg(path ORDER BY created_at), '{}'), coalesce(array_agg(recovery_point ORDER BY created_at), '{}'),
	coalesce(array_agg(locked_until ORDER BY created_at), '{}'), coalesce(array_agg(created_at ORDER BY created_at), '{}'),
	coalesce(array_agg(request ORDER BY created_at), '{}'), coalesce(array_agg(completer_attempts ORDER BY created_at), '{}'),
	coalesce(array_agg(next_attempt ORDER BY created_at), '{}')
FROM (` + abandoned + `) a`,
		// begin counts an attempt: a compare-and-set on the attempts seen, only while the
		// key is started and its lease not live. $1 scope, $2 key, $3 seen, $4 backoff (µs).
		begin: fmt.Sprintf(`UPDATE %[1]s SET completer_attempts = $3 + 1,
	next_attempt = now() + $4::bigint * interval '1 microsecond'
WHERE scope = $1 AND idem_key = $2 AND completer_attempts = $3 AND NOT %[2]s AND state = 'started'`, t, liveExpr),
	}
}

// Abandoned implements storage.Completable: one statement, on the database's clock.
func (s *Store) Abandoned(ctx context.Context, q storage.AbandonedQuery) ([]*storage.Record, error) {
	if q.Limit <= 0 {
		return nil, nil
	}
	var (
		scopes, keys, methods, paths, points []string
		hashes, requests                     [][]byte
		locked, next                         []pgtype.Timestamptz
		created                              []time.Time
		attempts                             []int32
	)
	err := s.scan(ctx, nil, 0, s.cq.abandoned,
		[]any{q.Grace.Microseconds(), q.Horizon.Microseconds(), q.MaxAttempts, q.Limit},
		&scopes, &keys, &hashes, &methods, &paths, &points, &locked, &created, &requests, &attempts, &next)
	if err != nil {
		return nil, classify(ctx, "list abandoned keys", err, false)
	}
	recs := make([]*storage.Record, 0, len(keys))
	for i := range keys {
		req, err := storage.DecodeRequest(requests[i])
		if err != nil {
			// A kept request this version cannot read (a newer format, a damaged value) is
			// left to its client; it must not stop the keys behind it.
			continue
		}
		recs = append(recs, &storage.Record{Scope: scopes[i], Key: keys[i], Fingerprint: hashes[i], Method: methods[i], Path: paths[i],
			State: storage.StateStarted, RecoveryPoint: points[i], LockedUntil: locked[i].Time, CreatedAt: created[i],
			Request: req, Attempts: int(attempts[i]), NextAttempt: next[i].Time})
	}
	return recs, nil
}

// BeginAttempt implements storage.Completable: one conditional UPDATE.
func (s *Store) BeginAttempt(ctx context.Context, scope, key string, seen int, backoff time.Duration) (bool, error) {
	ct, err := s.exec(ctx, nil, s.cq.begin, scope, key, seen, backoff.Microseconds())
	if err != nil {
		return false, classify(ctx, "begin a completer attempt", err, false)
	}
	return ct.RowsAffected() == 1, nil
}
