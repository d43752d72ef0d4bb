package pgxstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/pgxstore"
)

// completerBody is a ~230-byte nested JSON payment, the size the in-memory benchmarks use.
const completerBody = `{"amount_cents":1250,"currency":"EUR","customer":{"id":"cus_8f2a91","email":"alice@example.com",` +
	`"address":{"line1":"1 Rue de la Paix","city":"Paris","postal_code":"75002","country":"FR"}},"metadata":{"order":"ord_42","note":"gift"}}`

// completerApp is a phased payment route on store, one phase then the final write, that
// fails after its phase while fail is set.
func completerApp(b *testing.B, store *pgxstore.Store, schema string, keep bool, fail *atomic.Bool) (*core.Engine, http.Handler) {
	cfg := core.Config{Store: store, Mode: core.ModePhased, KeepRequest: keep}
	if keep {
		cfg.KeepHeaders = []string{"Content-Type"}
	}
	eng, err := core.New(cfg)
	require.NoError(b, err)
	insert := "INSERT INTO " + schema + ".orders (idem_key, amount) VALUES ($1, $2)"
	mux := http.NewServeMux()
	mux.Handle("POST /payments", eng.Middleware(func(*http.Request) string { return "bench" })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		op := core.MustOperation(ctx)
		if err := op.Phase(ctx, "charge_created", func(context.Context) error { return nil }); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if fail != nil && fail.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		if _, err := pgxstore.MustTx(ctx).Exec(ctx, insert, op.Key(), 1250); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(benchResponse.Body)
	})))
	return eng, mux
}

// BenchmarkKeepRequest: what core.Config.KeepRequest costs a first request on pgxstore, a
// phased payment with one phase: the claim's INSERT carries the encoded request (body and
// Content-Type). bytes/key is what the started row holds more while the operation is
// unfinished (octet_length of the request column; the completion clears it).
//
//	go test -run '^$' -bench BenchmarkKeepRequest -benchmem ./pgxstore
func BenchmarkKeepRequest(b *testing.B) {
	db := benchPool(b)
	for _, keep := range []bool{false, true} {
		name := "off"
		if keep {
			name = "on"
		}
		store, schema := benchTables(b, db, nil)
		var fail atomic.Bool
		_, h := completerApp(b, store, schema, keep, &fail)
		var seq atomic.Int64
		b.Run(name, func(b *testing.B) {
			body := strings.NewReader(completerBody)
			r := httptest.NewRequest(http.MethodPost, "/payments", nil)
			r.Header.Set("Content-Type", "application/json")
			w := &discard{h: make(http.Header)}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				body.Reset(completerBody)
				r.Body = io.NopCloser(body)
				r.Header["Idempotency-Key"] = []string{"first-" + strconv.FormatInt(seq.Add(1), 10)}
				clear(w.h)
				h.ServeHTTP(w, r)
				if w.status != http.StatusCreated {
					b.Fatalf("status %d", w.status)
				}
			}
			b.StopTimer()
			// One abandoned key: the bytes its row keeps for the completer.
			fail.Store(true)
			body.Reset(completerBody)
			r.Body = io.NopCloser(body)
			r.Header["Idempotency-Key"] = []string{"abandoned-" + strconv.FormatInt(seq.Add(1), 10)}
			h.ServeHTTP(w, r)
			fail.Store(false)
			var n int
			require.NoError(b, db.QueryRow(context.Background(), fmt.Sprintf(
				`SELECT coalesce(octet_length(request), 0) FROM %s.idempotency_keys WHERE idem_key = $1`, schema),
				r.Header.Get("Idempotency-Key")).Scan(&n))
			b.ReportMetric(float64(n), "bytes/key")
		})
	}
}

// completerBatch is how many abandoned payments one pass of BenchmarkCompleterPass finishes.
const completerBatch = 100

// BenchmarkCompleterPass: how fast core.Completer finishes abandoned payments on
// pgxstore, one pass over completerBatch keys per iteration (the keys are made with the
// timer stopped: a first attempt that fails after its phase). completions/s is the rate
// of one completer, one key after another.
//
//	go test -run '^$' -bench BenchmarkCompleterPass -benchtime 10x ./pgxstore
func BenchmarkCompleterPass(b *testing.B) {
	db := benchPool(b)
	store, schema := benchTables(b, db, nil)
	var fail atomic.Bool
	eng, h := completerApp(b, store, schema, true, &fail)
	c := &core.Completer{Engine: eng, Handler: h, Grace: time.Nanosecond, BatchSize: completerBatch}
	var seq atomic.Int64
	var spent time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		fail.Store(true)
		for range completerBatch {
			r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(completerBody))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Idempotency-Key", "k-"+strconv.FormatInt(seq.Add(1), 10))
			w := &discard{h: make(http.Header)}
			h.ServeHTTP(w, r)
			if w.status != http.StatusBadGateway {
				b.Fatalf("status %d", w.status)
			}
		}
		fail.Store(false)
		b.StartTimer()
		began := time.Now()
		n, err := c.Pass(context.Background())
		spent += time.Since(began)
		if err != nil || n != completerBatch {
			b.Fatalf("Pass: %d completed, %v", n, err)
		}
	}
	b.ReportMetric(float64(completerBatch*b.N)/spent.Seconds(), "completions/s")
}
