package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/gormstore"
	"github.com/idemkit/idem/internal/seamtest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
	"github.com/idemkit/idem/redisstore"
)

// TestMain fails the run on leaked goroutines, except the pool that internal/testdb
// keeps open for the whole run.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/puddle/v2.(*Pool).createIdleResources"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

// idem runs the command in-process.
func idem(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(t.Context(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// backend is a database the CLI runs against, with a store of the library on it to
// make keys the way a server would.
type backend struct {
	name string
	// setup returns the -db value and a store on table.
	setup func(t *testing.T, table string) (db string, store storage.Store)
}

var backends = []backend{
	{"postgres", func(t *testing.T, table string) (string, storage.Store) {
		url, _ := testdb.PostgresSchema(t)
		pool, err := pgxpool.New(t.Context(), url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return url, pgxstore.New(pool, pgxstore.WithTable(table))
	}},
	{"mariadb", func(t *testing.T, table string) (string, storage.Store) {
		dsn, _ := testdb.MySQLDatabase(t)
		db, err := sql.Open("mysql", dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		g, err := gorm.Open(gormmysql.New(gormmysql.Config{Conn: db}), &gorm.Config{Logger: logger.Discard})
		require.NoError(t, err)
		return "mysql://" + dsn, gormstore.New(g, gormstore.WithTable(table))
	}},
	{"sqlite", func(t *testing.T, table string) (string, storage.Store) {
		path := testdb.SQLitePath(t)
		db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		g, err := gorm.Open(&sqlite.Dialector{Conn: db}, &gorm.Config{Logger: logger.Discard})
		require.NoError(t, err)
		return "sqlite:" + path, gormstore.New(g, gormstore.WithTable(table))
	}},
}

// seed makes keys as a server does: completed ones through the middleware, and one
// started key with a live lease (a phased request in flight), released at cleanup.
func seed(t *testing.T, store storage.Store, completed int) {
	t.Helper()
	eng, err := core.New(core.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	mw := eng.Middleware(func(r *http.Request) string { return "alice" })
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/v1/orders/"+r.Header.Get("Idempotency-Key"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprint(w, `{"id":"`+r.Header.Get("Idempotency-Key")+`"}`)
	}))
	for i := range completed {
		req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{"item":"book"}`))
		req.Header.Set("Idempotency-Key", fmt.Sprintf("k%d", i+1))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	}
	fp := sha256.Sum256([]byte("in flight"))
	lock, rec, err := seamtest.Split(store.Claim(t.Context(), storage.Claim{Scope: "alice", Key: "inflight", Fingerprint: fp[:],
		Method: http.MethodPost, Path: "/v1/payments", Mode: storage.ModePhased, Lease: time.Minute,
		LockWait: time.Second, Retention: 24 * time.Hour}))
	require.NoError(t, err)
	require.Nil(t, rec)
	t.Cleanup(func() { _ = lock.Release(context.Background()) })
}

func TestMigrateShowStatsSweep(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			const table = "idem_keys"
			db, store := b.setup(t, table)
			dbt := []string{"-db", db, "-table", table}

			_, stderr, code := idem(t, append([]string{"stats"}, dbt...)...)
			assert.Equal(t, 1, code)
			assert.Contains(t, stderr, `table idem_keys not found`)
			assert.Contains(t, stderr, `run "idem migrate -db … -table idem_keys" first`)

			out, stderr, code := idem(t, append([]string{"migrate"}, dbt...)...)
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, out, "table idem_keys created")
			out, stderr, code = idem(t, append([]string{"migrate"}, dbt...)...)
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, out, "table idem_keys already there")

			seed(t, store, 3)

			out, stderr, code = idem(t, append([]string{"show", "-scope", "alice", "-key", "k1"}, dbt...)...)
			require.Equal(t, 0, code, stderr)
			for _, want := range []string{"state           completed", "retry now gets  a replay of 201",
				"method          POST", "path            /v1/orders", "stored status   201",
				"Location: /v1/orders/k1", "Content-Type: application/json", "body size       11 bytes", "lease           none"} {
				assert.Contains(t, out, want)
			}
			assert.Regexp(t, `fingerprint +[0-9a-f]{64}\n`, out)
			assert.Regexp(t, `completed +20\d\d-`, out)

			out, stderr, code = idem(t, append([]string{"show", "-scope", "alice", "-key", "inflight"}, dbt...)...)
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, out, "state           started")
			assert.Contains(t, out, "retry now gets  409 in progress until")
			assert.Regexp(t, `lease +live until .* \(\d+(\.\d+)?s left\)`, out)
			assert.Contains(t, out, "stored status   -")

			out, _, code = idem(t, append([]string{"show", "-scope", "bob", "-key", "k1"}, dbt...)...)
			assert.Equal(t, 1, code)
			assert.Contains(t, out, `key "k1" in scope "bob": not found in idem_keys`)

			out, stderr, code = idem(t, append([]string{"stats"}, dbt...)...)
			require.Equal(t, 0, code, stderr)
			assert.Regexp(t, `keys +4\n`, out)
			assert.Regexp(t, `completed +3\n`, out)
			assert.Regexp(t, `started +1 \(1 with a live lease: in flight; 0 resumable by a retry\)`, out)
			assert.Regexp(t, `oldest key +.* \(scope "alice", key "k1", completed\)`, out)
			assert.Regexp(t, `expired, not yet swept +0 \(`, out)

			// With a retention of 1ms every key is soon expired; the live lease is kept.
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				out, _, _ := idem(t, append([]string{"stats", "-retention", "1ms"}, dbt...)...)
				assert.Regexp(c, `expired, not yet swept +4 \(.*; 1 of them hold a live lease and are kept\)`, out)
			}, 10*time.Second, 20*time.Millisecond)

			out, stderr, code = idem(t, append([]string{"sweep", "-retention", "1ms", "-batch", "2"}, dbt...)...)
			require.Equal(t, 0, code, stderr)
			assert.Contains(t, out, "batch 1: deleted 2 (2 so far")
			assert.Contains(t, out, "batch 2: deleted 1 (3 so far")
			assert.Contains(t, out, "swept 3 expired keys in 2 batches")

			out, stderr, code = idem(t, append([]string{"stats"}, dbt...)...)
			require.Equal(t, 0, code, stderr)
			assert.Regexp(t, `keys +1\n`, out)
		})
	}
}

func TestDefaultTableOnSQLiteFilePath(t *testing.T) {
	path := testdb.SQLitePath(t)
	_, stderr, code := idem(t, "stats", "-db", path)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "no such file or directory (run idem migrate first")
	out, stderr, code := idem(t, "migrate", "-db", path)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "table idempotency_keys created in SQLite")
	out, stderr, code = idem(t, "stats", "-db", path)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `keys +0\n`, out)
	assert.Contains(t, out, "oldest key              -")
}

func TestMySQLURLForm(t *testing.T) {
	dsn, database := testdb.MySQLDatabase(t)
	require.True(t, strings.HasPrefix(dsn, "root@tcp(127.0.0.1:3306)/"), "this test assumes the local default server: %s", dsn)
	out, stderr, code := idem(t, "migrate", "-db", "mysql://root@127.0.0.1:3306/"+database)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "created in MySQL/MariaDB")
}

func TestBadCommandLines(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage: idem <command>"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"stats"}, "-db is required"},
		{[]string{"stats", "-db", "mongodb://localhost"}, `scheme "mongodb" is not supported`},
		{[]string{"stats", "-db", "redis://localhost:notaport"}, "not a Redis URL"},
		{[]string{"stats", "-db", "redis://localhost", "-table", "t"}, "Redis keys go by -prefix"},
		{[]string{"stats", "-db", "x.db", "-prefix", "p:"}, "-prefix is for Redis"},
		{[]string{"stats", "-db", "postgres://u:p@host:notaport/db"}, "not a PostgreSQL URL"},
		{[]string{"stats", "-db", "mysql://root@tcp(127.0.0.1:3306"}, "not a MySQL DSN"},
		{[]string{"stats", "-db", "mysql://root@127.0.0.1:3306"}, "names no database"},
		{[]string{"stats", "-db", "sqlite:"}, "no file after sqlite:"},
		{[]string{"stats", "-db", "x.db", "-retention", "-1h"}, "want a positive duration"},
		{[]string{"sweep", "-db", "x.db", "-batch", "0"}, "-batch 0: want a positive number"},
		{[]string{"show", "-db", "x.db"}, "-scope and -key are required"},
		{[]string{"show", "-db", "x.db", "-scope", "a", "-key", "b", "extra"}, `unexpected argument "extra"`},
		{[]string{"check"}, "-url is required"},
		{[]string{"check", "-url", "localhost:8080/v1/orders"}, "want http(s)://host/path"},
		{[]string{"check", "-url", "http://a/v1/orders", "-url", "http://b/v1/other"}, "every -url must name the same route"},
		{[]string{"check", "-url", "http://a/v1/orders", "-header", "NoColon"}, "want 'Name: value'"},
		{[]string{"check", "-url", "http://a/v1/orders", "-body", "@/nonexistent.json"}, "no such file"},
		{[]string{"check", "-url", "http://a/v1/orders", "-parallel", "1"}, "Parallel 1: want at least 2"},
	} {
		_, stderr, code := idem(t, c.args...)
		assert.Equal(t, 2, code, "%q: %s", c.args, stderr)
		assert.Contains(t, stderr, c.want, "%q", c.args)
	}
	// A password never shows in a message.
	_, stderr, code := idem(t, "stats", "-db", "postgres://postgres:s3cret@127.0.0.1:1/test")
	assert.Equal(t, 1, code)
	assert.NotContains(t, stderr, "s3cret")
	assert.Contains(t, stderr, "postgres:xxxxx@")
	_, stderr, _ = idem(t, "stats", "-db", "mysql://root:s3cret@tcp(127.0.0.1:1)/test")
	assert.NotContains(t, stderr, "s3cret")
	_, _, code = idem(t, "migrate", "-h")
	assert.Equal(t, 0, code)
}

// silent accepts connections and never answers: a database that hangs.
func silent(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

func TestUnreachableDatabaseIsABoundedWait(t *testing.T) {
	t.Parallel()
	for name, db := range map[string]func(addr string) string{
		"postgres": func(addr string) string { return "postgres://postgres@" + addr + "/test?sslmode=disable" },
		"mariadb":  func(addr string) string { return "mysql://root@tcp(" + addr + ")/test" },
		"redis":    func(addr string) string { return "redis://" + addr },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			_, stderr, code := idem(t, "stats", "-db", db(silent(t)))
			assert.Equal(t, 1, code)
			assert.Contains(t, stderr, "within 5s")
			assert.Less(t, time.Since(began), 8*time.Second)
		})
	}
	_, stderr, code := idem(t, "stats", "-db", "postgres://postgres@127.0.0.1:1/test?sslmode=disable")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "cannot connect to PostgreSQL at postgres://postgres@127.0.0.1:1/test")
	assert.Contains(t, stderr, "connection refused")
}

// TestShowStatsOnRedis: show and stats read a redisstore's keys through the store, on the
// Redis server's clock; migrate and sweep say they have nothing to do.
func TestShowStatsOnRedis(t *testing.T) {
	t.Parallel()
	client, prefix := testdb.Redis(t)
	store := redisstore.New(client, redisstore.WithPrefix(prefix))
	seed(t, store, 2)
	db := []string{"-db", "redis://" + testdb.RedisAddr() + "/0", "-prefix", prefix}

	out, stderr, code := idem(t, append([]string{"migrate"}, db...)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "nothing to migrate in Redis at redis://")
	out, stderr, code = idem(t, append([]string{"sweep"}, db...)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "nothing to sweep in Redis at redis://")

	out, stderr, code = idem(t, append([]string{"show", "-scope", "alice", "-key", "k2"}, db...)...)
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{"state           completed", "retry now gets  a replay of 201", "path            /v1/orders",
		"stored status   201", "Location: /v1/orders/k2", "body size       11 bytes", "lease           none"} {
		assert.Contains(t, out, want)
	}
	out, stderr, code = idem(t, append([]string{"show", "-scope", "alice", "-key", "inflight"}, db...)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "retry now gets  409 in progress until")
	out, _, code = idem(t, append([]string{"show", "-scope", "bob", "-key", "k1"}, db...)...)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, `key "k1" in scope "bob": not found in Redis at redis://`)

	out, stderr, code = idem(t, append([]string{"stats"}, db...)...)
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `prefix +"`+prefix+`" \(Redis at redis://`, out)
	assert.Regexp(t, `keys +3\n`, out)
	assert.Regexp(t, `completed +2\n`, out)
	assert.Regexp(t, `started +1 \(1 with a live lease: in flight; 0 resumable by a retry\)`, out)
	assert.Regexp(t, `oldest key +.* \(scope "alice", key "k1", completed\)`, out)
	assert.Regexp(t, `expired, not yet swept +0 \(`, out)

	// Past a retention of 1ms every key counts as expired (the live lease is kept), and show
	// says a retry runs afresh.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, _, _ := idem(t, append([]string{"stats", "-retention", "1ms"}, db...)...)
		assert.Regexp(c, `expired, not yet swept +3 \(.*; 1 of them hold a live lease and are kept; Redis removes them itself\)`, out)
	}, 10*time.Second, 20*time.Millisecond)
	out, stderr, code = idem(t, append([]string{"show", "-retention", "1ms", "-scope", "alice", "-key", "k1"}, db...)...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "retry now gets  a fresh run: the key is past the retention")
	assert.Contains(t, out, "expired         yes")
}

// TestShowDoKey: a key Engine.Do wrote is shown as a message ID with its result, not as an
// HTTP request with a status.
func TestShowDoKey(t *testing.T) {
	t.Parallel()
	b := backends[0]
	db, store := b.setup(t, "do_keys")
	_, stderr, code := idem(t, "migrate", "-db", db, "-table", "do_keys")
	require.Equal(t, 0, code, stderr)
	eng, err := core.New(core.Config{Store: store})
	require.NoError(t, err)
	_, _, err = eng.Do(t.Context(), "billing", "msg-1", []byte("payload"), func(context.Context) ([]byte, error) {
		return []byte(`{"charged":1}`), nil
	})
	require.NoError(t, err)

	out, stderr, code := idem(t, "show", "-db", db, "-table", "do_keys", "-scope", "billing", "-key", "msg-1")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "written by       Engine.Do: a message or job ID, not an HTTP request")
	assert.Contains(t, out, "redelivery gets  the recorded result (13 bytes), replayed without running fn")
	assert.Contains(t, out, "result           13 bytes")
	for _, http := range []string{"method", "path", "stored status", "retry now gets"} {
		assert.NotContains(t, out, http)
	}
}

// TestRedisURLs: a Redis URL is one node, or a Cluster when it names further nodes.
func TestRedisURLs(t *testing.T) {
	t.Parallel()
	o, err := redisOptions("redis://u:p@127.0.0.1:6380/2")
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:6380"}, o.Addrs)
	assert.Equal(t, 2, o.DB)
	assert.Equal(t, "p", o.Password)
	assert.False(t, o.IsClusterMode)
	o, err = redisOptions("redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002")
	require.NoError(t, err)
	assert.True(t, o.IsClusterMode)
	assert.Equal(t, []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}, o.Addrs)
	u, err := parseDB("rediss://u:s3cret@example.com:6380")
	require.NoError(t, err)
	assert.Equal(t, redisDB, u.dialect)
	assert.NotContains(t, u.shown, "s3cret")
}

// TestOneSpellingOfMySQLURLs: the MySQL URL idem help shows is the one the gormstore
// README, the README and the example servers' page show.
func TestOneSpellingOfMySQLURLs(t *testing.T) {
	const spelling = "mysql://user:pass@host:3306/db"
	require.Contains(t, usage, spelling)
	for _, doc := range []string{"../../gormstore/README.md", "../../README.md", "../../examples/README.md"} {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		assert.Contains(t, string(b), spelling, doc)
		assert.NotContains(t, string(b), "mysql://user:password@", doc)
	}
}
