package idemriver_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goListDeps returns every package that pkgs import, directly or not (go list -deps).
func goListDeps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	require.NoError(t, err, "go list -deps: %s", out)
	return strings.Fields(string(out))
}

// TestRiverOnlyWhereUsed: core, the adapters and the stores build without River; only
// idemriver imports it, and idemriver imports neither pgx nor GORM (the application picks
// River's driver).
func TestRiverOnlyWhereUsed(t *testing.T) {
	for _, dep := range goListDeps(t, "github.com/idemkit/idem/core/...", "github.com/idemkit/idem/ginidem",
		"github.com/idemkit/idem/echoidem", "github.com/idemkit/idem/pgxstore", "github.com/idemkit/idem/gormstore",
		"github.com/idemkit/idem/redisstore", "github.com/idemkit/idem/promidem", "github.com/idemkit/idem/otelidem",
		"github.com/idemkit/idem/idemclient", "github.com/idemkit/idem/idemtest", "github.com/idemkit/idem/grpcidem") {
		assert.False(t, strings.HasPrefix(dep, "github.com/riverqueue/"), "a package outside idemriver imports %s", dep)
	}
	deps := goListDeps(t, "github.com/idemkit/idem/idemriver")
	assert.Contains(t, deps, "github.com/riverqueue/river")
	for _, dep := range deps {
		for _, heavy := range []string{"github.com/jackc/pgx", "gorm.io/", "github.com/riverqueue/river/riverdriver/river"} {
			assert.False(t, strings.HasPrefix(dep, heavy), "idemriver imports %s", dep)
		}
	}
}
