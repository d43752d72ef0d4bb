package demo

import (
	"errors"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParseConfigDefaults(t *testing.T) {
	t.Parallel()
	c, err := ParseConfig("x", nil, env(), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Addr: "127.0.0.1:8080", Store: StorePgx, Redis: DefaultRedis, RedisPrefix: "idem:", Lease: 60 * time.Second, LogLevel: slog.LevelInfo}
	if c != want {
		t.Fatalf("defaults: got %+v, want %+v", c, want)
	}
	if kind, target := c.database(); kind != kindSQLite || target != DefaultSQLiteFile {
		t.Fatalf("database() = %s %s, want the SQLite file %s", kind, target, DefaultSQLiteFile)
	}
}

func TestParseConfigEnvThenFlags(t *testing.T) {
	t.Parallel()
	e := env("ADDR", ":9000", "DATABASE_URL", "postgres://u@h/db", "IDEM_STORE", "gorm", "IDEM_LEASE", "5s",
		"IDEM_CRASH_AFTER", "charge_created", "LOG_LEVEL", "debug")
	c, err := ParseConfig("x", nil, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{Addr: ":9000", DB: "postgres://u@h/db", Store: StoreGorm, Redis: DefaultRedis, RedisPrefix: "idem:",
		Lease: 5 * time.Second, CrashAfter: "charge_created", LogLevel: slog.LevelDebug}
	if c != want {
		t.Fatalf("from the environment: got %+v, want %+v", c, want)
	}
	c, err = ParseConfig("x", []string{"-addr", ":9001", "-db", "sqlite:/tmp/x.db", "-store", "pgx", "-lease", "7",
		"-crash-after", "started", "-log-level", "warn"}, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want = Config{Addr: ":9001", DB: "sqlite:/tmp/x.db", Store: StorePgx, Redis: DefaultRedis, RedisPrefix: "idem:",
		Lease: 7 * time.Second, CrashAfter: "started", LogLevel: slog.LevelWarn}
	if c != want {
		t.Fatalf("flags over the environment: got %+v, want %+v", c, want)
	}
	if kind, target := c.database(); kind != kindSQLite || target != "/tmp/x.db" {
		t.Fatalf("database() = %s %s, want SQLite /tmp/x.db", kind, target)
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  func(string) string
		want string
	}{
		{[]string{"-store", "sqlx"}, env(), "-store"},
		{nil, env("IDEM_STORE", "nope"), "-store"},
		{[]string{"-lease", "0s"}, env(), "-lease"},
		{[]string{"-lease", "soon"}, env(), "lease"},
		{nil, env("IDEM_LEASE", "soon"), "IDEM_LEASE"},
		{[]string{"-lease", "25h"}, env(), "retention"},
		{[]string{"-crash-after", "finished"}, env(), "-crash-after"},
		{[]string{"-db", "mysql://root@h"}, env(), "-db"},
		{[]string{"-db", "mysql://root:secret@h:port/db"}, env(), "xxxxx"},
		{[]string{"-db", "root:secret@tcp(h:3306)/"}, env(), "xxxxx"},
		{[]string{"-db", "oracle://u@h/db"}, env(), "-db"},
		{[]string{"-db", "sqlite:"}, env(), "-db"},
		{[]string{"-db", "postgresx://u:secret@h/db"}, env(), "xxxxx"},
		{[]string{"extra"}, env(), "unexpected argument"},
		{nil, env("LOG_LEVEL", "loud"), "LOG_LEVEL"},
		{[]string{"-store", "redis", "-redis", "localhost"}, env(), "-redis"},
		{[]string{"-store", "redis", "-redis", "localhost:http"}, env(), "-redis"},
		{[]string{"-store", "redis", "-redis", "localhost:0"}, env(), "-redis"},
		{[]string{"-store", "redis", "-redis", "localhost:65536"}, env(), "-redis"},
		{nil, env("IDEM_STORE", "redis", "REDIS_ADDR", "nohost"), "-redis"},
		{[]string{"-store", "redis", "-redis-prefix", "a{b}:"}, env(), "-redis-prefix"},
		{[]string{"-redis", "127.0.0.1:6380"}, env(), "-redis: only used with -store redis"},
		{[]string{"-store", "redis", "-redis", "127.0.0.1:7000,nohost"}, env(), "-redis"},
		{[]string{"-store", "redis", "-redis-replica-acks", "-1"}, env(), "-redis-replica-acks"},
		{nil, env("IDEM_STORE", "redis", "IDEM_REDIS_REPLICA_ACKS", "one"), "IDEM_REDIS_REPLICA_ACKS"},
		{[]string{"-redis-replica-acks", "1"}, env(), "-redis-replica-acks: only used with -store redis"},
		{[]string{"-redis-prefix", "x:"}, env("IDEM_STORE", "gorm"), "-redis-prefix: only used with -store redis"},
	} {
		_, err := ParseConfig("x", tc.args, tc.env, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig(%q): error %v, want one mentioning %q", tc.args, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseConfig(%q): error %v shows the password", tc.args, err)
		}
	}
	if _, err := ParseConfig("x", []string{"-h"}, env(), io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: error %v, want flag.ErrHelp", err)
	}
}

// TestParseConfigRedis: -store redis takes the Redis address and prefix from the
// environment, then the flags; the Redis environment does not matter to other stores.
func TestParseConfigRedis(t *testing.T) {
	t.Parallel()
	e := env("IDEM_STORE", "redis", "REDIS_ADDR", "redis.internal:6390", "IDEM_REDIS_PREFIX", "shop:")
	c, err := ParseConfig("x", nil, e, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, StoreRedis, c.Store)
	assert.Equal(t, "redis.internal:6390", c.Redis)
	assert.Equal(t, "shop:", c.RedisPrefix)

	c, err = ParseConfig("x", []string{"-redis", "[::1]:6379", "-redis-prefix", ""}, e, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "[::1]:6379", c.Redis)
	assert.Empty(t, c.RedisPrefix)

	c, err = ParseConfig("x", []string{"-redis", "10.0.0.1:7000,10.0.0.2:7000", "-redis-replica-acks", "1"}, e, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:7000", "10.0.0.2:7000"}, c.RedisAddrs(), "a cluster's nodes")
	assert.Equal(t, 1, c.RedisReplicaAcks)

	// REDIS_ADDR may be set for something else: with another store it is not read.
	_, err = ParseConfig("x", nil, env("REDIS_ADDR", "not an address"), io.Discard)
	assert.NoError(t, err)
}

// TestParseConfigMySQL: a mysql:// URL or a go-sql-driver DSN selects MySQL/MariaDB
// (through gormstore), opened with parseTime and UTC whatever the setting says.
func TestParseConfigMySQL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ db, want string }{
		{"mysql://root@127.0.0.1:3306/test", "root@tcp(127.0.0.1:3306)/test?parseTime=true"},
		{"mysql://app:s%40cret@db.example/shop?timeout=5s", "app:s@cret@tcp(db.example:3306)/shop?parseTime=true&timeout=5s"},
		{"root@tcp(127.0.0.1:3306)/test", "root@tcp(127.0.0.1:3306)/test?parseTime=true"},
		{"root@tcp(127.0.0.1:3306)/test?parseTime=false&loc=Local", "root@tcp(127.0.0.1:3306)/test?parseTime=true"},
	} {
		c, err := ParseConfig("x", []string{"-db", tc.db}, env(), io.Discard)
		require.NoError(t, err, tc.db)
		kind, target := c.database()
		assert.Equal(t, kindMySQL, kind, tc.db)
		assert.Equal(t, tc.want, target, tc.db)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:secret@h/db": "postgres://u:xxxxx@h/db",
		"mysql://u:p@ss@h/db":      "mysql://u:xxxxx@h/db",
		"u:secret@tcp(h:3306)/db":  "u:xxxxx@tcp(h:3306)/db",
		"postgres://u@h/db":        "postgres://u@h/db",
		"sqlite:/tmp/orders.db":    "sqlite:/tmp/orders.db",
	} {
		assert.Equal(t, want, redact(in), in)
	}
}
