package adapter_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/adapter"
	"github.com/idemkit/idem/core/memstore"
)

// An adapter for a framework whose handlers take a context of its own (ctx here): read
// the request from it, run the rest of the chain into the held writer, and act on what
// Handle reports.
func ExampleHandle() {
	type ctx struct {
		w       http.ResponseWriter
		r       *http.Request
		account string // set by the framework's authentication
	}
	eng, err := core.New(core.Config{Store: memstore.New()})
	if err != nil {
		panic(err)
	}
	createOrder := func(c *ctx) {
		c.w.WriteHeader(http.StatusCreated)
		fmt.Fprint(c.w, `{"id":1}`)
	}
	middleware := func(c *ctx, chain func(*ctx)) {
		switch adapter.Handle(eng, c.w, c.r, func() string { return c.account }, func(held http.ResponseWriter, r *http.Request) {
			chain(&ctx{w: held, r: r, account: c.account})
		}) {
		case adapter.Passed:
			chain(c) // not keyed: as without idem
		case adapter.Ran, adapter.Answered:
			// the engine has answered: the chain has run, or must not
		}
	}

	for range 2 {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"item":"book"}`))
		r.Header.Set("Idempotency-Key", "k1")
		w := httptest.NewRecorder()
		middleware(&ctx{w: w, r: r, account: "acct"}, createOrder)
		fmt.Printf("%d %s replayed=%q\n", w.Code, w.Body, w.Header().Get("Idempotent-Replayed"))
	}
	// Output:
	// 201 {"id":1} replayed=""
	// 201 {"id":1} replayed="true"
}
