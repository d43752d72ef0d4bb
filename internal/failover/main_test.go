package failover_test

import (
	"io"
	"log"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The MySQL driver logs every connection a killed node cut; the tests check the
	// answers.
	_ = gomysql.SetLogger(log.New(io.Discard, "", 0))
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("github.com/jackc/puddle/v2.(*Pool).createIdleResources"),
		goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}
