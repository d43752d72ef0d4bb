package gormstore

import (
	"database/sql"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/idemkit/idem/core/storage"
	"github.com/idemkit/idem/internal/keyrow"
)

// Store is a storage.Store on a GORM database: PostgreSQL (gorm.io/driver/postgres),
// MySQL/MariaDB with InnoDB (gorm.io/driver/mysql) or SQLite (github.com/glebarez/sqlite).
// It supports both modes; atomic is the engine's default for it. It is safe for
// concurrent use.
type Store struct {
	db      *gorm.DB
	dialect dialect
	table   string // as configured, for GORM's Table
	quoted  string // quoted for raw SQL
	// lockSeed is the lock hash's state after the quoted table name (lockHash).
	lockSeed keyrow.LockSeed
	// PostgreSQL's atomic claim and completion (claimLocked).
	claimSQL, existsSQL, recordSQL string
	retention                      time.Duration
	iso                            sql.IsolationLevel

	lookupFirst bool
	rowFirst    bool // WithClaimRowFirst
}

var _ storage.Store = (*Store)(nil)

// New returns a Store on db. It does not touch the database: call Migrate to create the
// table, or create it yourself (see the package documentation). New panics on a
// programming error: a nil db, a dialect other than postgres, mysql and sqlite, an empty
// table name, a retention that is not positive, or a MySQL DSN with clientFoundRows=true
// (the claim tells a new key from an existing one by the rows affected).
func New(db *gorm.DB, opts ...Option) *Store {
	if db == nil {
		panic("gormstore: New with a nil *gorm.DB")
	}
	d, err := dialectOf(db.Dialector.Name())
	if err != nil {
		panic(err.Error())
	}
	s := &Store{
		db:        db.Session(&gorm.Session{NewDB: true}),
		dialect:   d,
		table:     DefaultTable,
		retention: storage.DefaultRetention,
		// SQLite has one write lock: a replay that reads first never queues for it.
		lookupFirst: d == sqlite,
	}
	for _, o := range opts {
		o(s)
	}
	if strings.TrimSpace(s.table) == "" {
		panic("gormstore: WithTable with an empty name")
	}
	if s.retention <= 0 {
		panic(fmt.Sprintf("gormstore: WithRetention(%v): the retention must be positive", s.retention))
	}
	if clientFoundRows(db.Dialector) {
		panic("gormstore: the MySQL DSN sets clientFoundRows=true; the store needs the default (false)")
	}
	var b strings.Builder
	s.db.Dialector.QuoteTo(&b, s.table)
	s.quoted = b.String()
	s.lockSeed = keyrow.NewLockSeed(s.quoted)
	// claimSQL: the key's row, if one holds it, and the advisory lock taken only when none
	// does (claimLocked).
	s.claimSQL = claimSQL(s.quoted)
	s.existsSQL = "SELECT EXISTS (SELECT 1 FROM " + s.quoted + " WHERE scope = ? AND idem_key = ?)"
	s.recordSQL = "INSERT INTO " + s.quoted + " (scope, idem_key, request_hash, method, path, state, recovery_point, " +
		"response_code, response_headers, response_body, created_at, completed_at) " +
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, now(), statement_timestamp())"
	return s
}

// SupportsAtomic reports true: the store shares its transaction with the handler.
func (s *Store) SupportsAtomic() bool { return true }

// Retention reports how long keys are kept (WithRetention).
func (s *Store) Retention() time.Duration { return s.retention }
