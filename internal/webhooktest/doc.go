// Package webhooktest proves webhook receivers on every adapter: net/http
// (Engine.Middleware), Gin (ginidem) and Echo (echoidem), with the key taken from a
// provider's delivery header (core.KeyFromHeader) or the event ID in the JSON body
// (core.KeyFromJSON), on memstore and on the real stores (pgxstore, gormstore on
// PostgreSQL and SQLite) whose business row commits with the key. Test support only; the
// package has no exported API.
package webhooktest
