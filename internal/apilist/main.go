// Command apilist writes and checks the listing of the module's public API: one file per
// public package in api/ (api/core.txt, api/core.storage.txt, …), one line per exported
// constant, variable, function, type, struct field, interface method and method,
// sorted. A public package is one outside internal/ and examples/ that is not a command.
//
// Run from anywhere in the module:
//
//	go run ./internal/apilist      # compare the code with api/: print the difference, exit 1 if any
//	go run ./internal/apilist -w   # rewrite api/ from the code
//	go run ./internal/apilist -stat # count the exported names of each package
//
// Every change to the public API is thus a deliberate diff of api/, made with -w and
// reviewed with the code; TestAPIListing fails until it is made. Names and signatures
// come from the compiler's export data (go list -export), read with go/types: parameter
// names, comments and unexported names are not part of the listing, a constant's value
// is.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/importer"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// regenerate is the command that rewrites the listing, for messages.
const regenerate = "go run ./internal/apilist -w"

func main() {
	write := flag.Bool("w", false, "rewrite api/ from the code instead of comparing")
	stat := flag.Bool("stat", false, "print the number of exported names of each public package")
	flag.Parse()
	if err := run(*write, *stat, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "apilist:", err)
		os.Exit(1)
	}
}

func run(write, stat bool, out io.Writer) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	listings, err := List(root)
	if err != nil {
		return err
	}
	switch {
	case stat:
		for _, l := range listings {
			fmt.Fprintf(out, "%-40s %4d names %5d entries\n", l.Path, l.Names, len(l.Lines))
		}
		return nil
	case write:
		return Write(root, listings)
	}
	diff, err := Diff(root, listings)
	if err != nil {
		return err
	}
	if diff != "" {
		fmt.Fprint(out, diff)
		return fmt.Errorf("the public API differs from api/; if the change is deliberate, run %s and commit api/", regenerate)
	}
	return nil
}

// Listing is the public API of one package.
type Listing struct {
	Path  string   // import path
	File  string   // the listing's file, relative to the module root: api/core.storage.txt
	Names int      // exported top-level names
	Lines []string // sorted entries
}

// Text is the listing file's content.
func (l Listing) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# API of %s. Generated: %s rewrites it; do not edit.\n", l.Path, regenerate)
	for _, line := range l.Lines {
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// listedPackage is what go list says of a package.
type listedPackage struct {
	ImportPath string
	Name       string
	Dir        string
	Export     string
	Module     *struct{ Path, Dir string }
	Error      *struct{ Err string }
}

// List returns the listing of every public package of the module at root, in import
// path order.
func List(root string) ([]Listing, error) {
	all, err := goList(root, "./...")
	if err != nil {
		return nil, err
	}
	var module string
	var public []string
	for _, p := range all {
		if p.Module == nil {
			continue
		}
		module = p.Module.Path
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if isPublic(rel, p.Name) {
			public = append(public, p.ImportPath)
		}
	}
	if len(public) == 0 {
		return nil, errors.New("no public package found")
	}
	deps, err := goList(root, append([]string{"-export", "-deps"}, public...)...)
	if err != nil {
		return nil, err
	}
	exports := map[string]string{}
	for _, p := range deps {
		exports[p.ImportPath] = p.Export
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok || file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	sort.Strings(public)
	listings := make([]Listing, 0, len(public))
	for _, path := range public {
		pkg, err := imp.Import(path)
		if err != nil {
			return nil, fmt.Errorf("import %s: %w", path, err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
		if rel == "" {
			rel = pkg.Name()
		}
		lines, names := describe(pkg)
		listings = append(listings, Listing{Path: path, File: filepath.ToSlash(filepath.Join("api", strings.ReplaceAll(rel, "/", ".")+".txt")), Names: names, Lines: lines})
	}
	return listings, nil
}

// isPublic reports whether the package at rel (relative to the module root) is part of
// the public API.
func isPublic(rel, name string) bool {
	if name == "main" {
		return false
	}
	for _, part := range strings.Split(rel, "/") {
		if part == "internal" || part == "examples" || part == "testdata" {
			return false
		}
	}
	return true
}

func goList(root string, args ...string) ([]listedPackage, error) {
	cmd := exec.Command("go", append([]string{"list", "-e", "-json=ImportPath,Name,Dir,Export,Module,Error"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module")
	}
	return filepath.Dir(gomod), nil
}

// Write rewrites api/ to hold exactly listings.
func Write(root string, listings []Listing) error {
	dir := filepath.Join(root, "api")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, l := range listings {
		keep[filepath.Base(l.File)] = true
		if err := os.WriteFile(filepath.Join(root, l.File), []byte(l.Text()), 0o644); err != nil {
			return err
		}
	}
	stale, err := filepath.Glob(filepath.Join(dir, "*.txt"))
	if err != nil {
		return err
	}
	for _, f := range stale {
		if !keep[filepath.Base(f)] {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// Diff compares listings with the files in api/ and describes every difference: a
// line the code has and the file lacks is "+", the reverse "-". It is "" when they agree.
func Diff(root string, listings []Listing) (string, error) {
	var b strings.Builder
	want := map[string]bool{}
	for _, l := range listings {
		want[filepath.Base(l.File)] = true
		old, err := os.ReadFile(filepath.Join(root, l.File))
		switch {
		case errors.Is(err, os.ErrNotExist):
			fmt.Fprintf(&b, "%s: missing (new package %s)\n", l.File, l.Path)
			continue
		case err != nil:
			return "", err
		}
		if string(old) == l.Text() {
			continue
		}
		have := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSuffix(string(old), "\n"), "\n") {
			if !strings.HasPrefix(line, "#") {
				have[line] = true
			}
		}
		now := map[string]bool{}
		fmt.Fprintf(&b, "%s:\n", l.File)
		for _, line := range l.Lines {
			now[line] = true
			if !have[line] {
				fmt.Fprintf(&b, "+ %s\n", line)
			}
		}
		var gone []string
		for line := range have {
			if !now[line] {
				gone = append(gone, line)
			}
		}
		sort.Strings(gone)
		for _, line := range gone {
			fmt.Fprintf(&b, "- %s\n", line)
		}
	}
	files, err := filepath.Glob(filepath.Join(root, "api", "*.txt"))
	if err != nil {
		return "", err
	}
	for _, f := range files {
		if !want[filepath.Base(f)] {
			fmt.Fprintf(&b, "api/%s: no such public package any more\n", filepath.Base(f))
		}
	}
	return b.String(), nil
}
