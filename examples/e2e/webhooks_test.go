package e2e

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"
)

const webhookPath = "/v1/webhooks/provider"

// deliver POSTs a webhook event as the provider does: no Idempotency-Key, the event's
// id in the body.
func (s *server) deliver(t testing.TB, account, body string) *response {
	t.Helper()
	return s.do(t, http.MethodPost, webhookPath, body, "Content-Type", "application/json", "X-Account-ID", account)
}

// deliverUntil2xx redelivers body after every 409, as a provider retries, until a 2xx.
func (s *server) deliverUntil2xx(t testing.TB, account, body string) *response {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := s.deliver(t, account, body)
		if r.Status != http.StatusConflict || time.Now().After(deadline) {
			return r
		}
		time.Sleep(100 * time.Millisecond) // the provider's backoff (Retry-After says 1s)
	}
}

// eventRows counts the received-event rows of id in account's list.
func (s *server) eventRows(t testing.TB, account, id string) int {
	t.Helper()
	r := s.get(t, webhookPath+"/events", account)
	requireStatus(t, r, http.StatusOK)
	var list struct {
		Events []struct{ ID string } `json:"events"`
	}
	if err := json.Unmarshal(r.Body, &list); err != nil {
		t.Fatalf("events list %s: %v", r.Body, err)
	}
	n := 0
	for _, ev := range list.Events {
		if ev.ID == id {
			n++
		}
	}
	return n
}

// testWebhooks: the webhook receiver keys deliveries by the event's id. 20 parallel
// deliveries of one event record one row and all end with the same 200; a redelivery
// after a 500 is processed once; a redelivery with another body is 422; a body without
// an id is 400.
func testWebhooks(t *testing.T, s *server) {
	acct := newAccount()
	evt := random("evt_")
	body := `{"id":"` + evt + `","type":"order.paid","data":{"order":"42"}}`

	var wg sync.WaitGroup
	answers := make([]*response, 20)
	for i := range answers {
		wg.Go(func() {
			r, err := s.try(http.MethodPost, webhookPath, body, "Content-Type", "application/json", "X-Account-ID", acct)
			if err != nil {
				t.Errorf("delivery %d: %v", i, err)
				return
			}
			if r.Status == http.StatusConflict {
				r = s.deliverUntil2xx(t, acct, body)
			}
			answers[i] = r
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	fresh := 0
	for i, r := range answers {
		requireStatus(t, r, http.StatusOK)
		if r.Header.Get("Idempotent-Replayed") != "true" {
			fresh++
		}
		if string(r.Body) != string(answers[0].Body) {
			t.Fatalf("delivery %d answered %s, delivery 0 %s", i, r.Body, answers[0].Body)
		}
	}
	if fresh != 1 {
		t.Fatalf("%d deliveries were processed, want 1", fresh)
	}
	if n := s.eventRows(t, acct, evt); n != 1 {
		t.Fatalf("20 parallel deliveries recorded %d rows, want 1", n)
	}

	failing := random("evt_")
	fbody := `{"id":"` + failing + `","type":"demo.fail_first"}`
	requireStatus(t, s.deliver(t, acct, fbody), http.StatusInternalServerError)
	if n := s.eventRows(t, acct, failing); n != 0 {
		t.Fatalf("the 500 left %d rows, want 0", n)
	}
	retry := s.deliver(t, acct, fbody)
	requireFresh(t, retry)
	requireStatus(t, retry, http.StatusOK)
	requireReplay(t, retry, s.deliver(t, acct, fbody))
	if n := s.eventRows(t, acct, failing); n != 1 {
		t.Fatalf("the redelivery after a 500 recorded %d rows, want 1", n)
	}

	requireProblem(t, s.deliver(t, acct, `{"id":"`+evt+`","type":"order.refunded"}`), http.StatusUnprocessableEntity)
	requireProblem(t, s.deliver(t, acct, `{"type":"order.paid"}`), http.StatusBadRequest)
	if n := s.eventRows(t, acct, evt); n != 1 {
		t.Fatalf("after the rejected deliveries: %d rows, want 1", n)
	}
}
