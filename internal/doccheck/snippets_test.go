package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A snippet marker in a Markdown file says that the fenced block right after it is the
// text of a Go file, or of a region of one:
//
//	<!-- snippet: examples/quickstart/main.go -->
//	<!-- snippet: examples/quickstart/recipes_test.go#skipper -->
//
// A region is the lines between "// snippet:begin NAME" and "// snippet:end NAME", with
// their common indentation removed, and without the blank lines gofmt puts before an end
// marker that follows a top-level declaration. The Go file is compiled and tested, so the snippet
// cannot rot.
var snippetMarker = regexp.MustCompile(`(?m)^<!-- snippet: ([^ #]+)(?:#([A-Za-z0-9_-]+))? -->\n` + "```go\n" + `((?s:.*?))` + "```\n")

// snippetDocs are the documents whose snippets are checked.
var snippetDocs = []string{"README.md", "docs/problems.md", "docs/phased-operations.md", "docs/webhooks.md", "docs/grpc.md",
	"gormstore/README.md", "redisstore/README.md"}

// TestSnippetsAreTheirFiles: every marked snippet in the docs equals its source.
func TestSnippetsAreTheirFiles(t *testing.T) {
	root := moduleRoot(t)
	found := map[string]bool{}
	for _, doc := range snippetDocs {
		b, err := os.ReadFile(filepath.Join(root, doc))
		require.NoError(t, err)
		text := string(b)
		require.Equal(t, strings.Count(text, "<!-- snippet:"), len(snippetMarker.FindAllString(text, -1)),
			"%s: a snippet marker must be followed directly by a ```go block", doc)
		for _, m := range snippetMarker.FindAllStringSubmatch(text, -1) {
			file, region, got := m[1], m[2], m[3]
			name := file
			if region != "" {
				name += "#" + region
			}
			found[name] = true
			t.Run(doc+"/"+name, func(t *testing.T) {
				src, err := os.ReadFile(filepath.Join(root, file))
				require.NoError(t, err, "%s names %s", doc, file)
				want := string(src)
				if region != "" {
					want = extractRegion(t, want, region)
				}
				assert.Equal(t, want, got, "%s: the snippet of %s differs from the file; copy the file's text into the document", doc, name)
			})
		}
	}
	// The README's quick start and recipes are snippets, not free text.
	for _, name := range []string{"examples/quickstart/main.go", "examples/quickstart/recipes_test.go#skipper", "examples/quickstart/recipes_test.go#optional",
		"idemclient/example_test.go#setup", "idemclient/example_test.go#withkey",
		"examples/quickstart/policy_test.go#policy", "examples/quickstart/policy_test.go#audit"} {
		assert.True(t, found[name], "README.md should show %s as a snippet", name)
	}
}

func extractRegion(t *testing.T, src, name string) string {
	t.Helper()
	begin, end := "// snippet:begin "+name+"\n", "// snippet:end "+name+"\n"
	_, rest, ok := strings.Cut(src, begin)
	require.True(t, ok, "no %q", strings.TrimSpace(begin))
	body, _, ok := strings.Cut(rest, end)
	require.True(t, ok, "no %q", strings.TrimSpace(end))
	lines := strings.Split(body, "\n")
	lines = lines[:len(lines)-1] // what follows the last newline is the end marker's indentation
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	indent, first := "", true
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		lead := l[:len(l)-len(strings.TrimLeft(l, "\t"))]
		if first || len(lead) < len(indent) {
			indent, first = lead, false
		}
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(strings.TrimPrefix(l, indent))
		b.WriteByte('\n')
	}
	return b.String()
}
