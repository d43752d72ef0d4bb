package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/ginidem"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/redisstore"
)

// redisstore's worked example on Gin (redisstore/README.md): the same phased handler,
// an http.HandlerFunc, mounted behind authentication and ginidem. A retry replays the
// 201 and the phase ran once.
func TestRedisWorkedExampleOnGin(t *testing.T) {
	gin.SetMode(gin.TestMode)
	client, prefix := testdb.Redis(t) // fails the test when Redis is unreachable
	charges := 0
	// pay stands for the README's pay(payments, mailer): one phase, then the recorded 201.
	var payments, mailer any
	pay := func(_, _ any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			op := core.MustOperation(r.Context())
			if err := op.Phase(r.Context(), "charged", func(context.Context) error { charges++; return nil }); err != nil {
				http.Error(w, "retry with the same key", http.StatusBadGateway)
				return
			}
			w.WriteHeader(http.StatusCreated)
		}
	}
	auth := func(c *gin.Context) {
		if account := c.GetHeader("X-Account-ID"); account != "" {
			c.Set("account", account)
			return
		}
		c.AbortWithStatus(http.StatusUnauthorized)
	}

	// snippet:begin redis-gin
	store := redisstore.New(client, redisstore.WithPrefix(prefix))
	eng, err := core.New(core.Config{Store: store, Mode: core.ModePhased})
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	v1 := r.Group("/v1", auth) // authentication first: it names the account, the keys' scope
	v1.POST("/payments", ginidem.New(eng, ginidem.Config{Scope: func(c *gin.Context) string { return c.GetString("account") }}),
		gin.WrapF(pay(payments, mailer))) // the net/http handler, as is
	// snippet:end redis-gin

	for attempt, replayed := range []string{"", "true"} {
		req := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount_cents":1250}`))
		req.Header.Set("X-Account-ID", "alice")
		req.Header.Set("Idempotency-Key", "gin-pay-1")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		require.Equal(t, http.StatusCreated, w.Code, "attempt %d", attempt+1)
		assert.Equal(t, replayed, w.Header().Get("Idempotent-Replayed"), "attempt %d", attempt+1)
	}
	assert.Equal(t, 1, charges, "the phase ran once")
}
