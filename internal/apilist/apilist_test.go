package main

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAPIListing fails when the module's public API and the listing checked in under
// api/ differ, printing the difference: every change to the API is a deliberate diff of
// api/, made by running the command the failure names.
func TestAPIListing(t *testing.T) {
	began := time.Now()
	root, err := moduleRoot()
	require.NoError(t, err)
	listings, err := List(root)
	require.NoError(t, err)
	diff, err := Diff(root, listings)
	require.NoError(t, err)
	if diff != "" {
		t.Fatalf("the public API differs from its listing in api/ (+ in the code only, - in api/ only):\n%s\n"+
			"If the change is deliberate, run\n\n\t%s\n\nand commit api/ with it.", diff, regenerate)
	}
	t.Logf("%d packages listed in %s", len(listings), time.Since(began).Round(time.Millisecond))
}

// TestPublicPackages: commands, internal and example packages are not public API.
func TestPublicPackages(t *testing.T) {
	for rel, want := range map[string]bool{
		"core": true, "core/storage": true, "pgxstore": true,
		"internal/testdb": false, "examples/internal/demo": false, "examples/loadgen": false,
		"core/internal/x": false,
	} {
		assert.Equal(t, want, isPublic(rel, "x"), rel)
	}
	assert.False(t, isPublic("cmd/idem", "main"), "a command")
}

// TestDescribe pins the listing's format on a package written for it: names without
// parameter names, promoted methods, embedded fields, interface methods, constant values.
func TestDescribe(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "p.go"), `package p

import (
	"context"
	"time"
)

const Wait = 2 * time.Second

const Name = "p"

var ErrX error

type Base struct{ Debug bool }

func (Base) Check() error { return nil }

type Config struct {
	Base
	Scope  func(ctx context.Context) string
	hidden int
}

type Store interface {
	Get(ctx context.Context, key string) (value []byte, err error)
	private()
}

type Kind string

func (k *Kind) Set(s string) { *k = Kind(s) }

func New(cfg Config, opts ...func(*Config)) (*Config, error) { return nil, nil }

func unexported() {}
`)
	pkg := typecheck(t, dir)
	lines, names := describe(pkg)
	assert.Equal(t, 8, names)
	assert.Equal(t, []string{
		`const Name untyped string = "p"`,
		`const Wait time.Duration = 2000000000`,
		`func New(Config, ...func(*Config)) (*Config, error)`,
		`method (*Kind) Set(string)`,
		`method (Base) Check() error`,
		`method (Config) Check() error`,
		`type Base struct`,
		`type Base struct, Debug bool`,
		`type Config struct`,
		`type Config struct, Scope func(context.Context) string`,
		`type Config struct, embedded Base`,
		`type Kind string`,
		`type Store interface`,
		`type Store interface, Get(context.Context, string) ([]byte, error)`,
		`type Store interface, unexported methods`,
		`var ErrX error`,
	}, lines)
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
}

// typecheck type-checks the one-file package in dir from source (it imports only the
// standard library).
func typecheck(t *testing.T, dir string) *types.Package {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(dir, "p.go"), nil, 0)
	require.NoError(t, err)
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	pkg, err := conf.Check("example.com/p", fset, []*ast.File{f}, nil)
	require.NoError(t, err)
	return pkg
}
