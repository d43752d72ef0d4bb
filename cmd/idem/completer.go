package main

import (
	"time"

	"github.com/idemkit/idem/core/storage"
)

// writeCompleter adds what core.Completer can do with a started key: whether its request
// was kept, so that the completer can finish it without the client, and when it tries.
func writeCompleter(row func(name, format string, args ...any), rec *storage.Record, now time.Time) {
	if rec.State != storage.StateStarted {
		return
	}
	if rec.Request == nil {
		row("completer", "no: no request kept (core.Config.KeepRequest off); only a retry of the client finishes it")
		return
	}
	row("completer", "can complete it: %s %s kept (%d header fields, %d body bytes)",
		rec.Request.Method, rec.Request.URI, len(rec.Request.Header), len(rec.Request.Body))
	row("attempts", "%d by the completer", rec.Attempts)
	switch {
	case rec.NextAttempt.IsZero():
		row("next attempt", "once the lease has ended and the completer's grace (Completer.Grace) has passed")
	case !rec.NextAttempt.After(now):
		row("next attempt", "due (at the completer's next pass, unless it has used its Completer.MaxAttempts)")
	default:
		row("next attempt", "%s (in %s)", rec.NextAttempt.UTC().Format(time.RFC3339), rec.NextAttempt.Sub(now).Round(time.Second))
	}
}
