package gormstore

import (
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// Defaults of the options.
const (
	// DefaultTable is the key table's name unless WithTable says otherwise.
	DefaultTable = "idempotency_keys"
)

// maxKeyBytes is the size of the scope and idem_key columns on MySQL/MariaDB, where they
// are VARBINARY(255): two of them make a 510-byte primary key, well inside InnoDB's index
// limits whatever the row format, compared byte for byte (case-sensitive, no trailing-space
// padding), as keys must be.
const maxKeyBytes = 255

// keyRow is the key table as GORM models it: one row per (scope, idem_key). Migrate adds
// a column missing from an existing table from it; a new table comes from Schema, whose
// columns TestSchemaMatchesModel holds to these.
type keyRow struct {
	Scope           keyText    `gorm:"column:scope;primaryKey;not null"`
	IdemKey         keyText    `gorm:"column:idem_key;primaryKey;not null"`
	RequestHash     []byte     `gorm:"column:request_hash;not null"`
	Method          string     `gorm:"column:method;not null"`
	Path            string     `gorm:"column:path;not null"`
	State           string     `gorm:"column:state;not null"`
	RecoveryPoint   string     `gorm:"column:recovery_point;not null"`
	LockedUntil     *time.Time `gorm:"column:locked_until;precision:6"`
	LeaseToken      tokenType  `gorm:"column:lease_token"`
	ResponseCode    *int32     `gorm:"column:response_code"`
	ResponseHeaders []byte     `gorm:"column:response_headers"`
	ResponseBody    []byte     `gorm:"column:response_body"`
	CreatedAt       time.Time  `gorm:"column:created_at;precision:6;not null;autoCreateTime:false"` // indexed by Migrate
	CompletedAt     *time.Time `gorm:"column:completed_at;precision:6"`
	// core.Completer's (storage.Completable): the kept request, attempts, next attempt,
	// and when a failed attempt released the lease (the completer's grace runs from it).
	Request           []byte     `gorm:"column:request"`
	CompleterAttempts int32      `gorm:"column:completer_attempts;not null;default:0"`
	NextAttempt       *time.Time `gorm:"column:next_attempt;precision:6"`
	ReleasedAt        *time.Time `gorm:"column:released_at;precision:6"`
}

// modelColumns are keyRow's columns, in table order.
var modelColumns = []string{"scope", "idem_key", "request_hash", "method", "path", "state", "recovery_point",
	"locked_until", "lease_token", "response_code", "response_headers", "response_body", "created_at", "completed_at",
	"request", "completer_attempts", "next_attempt", "released_at"}

// keyText is the type of the two primary-key columns: text on PostgreSQL and SQLite,
// VARBINARY(255) on MySQL/MariaDB (a utf8mb4 VARCHAR would compare case-insensitively and
// ignore trailing spaces, merging keys the contract keeps apart).
type keyText string

// GormDBDataType picks the column type per dialect.
func (keyText) GormDBDataType(db *gorm.DB, _ *schema.Field) string {
	switch db.Dialector.Name() {
	case "mysql":
		return "varbinary(255)"
	case "postgres", "sqlite":
		return "text"
	default:
		return "varchar(255)"
	}
}

// tokenType is the type of lease_token: uuid on PostgreSQL (the type pgxstore's schema
// uses, so either store works on a table made by the other), 16 bytes elsewhere.
type tokenType []byte

// GormDBDataType picks the column type per dialect.
func (tokenType) GormDBDataType(db *gorm.DB, _ *schema.Field) string {
	switch db.Dialector.Name() {
	case "postgres":
		return "uuid"
	case "mysql":
		return "varbinary(16)"
	default:
		return "blob"
	}
}
