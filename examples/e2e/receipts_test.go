package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hasReceipts reports whether the example server sends receipts on st: River runs on
// PostgreSQL, and inserts in the store's transaction, so not with the payments' keys in
// Redis (examples/internal/demo/receipts.go).
func hasReceipts(st storage) bool { return strings.HasPrefix(st.name, "postgres-") && !st.redis }

// requireReceipt checks the receipt of the payment whose 201 is created: on PostgreSQL,
// GET /v1/payments/{id} says "sent" once the River worker delivered it (polled: the worker
// runs after the response), elsewhere it says nothing about a receipt.
func requireReceipt(t *testing.T, s *server, st storage, acct string, created *response) {
	t.Helper()
	path := "/v1/payments/" + str(t, created.Body, "id")
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := s.get(t, path, acct)
		requireStatus(t, r, http.StatusOK)
		var receipt string
		if raw, ok := fields(t, r.Body)["receipt"]; ok {
			if err := json.Unmarshal(raw, &receipt); err != nil {
				t.Fatalf("receipt %s: %v", raw, err)
			}
		}
		switch {
		case !hasReceipts(st):
			if receipt != "" {
				t.Fatalf("%s: receipt %q on a store without receipts", path, receipt)
			}
			return
		case receipt == "sent":
			return
		case receipt != "queued":
			t.Fatalf("%s: receipt %q, want queued, then sent", path, receipt)
		case time.Now().After(deadline):
			t.Fatalf("%s: the receipt is still queued after 20s", path)
		}
		time.Sleep(100 * time.Millisecond) // polling the worker, which runs after the response
	}
}

// withoutReceipt returns the payment b without its "receipt" field, which GET
// /v1/payments/{id} adds on PostgreSQL to the fields of the 201.
func withoutReceipt(t testing.TB, b []byte) []byte {
	t.Helper()
	m := fields(t, b)
	delete(m, "receipt")
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
