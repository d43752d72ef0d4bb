package phasedtest

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"
)

// serve serves a with fw on a loopback port for the test's duration and returns its URL.
func serve(t testing.TB, a *app, fw framework) string {
	t.Helper()
	srv := httptest.NewServer(a.handler(fw))
	t.Cleanup(srv.Close)
	return srv.URL
}

// operation returns a fresh account and key: one operation of its own.
func operation() (account, key string) { return newID("acct_"), newID("key_") }

// gate holds a request at a hook point until the test lets it go.
type gate struct {
	entered chan struct{}
	proceed chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}, 16), proceed: make(chan struct{})} }

// hold signals that a request reached the gate and waits until the test opens it (or the
// request ends).
func (g *gate) hold(ctx context.Context) error {
	g.entered <- struct{}{}
	select {
	case <-g.proceed:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (g *gate) open() { close(g.proceed) }

// waitTimeout bounds every wait of the tests for something another goroutine or process
// does.
const waitTimeout = 15 * time.Second

// wait receives from c, failing the test after waitTimeout.
func wait[T any](t testing.TB, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		panic("unreachable")
	}
}

// result is a reply or the error of getting it, sent from a goroutine.
type result struct {
	r   *reply
	err error
}

// postAsync sends post in a goroutine and returns the channel its result arrives on.
func postAsync(base, path, account, key, body string) <-chan result {
	c := make(chan result, 1)
	go func() {
		r, err := post(context.Background(), base, path, account, key, body)
		c <- result{r, err}
	}()
	return c
}

// mustPost sends post and fails the test if no response comes back.
func mustPost(t testing.TB, base, path, account, key, body string) *reply {
	t.Helper()
	r, err := post(context.Background(), base, path, account, key, body)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return r
}
