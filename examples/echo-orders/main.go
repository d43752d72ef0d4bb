// Command echo-orders is idem's demo server on Echo v4: an orders and payments API whose
// POST routes are safe to retry with an Idempotency-Key. It serves the HTTP contract of
// examples/README.md, as examples/gin-orders does on Gin; the domain lives in
// examples/internal/demo, so this file is only Echo wiring.
//
//	go run ./examples/echo-orders                      # SQLite file orders.db, 127.0.0.1:8080
//	DATABASE_URL=postgres://… go run ./examples/echo-orders -store gorm
//	go run ./examples/echo-orders -db mysql://root@127.0.0.1:3306/test   # MySQL or MariaDB
//	go run ./examples/echo-orders -store redis         # payments' keys in Redis
//
// To stop it with a signal or see its exit status, build it and run the binary (go run
// is a separate process, and reports any failure as status 1):
//
//	go build -o /tmp/echo-orders ./examples/echo-orders && /tmp/echo-orders -crash-after charge_created
//
// Flags (and environment): -addr (ADDR), -db (DATABASE_URL), -store pgx|gorm|redis
// (IDEM_STORE), -redis (REDIS_ADDR), -redis-prefix (IDEM_REDIS_PREFIX), -lease
// (IDEM_LEASE), -crash-after PHASE (IDEM_CRASH_AFTER), -log-level (LOG_LEVEL).
package main

import (
	"net/http"
	"os"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/echoidem"
	"github.com/idemkit/idem/examples/internal/demo"
)

func main() { os.Exit(demo.Main("echo-orders", os.Args[1:], router)) }

// accountKey is where auth keeps the caller's account in the Echo context.
const accountKey = "account"

func router(app *demo.App) http.Handler {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(recoverer)
	e.GET(demo.OpenAPIPath, echo.WrapHandler(http.HandlerFunc(app.ServeOpenAPI))) // the API's OpenAPI document, no account needed

	scope := func(c echo.Context) string { return account(c) }
	orders := echoidem.New(app.OrdersIdem(), echoidem.Config{Scope: scope})     // atomic
	payments := echoidem.New(app.PaymentsIdem(), echoidem.Config{Scope: scope}) // phased

	v1 := e.Group("/v1", auth)
	v1.POST("/orders", handle(app.CreateOrder), orders)
	v1.GET("/orders", handle(app.ListOrders))
	v1.GET("/orders/:id", handleID(app.GetOrder))
	v1.POST("/payments", handle(app.CreatePayment), payments)
	v1.GET("/payments", handle(app.ListPayments))
	v1.GET("/payments/:id", handleID(app.GetPayment))
	v1.GET("/provider/charges", handle(app.ListCharges))
	webhooks := echoidem.New(app.WebhooksIdem(), echoidem.Config{Scope: scope}) // key: the event's "id"
	v1.POST("/webhooks/provider", handle(app.ReceiveEvent), webhooks)
	v1.GET("/webhooks/provider/events", handle(app.ListEvents))
	return e
}

// auth answers 401 without an X-Account-ID, and keeps the account for the handlers and
// the idempotency scope otherwise.
func auth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		account, reject := demo.Authenticate(c.Request())
		if reject != nil {
			reject.Write(c.Response())
			return nil
		}
		c.Set(accountKey, account)
		return next(c)
	}
}

// recoverer answers a panic with a 500 problem, as gin.Recovery does for gin-orders.
// (echo/v4/middleware's Recover needs golang.org/x/time, which this module does not
// require.) Mounted before the idempotency middleware, which releases the key and
// re-raises the panic.
func recoverer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				c.Logger().Errorf("panic: %v", p)
				if !c.Response().Committed {
					demo.Internal().Write(c.Response())
				}
			}
		}()
		return next(c)
	}
}

func account(c echo.Context) string {
	s, _ := c.Get(accountKey).(string)
	return s
}

func handle(h func(*http.Request, string) demo.Reply) echo.HandlerFunc {
	return func(c echo.Context) error {
		h(c.Request(), account(c)).Write(c.Response())
		return nil
	}
}

func handleID(h func(*http.Request, string, string) demo.Reply) echo.HandlerFunc {
	return func(c echo.Context) error {
		h(c.Request(), account(c), c.Param("id")).Write(c.Response())
		return nil
	}
}
