package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/redisstore"
)

// errHelp is -h: the flag package printed the usage; exit 0.
var errHelp = errors.New("help")

// newFlags makes a command's flag set, printing to stderr.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("idem "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: idem %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args, mapping the flag package's errors to ours.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

// dbFlags are the flags of the commands on the key table.
type dbFlags struct {
	db, table, prefix string
	retention         time.Duration
}

// defaultTable is -table's default.
const defaultTable = "idempotency_keys"

func (f *dbFlags) register(fs *flag.FlagSet, retention bool) {
	fs.StringVar(&f.db, "db", "", "the database: postgres://…, mysql://…, sqlite:PATH, redis://… (required)")
	fs.StringVar(&f.table, "table", "", "the key table (schema.table allowed on PostgreSQL); default "+defaultTable)
	fs.StringVar(&f.prefix, "prefix", "", "Redis only: the store's key prefix (redisstore.WithPrefix); default "+redisstore.DefaultPrefix)
	f.retention = 24 * time.Hour
	if retention {
		fs.DurationVar(&f.retention, "retention", 24*time.Hour, "how long keys are kept (the store's WithRetention)")
	}
}

// place names the table, or on Redis the key prefix, for messages.
func (f *dbFlags) place(c *conn) string {
	if c.url.dialect == redisDB {
		return fmt.Sprintf("Redis at %s (prefix %q)", c.url.shown, c.table)
	}
	return c.table
}

// connect opens the database and, unless migrating, requires the key table.
func (f *dbFlags) connect(ctx context.Context, migrating bool) (*conn, error) {
	u, err := parseDB(f.db)
	if err != nil {
		return nil, err
	}
	name := f.table
	switch {
	case u.dialect == redisDB && f.table != "":
		return nil, fmt.Errorf("%w: -table names an SQL table; Redis keys go by -prefix", errUsage)
	case u.dialect == redisDB:
		name = cmp.Or(f.prefix, redisstore.DefaultPrefix)
	case f.prefix != "":
		return nil, fmt.Errorf("%w: -prefix is for Redis; an SQL store's keys go by -table", errUsage)
	case name == "":
		name = defaultTable
	}
	f.table = name
	if f.retention <= 0 {
		return nil, fmt.Errorf("%w: -retention %v: want a positive duration", errUsage, f.retention)
	}
	c, err := openChecked(ctx, u, name, f.retention, migrating)
	if err != nil {
		return nil, err
	}
	if migrating {
		return c, nil
	}
	ok, err := c.tableExists(ctx)
	if err != nil {
		c.close()
		return nil, err
	}
	if !ok {
		c.close()
		return nil, fmt.Errorf("table %s not found in %s at %s: run \"idem migrate -db … -table %s\" first",
			name, u.dialect, u.shown, name)
	}
	return c, nil
}

// openChecked is open, turning a store constructor's panic (a bad -table) into an error.
func openChecked(ctx context.Context, u dbURL, table string, retention time.Duration, create bool) (c *conn, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errUsage, p)
		}
	}()
	return open(ctx, u, table, retention, create)
}

func migrateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f dbFlags
	fs := newFlags("migrate", "-db URL [-table T]", stderr)
	f.register(fs, false)
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := f.connect(ctx, true)
	if err != nil {
		return err
	}
	defer c.close()
	if c.migrate == nil {
		fmt.Fprintf(stdout, "nothing to migrate in %s: the store writes a hash per key as it claims\n", f.place(c))
		return nil
	}
	existed, err := c.tableExists(ctx)
	if err != nil {
		return err
	}
	if err := c.migrate(ctx); err != nil {
		return fmt.Errorf("%w", err)
	}
	verb := "created"
	if existed {
		verb = "already there; checked"
	}
	fmt.Fprintf(stdout, "table %s %s in %s at %s\n", f.table, verb, c.url.dialect, c.url.shown)
	return nil
}

// progress reports each batch core.Sweeper deletes.
type progress struct {
	storage.Store
	w       io.Writer
	batches int
	total   int
	began   time.Time
}

// DeleteExpired deletes one batch and prints it.
func (p *progress) DeleteExpired(ctx context.Context, before time.Time, limit int) (int, error) {
	n, err := p.Store.DeleteExpired(ctx, before, limit)
	if err == nil {
		p.batches++
		p.total += n
		fmt.Fprintf(p.w, "batch %d: deleted %d (%d so far, %s)\n", p.batches, n, p.total, time.Since(p.began).Round(time.Millisecond))
	}
	return n, err
}

func sweepCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f dbFlags
	fs := newFlags("sweep", "-db URL [-table T] [-retention 24h] [-batch 5000]", stderr)
	f.register(fs, true)
	batch := fs.Int("batch", 5000, "keys deleted per statement")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *batch <= 0 {
		return fmt.Errorf("%w: -batch %d: want a positive number", errUsage, *batch)
	}
	c, err := f.connect(ctx, false)
	if err != nil {
		return err
	}
	defer c.close()
	if se, ok := c.store.(storage.SelfExpiring); ok && se.ExpiresKeys() {
		fmt.Fprintf(stdout, "nothing to sweep in %s: Redis expires each key itself when its retention has passed\n", f.place(c))
		return nil
	}
	p := &progress{Store: c.store, w: stdout, began: time.Now()}
	fmt.Fprintf(stdout, "sweeping %s: keys created before %s (retention %s), %d per batch\n",
		f.table, time.Now().Add(-f.retention).UTC().Format(time.RFC3339), f.retention, *batch)
	sw := core.Sweeper{Store: p, BatchSize: *batch}
	n, err := sw.Sweep(ctx)
	if err != nil {
		return fmt.Errorf("after deleting %d: %w", n, err)
	}
	fmt.Fprintf(stdout, "swept %d expired keys in %d batches, %s\n", n, p.batches, time.Since(p.began).Round(time.Millisecond))
	return nil
}

func showCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f dbFlags
	fs := newFlags("show", "-db URL [-table T | -prefix P] -scope S -key K", stderr)
	f.register(fs, true)
	scope := fs.String("scope", "", "the key's scope: what the server's scope function returns (account, tenant) (required)")
	key := fs.String("key", "", "the key (or Do's message ID), as the server parsed it (unquoted) (required)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *scope == "" || *key == "" {
		return fmt.Errorf("%w: -scope and -key are required", errUsage)
	}
	c, err := f.connect(ctx, false)
	if err != nil {
		return err
	}
	defer c.close()
	rec, now, err := c.store.Lookup(ctx, *scope, *key)
	if errors.Is(err, storage.ErrNotFound) {
		fmt.Fprintf(stdout, "key %q in scope %q: not found in %s (never claimed, released after a failure, or swept)\n", *key, *scope, f.place(c))
		return errFailed
	}
	if err != nil {
		return err
	}
	writeKey(stdout, rec, now, f.retention)
	return nil
}

// writeKey prints one key and what a retry of it gets now: storage.Decide's verdict on it
// for the same request, at the store's clock. A key that Engine.Do wrote (no method, no
// path) is a message or job ID: its stored response is Do's result.
func writeKey(w io.Writer, rec *storage.Record, now time.Time, retention time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{name}, args...)...)
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339Nano), now.Sub(t).Round(time.Millisecond))
	}
	do := rec.Method == "" && rec.Path == ""
	v := storage.Decide(rec, storage.Claim{Fingerprint: rec.Fingerprint, Retention: retention}, now)
	row("scope", "%s", rec.Scope)
	row("key", "%s", rec.Key)
	row("state", "%s", rec.State)
	if do {
		row("written by", "Engine.Do: a message or job ID, not an HTTP request")
		row("redelivery gets", "%s", doVerdict(rec, v))
	} else {
		row("retry now gets", "%s", verdict(rec, v))
	}
	row("fingerprint", "%x", rec.Fingerprint)
	if !do {
		row("method", "%s", rec.Method)
		row("path", "%s", rec.Path)
	}
	row("recovery point", "%s", rec.RecoveryPoint)
	switch {
	case rec.LockedUntil.IsZero():
		row("lease", "none")
	case v == storage.VerdictInProgress: // a live lease
		row("lease", "live until %s (%s left)", rec.LockedUntil.UTC().Format(time.RFC3339Nano), rec.LockedUntil.Sub(now).Round(time.Millisecond))
	default:
		row("lease", "ended %s", at(rec.LockedUntil))
	}
	writeCompleter(row, rec, now)
	switch resp := rec.Response; {
	case do && resp == nil:
		row("result", "- (none recorded yet)")
	case do:
		row("result", "%d bytes", len(resp.Body))
	case resp == nil:
		row("stored status", "-")
		row("stored headers", "-")
		row("body size", "- (no body stored)")
	default:
		row("stored status", "%d", resp.Status)
		writeHeader(row, resp.Header)
		row("body size", "%d bytes", len(resp.Body))
	}
	row("created", "%s", at(rec.CreatedAt))
	row("completed", "%s", at(rec.CompletedAt))
	if v == storage.VerdictAbsent {
		row("expired", "yes: older than the retention (%s); claims treat it as absent and sweep deletes it", retention)
	}
	_ = tw.Flush()
}

