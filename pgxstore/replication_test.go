package pgxstore_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/internal/pgtopo"
	"github.com/idemkit/idem/pgxstore"
)

// TestCutReplicationWaitIsNotRecorded: on a primary with a synchronous standby that is
// down, every COMMIT waits for the standby; an operator's pg_cancel_backend (or a
// client's cancel request) ends the wait, and PostgreSQL answers the COMMIT with success
// and the warning "already committed locally, but might not have been replicated". A
// store whose pool has WatchReplication takes that completion as not recorded: the client
// gets 503 not-recorded with Retry-After, in atomic and phased mode, and its retry gets
// the replay, the commit having survived. Without WatchReplication the same completion is
// answered 201: an acknowledgement a failover to the standby could take back.
func TestCutReplicationWaitIsNotRecorded(t *testing.T) {
	t.Parallel()
	c := pgtopo.New(t, true)
	require.NoError(t, c.Standby().Kill())
	primary := c.Primary()

	defer primary.CutReplicationWaits()()

	for _, tc := range []struct {
		name    string
		mode    core.Mode
		watched bool
		want    int
	}{
		{"atomic, watched", core.ModeAtomic, true, http.StatusServiceUnavailable},
		{"phased, watched", core.ModePhased, true, http.StatusServiceUnavailable},
		{"atomic, not watched", core.ModeAtomic, false, http.StatusCreated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(primary.URL())
			require.NoError(t, err)
			cfg.MaxConns = 4
			if tc.watched {
				pgxstore.WatchReplication(&cfg.ConnConfig.Config)
			}
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			require.NoError(t, err)
			defer pool.Close()
			table := fmt.Sprintf("keys_%s", strings.NewReplacer(",", "", " ", "_").Replace(tc.name))
			store := pgxstore.New(pool, pgxstore.WithTable(table))
			require.NoError(t, store.Migrate(t.Context()))
			eng, err := core.New(core.Config{Store: store, Mode: tc.mode, StoreTimeout: time.Minute})
			require.NoError(t, err)
			srv := httptest.NewServer(eng.Middleware(func(*http.Request) string { return "acct" })(http.HandlerFunc(
				func(w http.ResponseWriter, r *http.Request) {
					w.WriteHeader(http.StatusCreated)
					_, _ = io.WriteString(w, `{"id":1}`)
				})))
			defer srv.Close()

			send := func() (*http.Response, string) {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, strings.NewReader(`{}`))
				require.NoError(t, err)
				req.Header.Set("Idempotency-Key", "k1")
				resp, err := srv.Client().Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp, string(b)
			}
			resp, body := send()
			require.Equal(t, tc.want, resp.StatusCode, body)
			if tc.want == http.StatusServiceUnavailable {
				assert.Contains(t, body, "not-recorded")
				assert.NotEmpty(t, resp.Header.Get("Retry-After"))
			}
			resp, body = send()
			assert.Equal(t, http.StatusCreated, resp.StatusCode, body)
			assert.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"), "the commit survived on the primary: the retry replays it")
		})
	}
}
