package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // the first signal ends the run gracefully, a second one at once
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit statuses.
const (
	exitOK     = 0 // exactly once held
	exitFailed = 1 // exactly once did not hold, or the run could not be made
	exitUsage  = 2 // bad flags
)

// Bounds of the flags: the tool never runs unbounded.
const (
	maxWorkers  = 1024
	maxRequests = 1_000_000
	maxDuration = 30 * time.Minute
	maxRetries  = 100
)

// Routes loadgen can drive.
const (
	routeOrders   = "orders"
	routePayments = "payments"
)

// config is one run's settings, from the flags.
type config struct {
	url      string        // base URL of the server, without a trailing slash
	workers  int           // concurrent requests
	requests int           // requests in the plan (retries after 409 come on top)
	duration time.Duration // the plan stops being sent after this
	keys     int           // at most this many distinct keys
	dup      float64       // fraction of requests that reuse a key
	account  string        // X-Account-ID
	route    string        // routeOrders or routePayments
	retries  int           // retries of one request after 409
	timeout  time.Duration // per HTTP request
	seed     uint64        // the plan's random source

	spawn string // gin or echo: build and start that server; "" to use url
	db    string // -db for the spawned server ("": a fresh SQLite file)
	store string // -store for the spawned server ("": its default)
}

// run is the command: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return exitUsage
	}
	sum, err := execute(ctx, cfg, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "loadgen: %v\n", err)
		return exitFailed
	}
	if !sum.verdict.exactlyOnce() {
		return exitFailed
	}
	return exitOK
}

func parseConfig(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "the example server's base `URL` (loopback only)")
	fs.IntVar(&c.workers, "workers", 16, "concurrent requests")
	fs.IntVar(&c.requests, "requests", 20000, fmt.Sprintf("requests to send, retries after 409 not counted (at most %d)", maxRequests))
	fs.DurationVar(&c.duration, "duration", 60*time.Second, fmt.Sprintf("stop sending after this long (at most %s)", maxDuration))
	fs.IntVar(&c.keys, "keys", 5000, "distinct idempotency keys, at most")
	fs.Float64Var(&c.dup, "dup", 0.3, "fraction of requests that reuse a key already sent, in [0, 1)")
	fs.StringVar(&c.account, "account", "", "X-Account-ID (default: a fresh random account per run)")
	fs.StringVar(&c.route, "route", routeOrders, "orders or payments")
	fs.IntVar(&c.retries, "retries", 10, "times one request is sent again after a 409, Retry-After apart")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "timeout of one HTTP request")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the plan (default: random)")
	fs.StringVar(&c.spawn, "spawn", "", "gin or echo: build and start that example server on a free port instead of using -url")
	fs.StringVar(&c.db, "db", "", "with -spawn: the server's -db (default: a fresh SQLite file)")
	fs.StringVar(&c.store, "store", "", "with -spawn: the server's -store: pgx or gorm (for a postgres:// -db), or redis (the payments' keys in the Redis at 127.0.0.1:6379)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["seed"] {
		c.seed = randomSeed()
	}
	if c.account == "" {
		c.account = "lg-" + randomHex(8)
	}
	return c, c.validate(set)
}

func (c *config) validate(set map[string]bool) error {
	switch {
	case c.workers < 1 || c.workers > maxWorkers:
		return fmt.Errorf("-workers %d: want 1 to %d", c.workers, maxWorkers)
	case c.requests < 1 || c.requests > maxRequests:
		return fmt.Errorf("-requests %d: want 1 to %d", c.requests, maxRequests)
	case c.duration <= 0 || c.duration > maxDuration:
		return fmt.Errorf("-duration %s: want more than 0 and at most %s", c.duration, maxDuration)
	case c.keys < 1:
		return fmt.Errorf("-keys %d: want at least 1", c.keys)
	case !(c.dup >= 0 && c.dup < 1):
		return fmt.Errorf("-dup %v: want a fraction in [0, 1)", c.dup)
	case c.route != routeOrders && c.route != routePayments:
		return fmt.Errorf("-route %q: want %s or %s", c.route, routeOrders, routePayments)
	case c.retries < 0 || c.retries > maxRetries:
		return fmt.Errorf("-retries %d: want 0 to %d", c.retries, maxRetries)
	case c.timeout <= 0:
		return fmt.Errorf("-timeout %s: want more than 0", c.timeout)
	case strings.TrimSpace(c.account) == "":
		return errors.New("-account: empty")
	}
	if c.spawn != "" {
		if _, ok := spawnApps[c.spawn]; !ok {
			return fmt.Errorf("-spawn %q: want gin or echo", c.spawn)
		}
		if set["url"] {
			return errors.New("-url and -spawn: pick one (-spawn starts its own server)")
		}
		return nil
	}
	if set["db"] || set["store"] {
		return errors.New("-db and -store configure a server loadgen starts: they need -spawn")
	}
	base, err := loopbackURL(c.url)
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	c.url = base
	return nil
}

// loopbackURL checks that raw is an http URL whose host is a loopback address or
// localhost, and returns it without a trailing slash.
func loopbackURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" {
		return "", fmt.Errorf("%q: want an http:// URL", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: want scheme, host, port and at most a path", raw)
	}
	host := u.Hostname()
	if host != "localhost" {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.IsLoopback() {
			return "", fmt.Errorf("%q is not a loopback address: loadgen only drives a server on this machine", host)
		}
	}
	return strings.TrimRight(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"), nil
}

func randomHex(n int) string {
	b := make([]byte, n/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
