package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
)

// problemKind is one ProblemKind constant as core/problem.go declares it.
type problemKind struct {
	name       string // the Go constant, e.g. ProblemKeyMissing
	kind       core.ProblemKind
	retryAfter bool // its comment says the problem carries Retry-After
}

// declaredKinds reads every constant of type ProblemKind from core/problem.go, so a kind
// added there without documentation fails TestProblemsDocumented.
func declaredKinds(t *testing.T) []problemKind {
	t.Helper()
	path := filepath.Join(moduleRoot(t), "core", "problem.go")
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments)
	require.NoError(t, err)
	var kinds []problemKind
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "ProblemKind" {
				continue
			}
			require.Len(t, vs.Names, 1, "one ProblemKind per line in core/problem.go")
			require.Len(t, vs.Values, 1, "%s: a ProblemKind constant needs its value", vs.Names[0].Name)
			lit, ok := vs.Values[0].(*ast.BasicLit)
			require.True(t, ok && lit.Kind == token.STRING, "%s: the value must be a string literal", vs.Names[0].Name)
			v, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			kinds = append(kinds, problemKind{
				name:       vs.Names[0].Name,
				kind:       core.ProblemKind(v),
				retryAfter: strings.Contains(vs.Comment.Text(), "Retry-After"),
			})
		}
	}
	require.NotEmpty(t, kinds, "no ProblemKind constants found in %s", path)
	return kinds
}

// problemSection is one "## kind" section of docs/problems.md.
type problemSection struct {
	status     int
	title      string
	retryAfter string // "yes" or "no"
	text       string
}

var summaryLine = regexp.MustCompile(`(?m)^\*\*Status:\*\* (\d{3}) · \*\*Title:\*\* (.+?) · \*\*Retry-After:\*\* (yes|no)$`)

func problemSections(t *testing.T) map[string]problemSection {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "problems.md"))
	require.NoError(t, err)
	sections := map[string]problemSection{}
	parts := strings.Split("\n"+string(b), "\n## ")
	for _, part := range parts[1:] {
		heading, body, _ := strings.Cut(part, "\n")
		heading = strings.TrimSpace(heading)
		require.NotContains(t, sections, heading, "docs/problems.md: section %q appears twice", heading)
		m := summaryLine.FindStringSubmatch(body)
		require.NotNil(t, m, "docs/problems.md, section %q: no line **Status:** NNN · **Title:** … · **Retry-After:** yes|no", heading)
		status, _ := strconv.Atoi(m[1])
		sections[heading] = problemSection{status: status, title: m[2], retryAfter: m[3], text: body}
	}
	return sections
}

// TestProblemsDocumented: the type URI of every problem links to a section of
// docs/problems.md (the section's heading is the kind, so its GitHub anchor is the kind)
// that states the kind's status, title and Retry-After, and says what happened and what
// the client should do. A section for a kind that no longer exists fails too.
func TestProblemsDocumented(t *testing.T) {
	kinds := declaredKinds(t)
	sections := problemSections(t)
	declared := map[string]bool{}
	for _, k := range kinds {
		declared[string(k.kind)] = true
		t.Run(string(k.kind), func(t *testing.T) {
			s, ok := sections[string(k.kind)]
			require.True(t, ok, "docs/problems.md has no section \"## %s\" for core.%s", k.kind, k.name)
			require.NotZero(t, k.kind.Status(), "core.%s has no status in core/problem.go", k.name)
			assert.Equal(t, k.kind.Status(), s.status, "status of %s", k.kind)
			assert.Equal(t, k.kind.Title(), s.title, "title of %s", k.kind)
			want := "no"
			if k.retryAfter {
				want = "yes"
			}
			assert.Equal(t, want, s.retryAfter, "Retry-After of %s (the constant's comment in core/problem.go says %v)", k.kind, k.retryAfter)
			assert.Contains(t, s.text, "What happened:", "section %s", k.kind)
			assert.Contains(t, s.text, "What the client should do:", "section %s", k.kind)
		})
	}
	for heading := range sections {
		assert.True(t, declared[heading], "docs/problems.md has a section %q, which is not a core.ProblemKind", heading)
	}
}

// TestDefaultProblemBaseIsThisPage: the default type URIs point at docs/problems.md on
// the main branch, one anchor per kind.
func TestDefaultProblemBaseIsThisPage(t *testing.T) {
	assert.Equal(t, "https://github.com/idemkit/idem/blob/main/docs/problems.md#", core.DefaultProblemBase)
}

// TestProblemLinksResolve: every link to a section of docs/problems.md in the README and
// the docs names a section that exists.
func TestProblemLinksResolve(t *testing.T) {
	root := moduleRoot(t)
	sections := problemSections(t)
	link := regexp.MustCompile(`problems\.md#([a-z0-9-]+)`)
	for _, doc := range []string{"README.md", "examples/README.md", "docs/phased-operations.md", "docs/problems.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			_, ok := sections[m[1]]
			assert.True(t, ok, "%s links problems.md#%s, which is no section of docs/problems.md", doc, m[1])
		}
	}
}
