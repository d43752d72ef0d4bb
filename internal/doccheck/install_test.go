package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInstallPinsIdemsVersions: the README's go get line that pins the frameworks and
// drivers (for a module built against a checkout, where go mod tidy may pick newer ones)
// names exactly the versions idem's go.mod requires.
func TestInstallPinsIdemsVersions(t *testing.T) {
	root := moduleRoot(t)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	line := regexp.MustCompile(`(?m)^go get (github\.com/gin-gonic/gin@.*)$`).FindSubmatch(readme)
	require.NotNil(t, line, "the README pins the frameworks' versions with one go get line")
	pins := regexp.MustCompile(`(\S+)@(\S+)`).FindAllSubmatch(line[1], -1)
	require.Len(t, pins, 5)
	for _, p := range pins {
		want := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(string(p[1])) + ` (\S+)`).FindSubmatch(gomod)
		require.NotNil(t, want, "%s is not in go.mod", p[1])
		assert.Equal(t, string(want[1]), string(p[2]), "%s: the README pins another version than go.mod", p[1])
	}
}
