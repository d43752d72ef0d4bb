// Command gin-orders is idem's demo server on Gin: an orders and payments API whose POST
// routes are safe to retry with an Idempotency-Key. It serves the HTTP contract of
// examples/README.md, as examples/echo-orders does on Echo; the domain lives in
// examples/internal/demo, so this file is only Gin wiring.
//
//	go run ./examples/gin-orders                       # SQLite file orders.db, 127.0.0.1:8080
//	DATABASE_URL=postgres://… go run ./examples/gin-orders -store gorm
//	go run ./examples/gin-orders -db mysql://root@127.0.0.1:3306/test   # MySQL or MariaDB
//	go run ./examples/gin-orders -store redis          # payments' keys in Redis
//
// To stop it with a signal or see its exit status, build it and run the binary (go run
// is a separate process, and reports any failure as status 1):
//
//	go build -o /tmp/gin-orders ./examples/gin-orders && /tmp/gin-orders -crash-after charge_created
//
// Flags (and environment): -addr (ADDR), -db (DATABASE_URL), -store pgx|gorm|redis
// (IDEM_STORE), -redis (REDIS_ADDR), -redis-prefix (IDEM_REDIS_PREFIX), -lease
// (IDEM_LEASE), -crash-after PHASE (IDEM_CRASH_AFTER), -log-level (LOG_LEVEL).
package main

import (
	"net/http"
	"os"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/examples/internal/demo"
	"github.com/idemkit/idem/ginidem"
)

func main() { os.Exit(demo.Main("gin-orders", os.Args[1:], router)) }

// accountKey is where auth keeps the caller's account in the Gin context.
const accountKey = "account"

func router(app *demo.App) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	r.GET(demo.OpenAPIPath, gin.WrapF(app.ServeOpenAPI)) // the API's OpenAPI document, no account needed

	scope := func(c *gin.Context) string { return c.GetString(accountKey) }
	orders := ginidem.New(app.OrdersIdem(), ginidem.Config{Scope: scope})     // atomic
	payments := ginidem.New(app.PaymentsIdem(), ginidem.Config{Scope: scope}) // phased

	v1 := r.Group("/v1", auth)
	v1.POST("/orders", orders, handle(app.CreateOrder))
	v1.GET("/orders", handle(app.ListOrders))
	v1.GET("/orders/:id", handleID(app.GetOrder))
	v1.POST("/payments", payments, handle(app.CreatePayment))
	v1.GET("/payments", handle(app.ListPayments))
	v1.GET("/payments/:id", handleID(app.GetPayment))
	v1.GET("/provider/charges", handle(app.ListCharges))
	webhooks := ginidem.New(app.WebhooksIdem(), ginidem.Config{Scope: scope}) // key: the event's "id"
	v1.POST("/webhooks/provider", webhooks, handle(app.ReceiveEvent))
	v1.GET("/webhooks/provider/events", handle(app.ListEvents))
	return r
}

// auth answers 401 without an X-Account-ID, and keeps the account for the handlers and
// the idempotency scope otherwise.
func auth(c *gin.Context) {
	account, reject := demo.Authenticate(c.Request)
	if reject != nil {
		reject.Write(c.Writer)
		c.Abort()
		return
	}
	c.Set(accountKey, account)
}

func handle(h func(*http.Request, string) demo.Reply) gin.HandlerFunc {
	return func(c *gin.Context) { h(c.Request, c.GetString(accountKey)).Write(c.Writer) }
}

func handleID(h func(*http.Request, string, string) demo.Reply) gin.HandlerFunc {
	return func(c *gin.Context) { h(c.Request, c.GetString(accountKey), c.Param("id")).Write(c.Writer) }
}
