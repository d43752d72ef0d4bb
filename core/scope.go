package core

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxScopeLength is the longest scope accepted, in bytes: what every store holds and
// gives back exactly (MySQL/MariaDB's scope column is VARBINARY(255)). The scope rule is
// in the package documentation, under Scope; map a longer identity to a scope first (its
// SHA-256 in hex is 64 bytes).
const MaxScopeLength = 255

// checkScope holds a scope to the scope contract (MaxScopeLength). An empty scope is
// ErrEmptyScope; any other rejection wraps ErrInvalidScope.
func checkScope(scope string) error {
	switch {
	case scope == "":
		return ErrEmptyScope
	case len(scope) > MaxScopeLength:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidScope, len(scope), MaxScopeLength)
	case !utf8.ValidString(scope):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidScope)
	case strings.IndexByte(scope, 0) >= 0:
		return fmt.Errorf("%w: holds a NUL byte", ErrInvalidScope)
	}
	return nil
}
