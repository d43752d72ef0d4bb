package phasedtest

import (
	"context"
	"testing"
	"time"
)

// TestDerivedKeysAcrossScopes: two tenants send the same Idempotency-Key with the same
// payment. They are two operations, and a platform charging for both through one provider
// account must make two charges: the derived keys the provider sees must differ.
func TestDerivedKeysAcrossScopes(t *testing.T) {
	t.Parallel()
	be := newBackend(t, kindPgx)
	a := newApp(be, time.Minute, nil)
	a.providerAccount = func(string) string { return "platform" }
	base := serve(t, a, netHTTP)

	key := newID("order_")
	tenantA, tenantB := newID("acct_"), newID("acct_")
	ra := mustPost(t, base, "/v1/payments", tenantA, key, paymentBody)
	rb := mustPost(t, base, "/v1/payments", tenantB, key, paymentBody)
	pa, errA := ra.payment()
	pb, errB := rb.payment()
	if ra.Status != 201 || rb.Status != 201 || errA != nil || errB != nil {
		t.Fatalf("tenant A: %v; tenant B: %v; want two 201s", ra, rb)
	}
	var charges int
	if err := be.provider.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+be.provider.table+
		` WHERE account = 'platform'`).Scan(&charges); err != nil {
		t.Fatal(err)
	}
	if charges != 2 || pa.ChargeID == pb.ChargeID {
		t.Errorf("two tenants' payments made %d provider charges and name charges %q and %q: want two distinct charges",
			charges, pa.ChargeID, pb.ChargeID)
	}
}
