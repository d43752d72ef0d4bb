package idemtest_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/ginidem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/adaptertest"
	"github.com/idemkit/idem/internal/testdb"
	"github.com/idemkit/idem/pgxstore"
)

// TestGinOnPostgresPassesEveryCheck runs the kit the way a team would: a Gin route whose
// insert commits with the key (pgxstore, atomic), the side effect counted in the table,
// and a failure injected after the insert, which must roll it back.
func TestGinOnPostgresPassesEveryCheck(t *testing.T) {
	ctx := t.Context()
	url, _ := testdb.PostgresSchema(t)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store := pgxstore.New(pool)
	require.NoError(t, store.Migrate(ctx))
	_, err = pool.Exec(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, account text NOT NULL, item text NOT NULL)`)
	require.NoError(t, err)

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	auth := func(c *gin.Context) { c.Set("account", c.GetHeader("X-Account")) }
	idem := ginidem.New(adaptertest.Engine(core.Config{Store: store}), ginidem.Config{Scope: func(c *gin.Context) string { return c.GetString("account") }})
	r.POST("/v1/orders", auth, idem, func(c *gin.Context) {
		var in struct {
			Item string `json:"item"`
		}
		if err := c.ShouldBindJSON(&in); err != nil {
			c.JSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		ctx := c.Request.Context()
		var id int64
		if err := pgxstore.MustTx(ctx).QueryRow(ctx, `INSERT INTO orders (account, item) VALUES ($1, $2) RETURNING id`,
			c.GetString("account"), in.Item).Scan(&id); err != nil {
			c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": err.Error()})
			return
		}
		if c.GetHeader("X-Fail") == "1" { // after the insert: the rollback must undo it
			c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "injected"})
			return
		}
		c.Header("Location", fmt.Sprintf("/v1/orders/%d", id))
		c.JSON(http.StatusCreated, gin.H{"id": id, "item": in.Item})
	})
	r.GET("/v1/orders", auth, func(c *gin.Context) {
		var n int
		_ = pool.QueryRow(c.Request.Context(), `SELECT count(*) FROM orders WHERE account = $1`, c.GetString("account")).Scan(&n)
		c.JSON(http.StatusOK, gin.H{"orders": n})
	})

	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(context.WithoutCancel(ctx), `SELECT count(*) FROM orders`).Scan(&n))
		return n
	}
	rep := idemtest.Check(t, idemtest.Target{
		Handler:       r,
		Path:          "/v1/orders",
		GetPath:       "/v1/orders",
		Header:        http.Header{"X-Account": {"alice"}},
		Body:          func(i int) []byte { return fmt.Appendf(nil, `{"item":"book %d"}`, i) },
		SideEffects:   count,
		InjectFailure: func(r *http.Request) { r.Header.Set("X-Fail", "1") },
	})
	require.Zero(t, rep.Count(idemtest.Skip))
}
