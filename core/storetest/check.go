package storetest

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"
)

// The suite's assertions: each stops the subtest with a message naming what was checked.
// (testify cannot be linked here: its yaml dependency is missing from go.sum.)

func message(msgAndArgs []any) string {
	if len(msgAndArgs) == 0 {
		return "check"
	}
	if f, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(f, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}

func mustTrue(t testing.TB, ok bool, msgAndArgs ...any) {
	t.Helper()
	if !ok {
		t.Fatalf("%s", message(msgAndArgs))
	}
}

func mustFalse(t testing.TB, ok bool, msgAndArgs ...any) {
	t.Helper()
	if ok {
		t.Fatalf("%s", message(msgAndArgs))
	}
}

func mustEqual[T comparable](t testing.TB, want, got T, msgAndArgs ...any) {
	t.Helper()
	if want != got {
		t.Fatalf("%s: got %#v, want %#v", message(msgAndArgs), got, want)
	}
}

func mustNoError(t testing.TB, err error, msgAndArgs ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: unexpected error: %v", message(msgAndArgs), err)
	}
}

func mustErrorIs(t testing.TB, err, target error, msgAndArgs ...any) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one wrapping %q", message(msgAndArgs), err, target)
	}
}

func mustNil(t testing.TB, v any, msgAndArgs ...any) {
	t.Helper()
	if !isNil(v) {
		t.Fatalf("%s: got %#v, want nil", message(msgAndArgs), v)
	}
}

func mustNotNil(t testing.TB, v any, msgAndArgs ...any) {
	t.Helper()
	if isNil(v) {
		t.Fatalf("%s: got nil", message(msgAndArgs))
	}
}

// isNil reports whether v is nil, including a nil pointer inside an interface.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

// headerEqual compares headers value by value; an empty header equals a nil one.
func headerEqual(a, b map[string][]string) bool {
	return maps.EqualFunc(a, b, func(x, y []string) bool { return slices.Equal(x, y) })
}

func within(a, b time.Time, d time.Duration) bool {
	diff := a.Sub(b)
	return -d <= diff && diff <= d
}
