// Package idemclient is the client half of the Idempotency-Key contract: an
// http.RoundTripper that gives each unsafe request one key for its logical operation and
// retries it with that key, so that a lost answer or a busy server never makes the
// operation run twice, and a retry of a finished operation gets its recorded answer (a
// replay, marked Idempotent-Replayed: true).
//
// The setup is two lines:
//
//	client := &http.Client{Transport: &idemclient.Transport{}}
//	resp, err := client.Post("https://api.example.com/v1/orders", "application/json", strings.NewReader(body))
//
// A POST or PATCH without an Idempotency-Key header gets a fresh random key (a UUID)
// before its first attempt, and every retry sends that key and the same body. A
// request that must keep its key beyond one call (a double click, a job re-run after a
// restart) carries it in its context:
//
//	key := idemclient.NewKey()                 // store it with the operation, before sending
//	ctx := idemclient.WithKey(ctx, key)
//	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
//
// What is retried and what is not, the waits and the limits are Transport's doc. In
// short: transport errors, 408, 429, 502, 503, 504 and the server's "in progress" 409
// are retried, honouring Retry-After; 400, 422, any other 4xx and 500 or 501 are
// answered at once. Bound the whole with the request's context (or http.Client.Timeout),
// Transport.MaxElapsed and Transport.MaxAttempts.
//
// # Against a phased server's lease
//
// A phased idem server answers a duplicate of an attempt that holds its key 409 "in
// progress" with Retry-After: 1, until the attempt finishes or, if its worker crashed,
// until its lease runs out (core.Config.Lease, 60s by default) and a retry takes the key
// over. The defaults here (5 attempts, 30s) give up after about 4 seconds of such 409s:
// right for an interactive call, whose caller can try again later with the same key
// (WithKey). A client that must wait out a crashed attempt itself needs MaxAttempts at
// least the lease in seconds plus a few, and MaxElapsed (and the context's deadline)
// beyond the lease, for example against the default lease:
//
//	tr := &idemclient.Transport{MaxAttempts: 70, MaxElapsed: 75 * time.Second}
//
// or a server whose Lease is shorter (its live handlers keep their key: the lease is
// renewed every Lease/3).
//
// # What happened
//
// A caller that wants to know the key used, the number of attempts, or whether the final
// answer was a replay passes a Result in the request's context with WithResult;
// Transport fills it in before RoundTrip returns, errors included. A context value, not
// response headers, because it also reports on a request that ended in an error (no
// response), and it follows the precedent of net/http/httptrace. Per retry,
// Transport.OnRetry is called and Transport.Logger, when set, gets a line.
//
// # With net/http's own retry
//
// net/http's Transport itself sends a request again when a connection it reused
// from its pool fails before any byte of the answer arrived, provided the request is
// replayable: a GET or HEAD, or any request carrying an Idempotency-Key (or
// X-Idempotency-Key) header and a body it can rewind (golang/go#19943). Since Transport
// sets the key on the request before handing it to Base, such a resend carries the same
// key as the attempt it repeats: the two mechanisms agree, and the server sees one key
// for the operation however many times it is sent. The resend happens inside one
// Base.RoundTrip, so Result.Attempts does not count it.
//
// # Redirects
//
// http.Client sends each hop of a 307 or 308 redirect as a new request through the
// Transport; without WithKey each hop gets a key of its own (each is another URL). With
// WithKey every hop sends that key.
//
// # With OpenTelemetry
//
// Transport is a plain http.RoundTripper, so otelhttp composes either way round:
//
//	// one client span per logical request, retries inside it
//	client := &http.Client{Transport: otelhttp.NewTransport(&idemclient.Transport{})}
//
//	// one client span per attempt
//	client := &http.Client{Transport: &idemclient.Transport{Base: otelhttp.NewTransport(nil)}}
//
// # Why the backoff is written here
//
// The retry loop is a few lines of its own rather than a library's, such as
// github.com/cenkalti/backoff/v5 (the one that fits best). Its Retry reads the real
// clock and timer with no way to give it others, so every test of a wait would really
// sleep; it starts a wait that the context's deadline will cut, and so ends with the
// context's error where the caller needs the server's last answer (a 503 problem saying
// why); and it sees an *http.Response only as an operation's value, to be turned into an
// error to be retried. Every decision here is about the response: which statuses, a
// 409's problem type, a Retry-After in seconds or as an HTTP-date, draining a retried
// body, returning the last response unread. What remains generic, an exponential bound
// with jitter, is a few lines (Transport.backoff). The only dependency is
// github.com/google/uuid, for the keys.
package idemclient
