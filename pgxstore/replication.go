package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotReplicated reports a COMMIT that PostgreSQL acknowledged with the warning
// "canceling wait for synchronous replication … The transaction has already committed
// locally, but might not have been replicated to the standby": its wait for the
// synchronous standby was cut (a cancel request, pg_cancel_backend) before the standby
// confirmed it, so a failover could take it back. A completion or a phase that ends so
// fails with this error (the engine answers 503 not-recorded; a retry with the same key
// replays the response if the commit survived, or runs again if a failover took it back).
// It is seen only on connections configured with WatchReplication.
var ErrNotReplicated = errors.New("pgxstore: committed on the primary but not confirmed by the synchronous standby")

// WatchReplication makes connections made from cfg report commits whose wait for
// synchronous replication was cut (ErrNotReplicated) to the store: set it on the pool's
// connection configuration before the pool is made. It keeps cfg's own OnNotice, which
// still gets every notice.
//
//	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
//	if err != nil { ... }
//	pgxstore.WatchReplication(&cfg.ConnConfig.Config)
//	pool, err := pgxpool.NewWithConfig(ctx, cfg)
//
// Without it such a commit counts as recorded: a client may get a 201 that a failover to
// the standby takes back. The warning is recognised in English (lc_messages C or en).
func WatchReplication(cfg *pgconn.Config) {
	next := cfg.OnNotice
	cfg.OnNotice = func(c *pgconn.PgConn, n *pgconn.Notice) {
		if isUnreplicated(n) {
			unreplicated.Store(c, struct{}{})
		}
		if next != nil {
			next(c, n)
		}
	}
}

// unreplicated holds the connections whose last COMMIT came back with the warning, until
// the store reads it (tookUnreplicated).
var unreplicated sync.Map // *pgconn.PgConn → struct{}

// isUnreplicated reports PostgreSQL's warning of a cut synchronous-replication wait
// (syncrep.c), whether a cancel or a termination cut it.
func isUnreplicated(n *pgconn.Notice) bool {
	return n.Severity == "WARNING" && (strings.Contains(n.Message, "synchronous replication") ||
		strings.Contains(n.Detail, "might not have been replicated"))
}

// replicated returns ErrNotReplicated, wrapped, when a COMMIT on c came back with the
// warning of a cut synchronous-replication wait since the last call, and forgets the
// warning. On a connection the store holds, call it before the COMMIT too, to drop a
// warning a COMMIT of the application's own left; never on one a pool's transaction gave
// back at its Commit, which another request may hold by then. (A
// warning left by the application's own COMMIT then fails the store's next completion on
// that connection: a 503 whose retry replays.)
func replicated(c *pgconn.PgConn, op string) error {
	if c == nil {
		return nil
	}
	if _, ok := unreplicated.LoadAndDelete(c); ok {
		return fmt.Errorf("pgxstore: %s: %w", op, ErrNotReplicated)
	}
	return nil
}

// execCommitted runs a fenced write of op: in tx, or (tx nil) on its own, then a
// completion on a connection the store holds for it, so that a cut synchronous-replication
// wait of its implicit commit is seen (ErrNotReplicated).
func (s *Store) execCommitted(ctx context.Context, tx pgx.Tx, op, sql string, args ...any) (pgconn.CommandTag, error) {
	if tx != nil || op != "complete" {
		return s.exec(ctx, tx, sql, args...)
	}
	h, ok, err := s.dedicated(ctx)
	if !ok {
		return s.exec(ctx, nil, sql, args...)
	}
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer h.giveBack()
	_ = replicated(h.conn.PgConn(), "")
	ct, err := h.conn.Exec(ctx, sql, args...)
	if err == nil {
		err = replicated(h.conn.PgConn(), op)
	}
	return ct, err
}
