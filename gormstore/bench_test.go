package gormstore_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/internal/testdb"
)

// benchOrder is the business row the benchmarks write.
type benchOrder struct {
	ID     int64 `gorm:"primaryKey"`
	Ref    string
	Amount int
}

// BenchmarkAtomic compares, on PostgreSQL with a pool of 16 connections, a bare GORM
// create in a transaction, the floor (the same plus one completed key row inserted before
// COMMIT), the same create through gormstore in atomic mode (claim, the create via
// gormstore.MustDB, completion and commit), by default (the single write), WithClaimRowFirst
// and WithLookupFirst, and a replay of a completed key by each of the three. Compare ratios
// within one run:
//
//	go test -run '^$' -bench BenchmarkAtomic -benchmem -benchtime 2s -count 3 ./gormstore
func BenchmarkAtomic(b *testing.B) {
	db := openPostgres(b)
	if err := db.AutoMigrate(&benchOrder{}); err != nil {
		b.Fatal(err)
	}
	table := testdb.Name("keys")
	store := gormstore.New(db, gormstore.WithTable(table))
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	prefix := testdb.Name("k")
	resp := &storage.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"id":1,"status":"created"}`)}
	fp := sha256.Sum256([]byte("POST /orders\n{}"))
	claim := func(key string) storage.Claim {
		return storage.Claim{Scope: "bench", Key: key, Fingerprint: fp[:], Method: http.MethodPost, Path: "/orders",
			Mode: storage.ModeAtomic, Lease: time.Minute, LockWait: 2 * time.Second, Retention: 24 * time.Hour}
	}

	b.Run("bare", func(b *testing.B) {
		b.SetParallelism(8) // 16 clients on 2 CPUs
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					return tx.Create(&benchOrder{Ref: "bare", Amount: 10}).Error
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})

	var n atomic.Int64
	// floor: bare plus one completed key row inserted before COMMIT, the least an
	// idempotent design can write.
	record := "INSERT INTO " + table + ` (scope, idem_key, request_hash, method, path, state, recovery_point,
	response_code, response_headers, response_body, created_at, completed_at)
VALUES (?, ?, ?, ?, ?, 'completed', 'started', ?, ?, ?, now(), statement_timestamp())`
	b.Run("floor", func(b *testing.B) {
		b.SetParallelism(8) // 16 clients on 2 CPUs
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				key := prefix + strconv.FormatInt(n.Add(1), 10)
				err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					if err := tx.Create(&benchOrder{Ref: "floor", Amount: 10}).Error; err != nil {
						return err
					}
					return tx.Exec(record, "bench", key, fp[:], http.MethodPost, "/orders", resp.Status,
						storage.EncodeHeader(resp.Header), resp.Body).Error
				})
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	rowFirst := gormstore.New(db, gormstore.WithTable(table), gormstore.WithClaimRowFirst())
	lookupFirst := gormstore.New(db, gormstore.WithTable(table), gormstore.WithLookupFirst())
	for _, v := range []struct {
		name  string
		store *gormstore.Store
	}{{"gormstore", store}, {"gormstore-row-first", rowFirst}, {"gormstore-lookup-first", lookupFirst}} {
		store := v.store
		b.Run(v.name, func(b *testing.B) {
			b.SetParallelism(8) // 16 clients on 2 CPUs
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					lock, _, err := seamtest.Split(store.Claim(ctx, claim(prefix+strconv.FormatInt(n.Add(1), 10))))
					if err != nil || lock == nil {
						b.Errorf("claim: lock %v, err %v", lock, err)
						return
					}
					if err := gormstore.MustDB(lock.Context(ctx)).Create(&benchOrder{Ref: "idem", Amount: 10}).Error; err != nil {
						_ = lock.Release(ctx)
						b.Error(err)
						return
					}
					if err := lock.Complete(ctx, resp); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}

	// The replayed key, completed once.
	replayKey := prefix + "replayed"
	lock, _, err := seamtest.Split(store.Claim(ctx, claim(replayKey)))
	if err != nil || lock == nil {
		b.Fatalf("claim: lock %v, err %v", lock, err)
	}
	if err := lock.Complete(ctx, resp); err != nil {
		b.Fatal(err)
	}
	replay := func(store storage.Store) func(b *testing.B) {
		return func(b *testing.B) {
			b.SetParallelism(8) // 16 clients on 2 CPUs
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					lock, rec, err := seamtest.Split(store.Claim(ctx, claim(replayKey)))
					if lock != nil {
						_ = lock.Release(ctx)
					}
					if err != nil || rec == nil {
						b.Errorf("replay: record %v, err %v", rec, err)
						return
					}
				}
			})
		}
	}
	b.Run("replay", replay(store))
	b.Run("replay-row-first", replay(rowFirst))
	b.Run("replay-lookup-first", replay(lookupFirst))
}
