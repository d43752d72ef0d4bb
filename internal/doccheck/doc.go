// Package doccheck holds the tests that keep the repository's documents true to the
// code: every core.ProblemKind has its section in docs/problems.md with its status and
// title, and every README snippet marked as taken from a Go file is that file's text.
// It has no code of its own.
package doccheck
