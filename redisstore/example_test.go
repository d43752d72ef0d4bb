package redisstore_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"time"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/redisstore"
	"github.com/redis/go-redis/v9"
)

// exampleClient is the examples' client of the test Redis, and a prefix of their own.
func exampleClient() (*redis.Client, string) {
	p := fmt.Sprintf("idemtest:%s:example-%d:", run, prefixes.Add(1))
	return redis.NewClient(&redis.Options{Addr: redisAddr(), ContextTimeoutEnabled: true}), p
}

// New takes any go-redis client: one node, Sentinel (redis.NewFailoverClient) or Cluster
// (redis.NewClusterClient). Every key of one operation lives in one hash, named by the
// prefix and a hash tag, so a Cluster keeps it in one slot.
func ExampleNew() {
	client, prefix := exampleClient()
	defer client.Close()
	defer dropPrefix(prefix)

	store := redisstore.New(client, redisstore.WithPrefix("payments:"), redisstore.WithRetention(48*time.Hour))
	fmt.Println(store.SupportsAtomic(), store.Retention())
	key := store.Key("account-1", "9f1c7a52-order")
	fmt.Println(key[:len("payments:{")], len(key))
	// Output:
	// false 48h0m0s
	// payments:{ 75
}

// The engine drives the store like this: the first request claims the key, records a
// phase after its side effect, and completes; the retry gets the record to replay.
func Example_phased() {
	client, prefix := exampleClient()
	defer client.Close()
	defer dropPrefix(prefix)
	store := redisstore.New(client, redisstore.WithPrefix(prefix))

	ctx := context.Background()
	fp := sha256.Sum256([]byte(`POST /payments {"amount":10}`))
	c := storage.Claim{
		Scope: "account-1", Key: "9f1c7a52-order", Fingerprint: fp[:],
		Method: http.MethodPost, Path: "/payments", Mode: storage.ModePhased,
		Lease: time.Minute, Retention: store.Retention(),
	}
	claimed, err := store.Claim(ctx, c)
	if err != nil {
		panic(err)
	}
	lock := claimed.Lock
	fmt.Println("claimed at", lock.RecoveryPoint())
	err = lock.Phase(ctx, "charged", func(ctx context.Context) error {
		return nil // call the provider here, with a key stable across retries
	})
	if err != nil {
		panic(err)
	}
	err = lock.Complete(ctx, &storage.Response{Status: http.StatusCreated, Header: http.Header{"Location": {"/payments/1"}}, Body: []byte(`{"id":1}`)})
	if err != nil {
		panic(err)
	}

	claimed, err = store.Claim(ctx, c)
	if err != nil {
		panic(err)
	}
	rec := claimed.Record
	fmt.Println("retry gets", rec.State, rec.RecoveryPoint, rec.Response.Status, rec.Response.Header.Get("Location"), string(rec.Response.Body))
	// Output:
	// claimed at started
	// retry gets completed charged 201 /payments/1 {"id":1}
}
