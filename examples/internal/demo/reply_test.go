package demo

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProblemTypesAreDocumented: every problem type URI of the demo links to a section
// of examples/README.md (a "### name" heading, whose GitHub anchor is the name).
func TestProblemTypesAreDocumented(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	headings := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^### (\S+)$`).FindAllStringSubmatch(string(b), -1) {
		headings[m[1]] = true
	}
	require.True(t, strings.HasPrefix(ProblemTypeBase, "https://github.com/idemkit/idem/blob/main/examples/README.md#"))
	for _, typ := range []string{ProblemUnauthenticated, ProblemInvalidRequest, ProblemNotFound, ProblemInternal, ProblemUnavailable, ProblemProvider} {
		anchor := strings.TrimPrefix(typ, ProblemTypeBase)
		assert.True(t, headings[anchor], "examples/README.md has no section \"### %s\" for the problem type %s", anchor, typ)
	}
}
