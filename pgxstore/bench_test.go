package pgxstore_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/pgxstore"
)

// benchParallelism makes b.RunParallel start (about) one goroutine per pool connection:
// it starts parallelism × GOMAXPROCS goroutines.
func benchParallelism() int { return max(1, poolSize/runtime.GOMAXPROCS(0)) }

// benchSetup returns a pool of poolSize, a store on it and the schema holding its table
// and an orders table.
func benchSetup(b *testing.B, opts ...pgxstore.Option) (*pgxpool.Pool, *pgxstore.Store, string) {
	b.Helper()
	db := newPool(b, poolSize, nil)
	store, schema := newStore(b, db, opts...)
	exec(b, db, fmt.Sprintf(`CREATE TABLE %s.orders (id bigserial PRIMARY KEY, idem_key text NOT NULL, amount int NOT NULL)`, schema))
	return db, store, schema
}

func benchClaim(key string) storage.Claim {
	fp := sha256.Sum256([]byte("POST /orders\n" + `{"amount":100}`))
	return storage.Claim{Scope: "bench", Key: key, Fingerprint: fp[:], Method: http.MethodPost, Path: "/orders",
		Mode: storage.ModeAtomic, Lease: time.Minute, LockWait: 2 * time.Second, Retention: 24 * time.Hour}
}

var benchResponse = storage.Response{
	Status: http.StatusCreated,
	Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/1"}},
	Body:   []byte(`{"id":1,"amount":100,"status":"created"}`),
}

// BenchmarkAtomic compares creating an order in a plain transaction (bare: BEGIN;
// INSERT; COMMIT) with creating it through the store in atomic mode (idem: claim, the
// same INSERT in the lock's transaction, completion), each with b.RunParallel on a pool
// of 16 connections and a fresh key per operation.
func BenchmarkAtomic(b *testing.B) {
	var seq atomic.Int64
	b.Run("bare", func(b *testing.B) {
		db, _, schema := benchSetup(b)
		insert := fmt.Sprintf(`INSERT INTO %s.orders (idem_key, amount) VALUES ($1, $2)`, schema)
		b.SetParallelism(benchParallelism())
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				key := "bare-" + strconv.FormatInt(seq.Add(1), 10)
				tx, err := db.Begin(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := tx.Exec(ctx, insert, key, 100); err != nil {
					_ = tx.Rollback(ctx)
					b.Error(err)
					return
				}
				if err := tx.Commit(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("idem", func(b *testing.B) {
		_, store, schema := benchSetup(b)
		insert := fmt.Sprintf(`INSERT INTO %s.orders (idem_key, amount) VALUES ($1, $2)`, schema)
		b.SetParallelism(benchParallelism())
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				key := "idem-" + strconv.FormatInt(seq.Add(1), 10)
				lock, _, err := store.Claim(ctx, benchClaim(key))
				if err != nil || lock == nil {
					b.Errorf("claim: lock %v, err %v", lock, err)
					return
				}
				lctx := lock.Context(ctx)
				if _, err := pgxstore.Tx(lctx).Exec(lctx, insert, key, 100); err != nil {
					_ = lock.Release(ctx)
					b.Error(err)
					return
				}
				resp := benchResponse
				if err := lock.Complete(ctx, &resp); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkReplay claims a completed key over and over (the store answers with its
// record), in parallel on a pool of 16; lookup-first reads it outside a transaction.
func BenchmarkReplay(b *testing.B) {
	for _, v := range []struct {
		name string
		opts []pgxstore.Option
	}{{"atomic", nil}, {"atomic-lookup-first", []pgxstore.Option{pgxstore.WithLookupFirst()}}, {"phased", nil}} {
		b.Run(v.name, func(b *testing.B) {
			_, store, _ := benchSetup(b, v.opts...)
			ctx := context.Background()
			c := benchClaim("replayed")
			if v.name == "phased" {
				c.Mode = storage.ModePhased
			}
			lock, _, err := store.Claim(ctx, c)
			if err != nil || lock == nil {
				b.Fatalf("claim: %v", err)
			}
			resp := benchResponse
			if err := lock.Complete(ctx, &resp); err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(benchParallelism())
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, rec, err := store.Claim(ctx, c)
					if err != nil || rec == nil || rec.State != storage.StateCompleted {
						b.Errorf("replay: rec %v, err %v", rec, err)
						return
					}
				}
			})
		})
	}
}
