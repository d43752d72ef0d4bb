package demo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

const (
	// sweepInterval is short so that the demo shows the sweeper at work (LOG_LEVEL=debug).
	sweepInterval = 10 * time.Second
	// startTimeout bounds connecting to the database and creating the schema.
	startTimeout = 30 * time.Second
	// shutdownTimeout bounds the wait for in-flight requests after SIGINT/SIGTERM.
	shutdownTimeout = 30 * time.Second
)

// Main runs the example server called name: it reads the configuration from args and the
// environment, opens the database and creates the schema, runs the sweeper, serves the
// handler router builds until SIGINT or SIGTERM, then waits for in-flight requests. It
// returns the process's exit status: 0 after a clean shutdown, 1 when the server cannot
// run, 2 for bad flags.
func Main(name string, args []string, router func(*App) http.Handler) int {
	return run(name, args, os.Getenv, os.Stderr, router)
}

func run(name string, args []string, getenv func(string) string, stderr io.Writer, router func(*App) http.Handler) int {
	cfg, err := ParseConfig(name, args, getenv, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	startCtx, cancel := context.WithTimeout(ctx, startTimeout)
	app, err := Open(startCtx, cfg, log)
	cancel()
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	defer app.Close()

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		log.Error("cannot listen", "error", err)
		return 1
	}
	handler := app.obs.handler(router(app)) // GET /metrics, and an access line per request
	srv := &http.Server{
		Handler: handler,
		// A slow or stalled client cannot hold a connection (nor the body buffer idem
		// reads it into) for ever: 10s for the headers, 30s for the whole request.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	sweepCtx, stopSweeper := context.WithCancel(context.Background())
	var sweeping sync.WaitGroup
	sweeping.Go(func() { _ = app.Sweeper().Run(sweepCtx) })
	if c := app.Completer(handler); c != nil { // the same chain as the clients' requests
		sweeping.Go(func() {
			if err := c.Run(sweepCtx); err != nil {
				log.Error("completer", "error", err)
			}
		})
	}
	defer func() {
		stopSweeper()
		sweeping.Wait()
	}()

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("listening on "+ln.Addr().String(), "store", app.StoreName(), "lease", cfg.Lease.String())

	select {
	case err := <-served:
		log.Error("server failed", "error", err)
		return 1
	case <-ctx.Done():
	}
	stop() // a second signal ends the process at once
	log.Info("shutting down: waiting for in-flight requests")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Error("shutdown", "error", err)
		return 1
	}
	log.Info("stopped")
	return 0
}
