package pgxstore_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/pgxstore"
)

// A pool on a primary with a synchronous standby, over every node
// (target_session_attrs=read-write finds the primary after a failover): a completion
// whose wait for the standby was cancelled answers 503 not-recorded instead of a 201
// that a failover could take back.
func ExampleWatchReplication() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig("postgres://app@db1:5432,db2:5432/app?target_session_attrs=read-write")
	if err != nil {
		log.Fatal(err)
	}
	pgxstore.WatchReplication(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	eng, err := core.New(core.Config{Store: pgxstore.New(pool)})
	if err != nil {
		log.Fatal(err)
	}
	_ = eng // eng.Middleware(…) guards the routes, as in the package example
}
