// Package demo is the domain of the example servers examples/gin-orders and
// examples/echo-orders: orders, payments and a fake payment provider, the handlers'
// logic in a framework-neutral form, the configuration (flags and environment), the
// database and store selection, and the server's life cycle. The two servers differ only
// in framework wiring: routes, the X-Account-ID check and the idempotency middleware.
//
// The HTTP contract the servers implement is examples/README.md; run one with
//
//	go run ./examples/gin-orders
//
// or, to signal it or see its exit status (the crash demo exits with 3), build it first:
//
//	go build -o /tmp/gin-orders ./examples/gin-orders && /tmp/gin-orders
//
// A server's main is
//
//	func main() { os.Exit(demo.Main("gin-orders", os.Args[1:], router)) }
//
//	func router(app *demo.App) http.Handler {
//		// routes calling app.CreateOrder, app.ListOrders … and writing their Reply,
//		// behind a check of demo.Authenticate and the middleware configured by
//		// app.OrdersIdem (atomic) and app.PaymentsIdem (phased); and GET /openapi.json
//		// answered by app.ServeOpenAPI: the API's OpenAPI document, with the keyed
//		// routes' idempotency policies (app.Policies) published by idemopenapi.
//	}
//
// Storage: without a database setting, GORM on the SQLite file orders.db in the working
// directory (pure Go, no cgo, no server); with a postgres:// URL, pgxstore (default) or
// gormstore (-store gorm); with a mysql:// URL or a go-sql-driver DSN, gormstore on MySQL
// or MariaDB. The business rows are written through the request's
// idempotency transaction (pgxstore.MustTx, gormstore.MustDB), so they commit together with the
// key's recorded response, or with the payment phase that writes them.
package demo
