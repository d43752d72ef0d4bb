package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/storage"
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
	db, table string
	retention time.Duration
}

func (f *dbFlags) register(fs *flag.FlagSet, retention bool) {
	fs.StringVar(&f.db, "db", "", "the database: postgres://…, mysql://…, sqlite:PATH (required)")
	fs.StringVar(&f.table, "table", "idempotency_keys", "the key table (schema.table allowed on PostgreSQL)")
	f.retention = 24 * time.Hour
	if retention {
		fs.DurationVar(&f.retention, "retention", 24*time.Hour, "how long keys are kept (the store's WithRetention)")
	}
}

// connect opens the database and, unless migrating, requires the key table.
func (f *dbFlags) connect(ctx context.Context, migrating bool) (*conn, error) {
	u, err := parseDB(f.db)
	if err != nil {
		return nil, err
	}
	if f.table == "" {
		return nil, fmt.Errorf("%w: -table is empty", errUsage)
	}
	if f.retention <= 0 {
		return nil, fmt.Errorf("%w: -retention %v: want a positive duration", errUsage, f.retention)
	}
	c, err := openChecked(ctx, u, f.table, f.retention, migrating)
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
			f.table, u.dialect, u.shown, f.table)
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
	fs := newFlags("show", "-db URL [-table T] -scope S -key K", stderr)
	f.register(fs, true)
	scope := fs.String("scope", "", "the key's scope: what the server's scope function returns (account, tenant) (required)")
	key := fs.String("key", "", "the key, as the server parsed it (unquoted) (required)")
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
	r, err := c.readKey(ctx, *scope, *key)
	if errors.Is(err, errNoKey) {
		fmt.Fprintf(stdout, "key %q in scope %q: not found in %s (never claimed, released after a failure, or swept)\n", *key, *scope, f.table)
		return errFailed
	}
	if err != nil {
		return err
	}
	writeKey(stdout, r, f.retention)
	return nil
}

// writeKey prints one key and what a retry of it gets now.
func writeKey(w io.Writer, r *keyRow, retention time.Duration) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{name}, args...)...)
	}
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%s (%s ago)", t.UTC().Format(time.RFC3339Nano), r.Now.Sub(t).Round(time.Millisecond))
	}
	live := !r.LockedUntil.IsZero() && r.LockedUntil.After(r.Now)
	expired := r.CreatedAt.Before(r.Now.Add(-retention))
	h, herr := storage.DecodeHeader(r.ResponseHeaders)
	row("scope", "%s", r.Scope)
	row("key", "%s", r.Key)
	row("state", "%s", r.State)
	row("retry now gets", "%s", verdict(r, h.Get(omittedHeader), live, expired))
	row("fingerprint", "%x", r.Fingerprint)
	row("method", "%s", r.Method)
	row("path", "%s", r.Path)
	row("recovery point", "%s", r.RecoveryPoint)
	switch {
	case r.LockedUntil.IsZero():
		row("lease", "none")
	case live:
		row("lease", "live until %s (%s left)", r.LockedUntil.UTC().Format(time.RFC3339Nano), r.LockedUntil.Sub(r.Now).Round(time.Millisecond))
	default:
		row("lease", "ended %s", at(r.LockedUntil))
	}
	if r.LeaseToken != "" {
		row("lease token", "%s", r.LeaseToken)
	}
	if r.ResponseCode.Valid {
		row("stored status", "%d", r.ResponseCode.Int64)
	} else {
		row("stored status", "-")
	}
	if herr != nil {
		row("stored headers", "unreadable: %v", herr)
	} else if len(h) == 0 {
		row("stored headers", "-")
	} else {
		names := make([]string, 0, len(h))
		for k := range h {
			names = append(names, k)
		}
		sort.Strings(names)
		for i, k := range names {
			label := ""
			if i == 0 {
				label = "stored headers"
			}
			row(label, "%s: %s", k, strings.Join(h[k], ", "))
		}
	}
	if r.BodySize.Valid {
		row("body size", "%d bytes", r.BodySize.Int64)
	} else {
		row("body size", "- (no body stored)")
	}
	row("created", "%s", at(r.CreatedAt))
	row("completed", "%s", at(r.CompletedAt))
	if expired {
		row("expired", "yes: older than the retention (%s); claims treat it as absent and sweep deletes it", retention)
	}
	_ = tw.Flush()
}

// omittedHeader is the stored header by which the engine marks a response whose body
// was over its MaxResponseBody (core's engine.go): retries get 410 response-too-large.
const omittedHeader = "Idempotent-Body-Omitted"

// verdict is what the engine answers a retry with the same request, today.
func verdict(r *keyRow, omitted string, live, expired bool) string {
	switch {
	case expired && !live:
		return "a fresh run: the key is past the retention"
	case r.State == "completed" && omitted != "":
		return fmt.Sprintf("410 response-too-large: completed with %d, its %s-byte body too large to keep", r.ResponseCode.Int64, omitted)
	case r.State == "completed":
		return fmt.Sprintf("a replay of %d (422 if the request differs)", r.ResponseCode.Int64)
	case live:
		return fmt.Sprintf("409 in progress until %s: a request holds the lease (phased), recovery point %q",
			r.LockedUntil.UTC().Format(time.RFC3339), r.RecoveryPoint)
	default:
		return fmt.Sprintf("a takeover: the lease ended, the retry resumes after %q", r.RecoveryPoint)
	}
}

func statsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f dbFlags
	fs := newFlags("stats", "-db URL [-table T] [-retention 24h]", stderr)
	f.register(fs, true)
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := f.connect(ctx, false)
	if err != nil {
		return err
	}
	defer c.close()
	s, err := c.readStats(ctx, f.retention)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "table\t%s (%s at %s)\n", f.table, c.url.dialect, c.url.shown)
	fmt.Fprintf(tw, "keys\t%d\n", s.Total)
	states := make([]string, 0, len(s.ByState))
	for st := range s.ByState {
		states = append(states, st)
	}
	sort.Strings(states)
	for _, st := range states {
		extra := ""
		if st == "started" {
			extra = fmt.Sprintf(" (%d with a live lease: in flight; %d resumable by a retry)", s.Live, s.ByState[st]-s.Live)
		}
		fmt.Fprintf(tw, "  %s\t%d%s\n", st, s.ByState[st], extra)
	}
	if s.Oldest != nil {
		fmt.Fprintf(tw, "oldest key\t%s, %s ago (scope %q, key %q, %s)\n", s.Oldest.CreatedAt.Format(time.RFC3339),
			s.Now.Sub(s.Oldest.CreatedAt).Round(time.Second), s.Oldest.Scope, s.Oldest.Key, s.Oldest.State)
	} else {
		fmt.Fprintf(tw, "oldest key\t-\n")
	}
	fmt.Fprintf(tw, "expired, not yet swept\t%d (created before %s, retention %s", s.Expired, s.Cutoff.Format(time.RFC3339), s.Retention)
	if s.ExpiredLive > 0 {
		fmt.Fprintf(tw, "; %d of them hold a live lease and are kept", s.ExpiredLive)
	}
	fmt.Fprintf(tw, ")\n")
	return tw.Flush()
}
