// Command idem operates idem's key table and checks deployed routes.
//
//	go run github.com/idemkit/idem/cmd/idem <command> [flags]
//
//	migrate -db URL [-table T]                               create the key table (the stores' own DDL)
//	sweep   -db URL [-table T] [-retention 24h] [-batch 5000] delete expired keys once, batch by batch
//	show    -db URL [-table T] -scope S -key K               one key: why did my retry get a 409?
//	stats   -db URL [-table T] [-retention 24h]              keys by state, oldest, expired not swept
//	check   -url URL [-url URL2 …] -body @f.json -header 'K: V' …   run idemtest's checks over HTTP
//
// -db is postgres://…, mysql://user:pass@host:3306/db (or a go-sql-driver DSN,
// user:pass@tcp(host:3306)/db, bare or after mysql://), sqlite:PATH (or a file path), or redis://… (rediss://; a
// Cluster names further nodes with ?addr=host:port). PostgreSQL goes through pgxstore,
// MySQL/MariaDB and SQLite through gormstore, Redis through redisstore: every command reads
// and writes the keys through the store (show through its Lookup, stats through its
// CountKeys), so it sees them as the application does. -table names the key table for
// migrate, sweep, show and stats alike: idempotency_keys by default, the name given to the
// store's WithTable otherwise (schema-qualified on PostgreSQL if it is there). On Redis,
// -prefix (default idem:) names the store's keys instead, and migrate and sweep have
// nothing to do.
//
// Exit status: 0 success; 1 a failed check, a key not found, or a database error; 2 a
// command-line error.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: idem <command> [flags]

commands:
  migrate  -db URL [-table T]                        create the key table if it does not exist
  sweep    -db URL [-table T] [-retention 24h] [-batch 5000]
                                                     delete keys past the retention, once
  show     -db URL [-table T | -prefix P] -scope S -key K
                                                     one key's state, lease, stored response
  stats    -db URL [-table T | -prefix P] [-retention 24h]
                                                     keys by state, oldest key, expired not yet swept
  check    -url URL [-url URL2 …] [-method POST] [-body @file|JSON] [-header 'K: V' …]
           [-get PATH] [-fail-header 'K: V'] [-parallel 20] [-timeout 60s] [-json]
                                                     run the idempotency checks against a deployed route

-db: postgres://user:pass@host:5432/db, mysql://user:pass@host:3306/db, sqlite:PATH,
     redis://user:pass@host:6379/0 (-prefix P: the redisstore's key prefix)
Run "idem <command> -h" for a command's flags.
`

// commands by name; each parses its own flags from args.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"migrate": migrateCmd,
	"sweep":   sweepCmd,
	"show":    showCmd,
	"stats":   statsCmd,
	"check":   checkCmd,
}

// errFailed means the command said what went wrong on stdout already: exit 1, no more
// to print.
var errFailed = errors.New("failed")

// run is the whole command: main without the process, for tests.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "idem: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	err := cmd(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errFailed):
		return 1
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "idem %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "idem %s: %v\n", args[0], err)
		return 1
	}
}