// writeHeader prints stored headers, one a line, sorted by name.
func writeHeader(row func(name, format string, args ...any), h http.Header) {
	if len(h) == 0 {
		row("stored headers", "-")
		return
	}
	for i, k := range slices.Sorted(maps.Keys(h)) {
		label := ""
		if i == 0 {
			label = "stored headers"
		}
		row(label, "%s: %s", k, strings.Join(h[k], ", "))
	}
}

// omittedHeader is the stored header by which the engine marks a response whose body
// was over its MaxResponseBody (core's engine.go): retries get 410 response-too-large.
const omittedHeader = "Idempotent-Body-Omitted"

// verdict says what the engine answers a retry of the same request, as v says.
func verdict(rec *storage.Record, v storage.Verdict) string {
	switch v {
	case storage.VerdictAbsent:
		return "a fresh run: the key is past the retention"
	case storage.VerdictReplay:
		if omitted := rec.Response.Header.Get(omittedHeader); omitted != "" {
			return fmt.Sprintf("410 response-too-large: completed with %d, its %s-byte body too large to keep", rec.Response.Status, omitted)
		}
		return fmt.Sprintf("a replay of %d (422 if the request differs)", rec.Response.Status)
	case storage.VerdictInProgress:
		return fmt.Sprintf("409 in progress until %s: a request holds the lease (phased), recovery point %q",
			rec.LockedUntil.UTC().Format(time.RFC3339), rec.RecoveryPoint)
	default: // storage.VerdictTakeOver
		return fmt.Sprintf("a takeover: the lease ended, the retry resumes after %q", rec.RecoveryPoint)
	}
}

// doVerdict says what Engine.Do returns for a redelivery of the same message, as v says.
func doVerdict(rec *storage.Record, v storage.Verdict) string {
	switch v {
	case storage.VerdictAbsent:
		return "a fresh run of fn: the ID is past the retention"
	case storage.VerdictReplay:
		return fmt.Sprintf("the recorded result (%d bytes), replayed without running fn (ErrKeyReused if the fingerprint differs)",
			len(rec.Response.Body))
	case storage.VerdictInProgress:
		return fmt.Sprintf("ErrInProgress until %s: a consumer holds the lease (phased), recovery point %q",
			rec.LockedUntil.UTC().Format(time.RFC3339), rec.RecoveryPoint)
	default: // storage.VerdictTakeOver
		return fmt.Sprintf("a takeover: the lease ended, fn runs again after %q", rec.RecoveryPoint)
	}
}

func statsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f dbFlags
	fs := newFlags("stats", "-db URL [-table T | -prefix P] [-retention 24h]", stderr)
	f.register(fs, true)
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := f.connect(ctx, false)
	if err != nil {
		return err
	}
	defer c.close()
	kcr, ok := c.store.(storage.KeyCounter)
	if !ok {
		return fmt.Errorf("the store on %s cannot count its keys (no storage.KeyCounter)", c.url.dialect)
	}
	s, err := kcr.CountKeys(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	if c.url.dialect == redisDB {
		fmt.Fprintf(tw, "prefix\t%q (Redis at %s)\n", f.table, c.url.shown)
	} else {
		fmt.Fprintf(tw, "table\t%s (%s at %s)\n", f.table, c.url.dialect, c.url.shown)
	}
	fmt.Fprintf(tw, "keys\t%d\n", s.Started+s.Completed)
	fmt.Fprintf(tw, "  completed\t%d\n", s.Completed)
	fmt.Fprintf(tw, "  started\t%d (%d with a live lease: in flight; %d resumable by a retry)\n", s.Started, s.Live, s.Started-s.Live)
	if s.Oldest != nil {
		fmt.Fprintf(tw, "oldest key\t%s, %s ago (scope %q, key %q, %s)\n", s.Oldest.CreatedAt.UTC().Format(time.RFC3339),
			s.Now.Sub(s.Oldest.CreatedAt).Round(time.Second), s.Oldest.Scope, s.Oldest.Key, s.Oldest.State)
	} else {
		fmt.Fprintf(tw, "oldest key\t-\n")
	}
	fmt.Fprintf(tw, "expired, not yet swept\t%d (created before %s, retention %s", s.Expired,
		s.Now.Add(-f.retention).UTC().Format(time.RFC3339), f.retention)
	if s.ExpiredLive > 0 {
		fmt.Fprintf(tw, "; %d of them hold a live lease and are kept", s.ExpiredLive)
	}
	if c.url.dialect == redisDB {
		fmt.Fprintf(tw, "; Redis removes them itself")
	}
	fmt.Fprintf(tw, ")\n")
	return tw.Flush()
}
