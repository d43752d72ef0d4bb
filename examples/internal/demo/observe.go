package demo

import (
	"context"
	"log/slog"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/promidem"
)

// observer is what an operator sees of the demo: Prometheus metrics on GET /metrics
// (idem's, the Go runtime's and the process's) and one access line per request at Info.
type observer struct {
	reg   *prometheus.Registry
	hooks core.Hooks
	log   *slog.Logger
}

func newObserver(log *slog.Logger) (*observer, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	metrics, err := promidem.New(reg)
	if err != nil {
		return nil, err
	}
	return &observer{reg: reg, hooks: core.JoinHooks(metrics, core.HookFunc(noteOutcome)), log: log}, nil
}

// accessKey keys the request's *access in its context.
type accessKey struct{}

// access is what the access line reports that only the engine knows.
type access struct{ outcome core.Outcome }

// noteOutcome keeps a keyed request's final outcome for its access line.
func noteOutcome(ctx context.Context, ev core.Event) {
	if a, ok := ctx.Value(accessKey{}).(*access); ok && ev.Outcome.Final() {
		a.outcome = ev.Outcome
	}
}

// handler serves GET /metrics itself (unlogged: a scraper calls it every few seconds)
// and every other request through next, logging one line for it at Info: method, path
// (each clipped, see clip), status, idem's outcome ("-" for a request the middleware let
// through) and duration.
func (o *observer) handler(next http.Handler) http.Handler {
	metrics := promhttp.HandlerFor(o.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(o.log.Handler(), slog.LevelWarn)})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" && r.Method == http.MethodGet {
			metrics.ServeHTTP(w, r)
			return
		}
		began := time.Now()
		acc := &access{outcome: "-"}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), accessKey{}, acc)))
		o.log.LogAttrs(r.Context(), slog.LevelInfo, "request", slog.String("method", clip(r.Method)), slog.String("path", clip(r.URL.Path)),
			slog.Int("status", sw.code()), slog.String("outcome", string(acc.outcome)), slog.Duration("duration", time.Since(began)))
	})
}

// statusWriter remembers the status sent.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // not a 1xx informational answer
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Flush lets a router that flushes (Gin, Echo) reach the server's writer.
func (w *statusWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap gives http.ResponseController the server's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK // nothing written: net/http sends 200
	}
	return w.status
}

// maxLogged is the most bytes of a value a client chooses (method, path) that a log line
// carries, as in idem's own lines: a client cannot make one request write a megabyte of log.
const maxLogged = 64

// clip returns s, or its first maxLogged bytes (cut before a UTF-8 sequence that would not
// fit) followed by "…".
func clip(s string) string {
	if len(s) <= maxLogged {
		return s
	}
	i := maxLogged
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
