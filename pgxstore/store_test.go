package pgxstore_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/core/storetest"
	"github.com/idemkit/idem/internal/reliability"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// TestConformance runs the store conformance suite on a pool, at both isolation levels
// the store supports, with both atomic claims: the default single write (the key's
// advisory lock, the completed row inserted at Complete; at REPEATABLE READ it writes the
// row first) and WithClaimRowFirst; each subtest has its own schema, with an orders
// table written through pgxstore.MustTx, and the stall and lost-reply tests a pool behind a
// fault proxy.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, v := range []struct {
		name string
		opts []pgxstore.Option
	}{{"single-write", nil}, {"row-first", []pgxstore.Option{pgxstore.WithClaimRowFirst()}}} {
		for _, level := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead} {
			opts := append([]pgxstore.Option{pgxstore.WithIsolation(level)}, v.opts...)
			t.Run(v.name+"/"+string(level), func(t *testing.T) {
				t.Parallel()
				storetest.RunHarness(t, storetest.Harness{
					New: func(t *testing.T) storetest.Subject {
						pool := sharedPool(t)
						store, schema := newStore(t, pool, opts...)
						require.NotNil(t, store)
						return storetest.Subject{Store: store, Tx: ordersTx(t, pool, schema)}
					},
					Stalling: func(t *testing.T) (storage.Store, func() func()) {
						p, err := reliability.Listen(postgresServer(t))
						require.NoError(t, err)
						t.Cleanup(func() { _ = p.Close() })
						store, _ := newStore(t, proxiedPool(t, p.Addr()), opts...)
						return store, func() func() { p.Stall(); return p.Resume }
					},
					LosingReplies: func(t *testing.T) (storage.Store, func() <-chan struct{}) {
						p, err := reliability.Listen(postgresServer(t))
						require.NoError(t, err)
						t.Cleanup(func() { _ = p.Close() })
						store, _ := newStore(t, proxiedPool(t, p.Addr()), opts...)
						return store, p.LoseNextReply
					},
				})
			})
		}
	}
}

// TestLockHashIsGormstores: the store locks the advisory lock number gormstore locks for
// the same table and key (the values internal/keyrow pins).
func TestLockHashIsGormstores(t *testing.T) {
	t.Parallel()
	pool := sharedPool(t)
	require.Equal(t, int64(2482266343148212868), pgxstore.New(pool).LockHash("alice", "k1"))
	require.Equal(t, int64(6952158868718321469),
		pgxstore.New(pool, pgxstore.WithTable("billing.idem_keys")).LockHash("tenant-42", "3f2c9a1e-0b7d-4c55-9a0e-6d1f2b3c4d5e"))
}

// requestTx is the request's transaction, or ErrNoTx. A transaction that could not begin
// reports its error from every method.
func requestTx(ctx context.Context) (pgx.Tx, error) {
	tx, ok := pgxstore.TxFromContext(ctx)
	if !ok {
		return nil, pgxstore.ErrNoTx
	}
	return tx, nil
}

// ordersTx is storetest's TxHooks on a fresh orders table in schema: rows written through
// pgxstore.MustTx, committed ones counted on pool.
func ordersTx(t *testing.T, pool *pgxpool.Pool, schema string) *storetest.TxHooks {
	table := pgx.Identifier{schema, "orders"}.Sanitize()
	exec(t, pool, "CREATE TABLE "+table+" (id bigserial PRIMARY KEY, label text NOT NULL)")
	return &storetest.TxHooks{
		Write: func(ctx context.Context, label string) error {
			tx, err := requestTx(ctx)
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, "INSERT INTO "+table+" (label) VALUES ($1)", label)
			return err
		},
		Count: func(ctx context.Context, label string) (int, error) {
			var n int
			err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE label = $1", label).Scan(&n)
			return n, err
		},
		Commit: func(ctx context.Context) error {
			tx, err := requestTx(ctx)
			if err != nil {
				return err
			}
			return tx.Commit(ctx)
		},
		Rollback: func(ctx context.Context) error {
			tx, err := requestTx(ctx)
			if err != nil {
				return err
			}
			return tx.Rollback(ctx)
		},
	}
}

// postgresServer is the host:port of the test server.
func postgresServer(t testing.TB) string {
	u, err := url.Parse(testdb.PostgresURL())
	require.NoError(t, err)
	return u.Host
}

// proxiedPool opens a small pool on the test server through the proxy at addr, closed
// when the test ends.
func proxiedPool(t testing.TB, addr string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.PostgresURL())
	require.NoError(t, err)
	host, port, err := splitHostPort(addr)
	require.NoError(t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, port
	cfg.MaxConns = 4
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func splitHostPort(addr string) (string, uint16, error) {
	var host string
	var port uint16
	u, err := url.Parse("//" + addr)
	if err != nil {
		return "", 0, err
	}
	host = u.Hostname()
	_, err = fmt.Sscan(u.Port(), &port)
	return host, port, err
}
