package idemriver_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idemkit/idem/core"
	"github.com/idemkit/idem/core/memstore"
	"github.com/idemkit/idem/idemriver"
)

// keyOf returns idemriver.KeyFor of the operation with scope and key, as a handler gets it.
func keyOf(t *testing.T, scope, key, suffix string) (idemriver.Key, string) {
	t.Helper()
	eng, err := core.New(core.Config{Store: memstore.New()})
	require.NoError(t, err)
	var k idemriver.Key
	var scoped string
	_, _, err = eng.Do(context.Background(), scope, key, nil, func(ctx context.Context) ([]byte, error) {
		op := core.MustOperation(ctx)
		k, scoped = idemriver.KeyFor(op, suffix), op.ScopedDerivedKey(suffix)
		return nil, nil
	})
	require.NoError(t, err)
	return k, scoped
}

// TestKeyForIsTheOperationsDerivedKey: the Key carries the scope and op.DerivedKey, and its
// IdempotencyKey is op.ScopedDerivedKey.
func TestKeyForIsTheOperationsDerivedKey(t *testing.T) {
	k, scoped := keyOf(t, "acct_1", "k-42", "receipt")
	assert.Equal(t, idemriver.Key{Scope: "acct_1", DerivedKey: "k-42:receipt"}, k)
	assert.Equal(t, scoped, k.IdempotencyKey())
}

var messageID = regexp.MustCompile(`^<[0-9a-f]{32}@mail\.example\.com>$`)

// TestMessageIDIsStableAndDistinct: the same Key gives the same Message-ID; another scope,
// key or effect another one; any key gives a valid one.
func TestMessageIDIsStableAndDistinct(t *testing.T) {
	k := idemriver.Key{Scope: "acct_1", DerivedKey: "k-42:receipt"}
	id := k.MessageID("mail.example.com")
	assert.Regexp(t, messageID, id)
	assert.Equal(t, id, idemriver.Key{Scope: "acct_1", DerivedKey: "k-42:receipt"}.MessageID("mail.example.com"))
	seen := map[string]bool{id: true}
	for _, other := range []idemriver.Key{
		{Scope: "acct_2", DerivedKey: "k-42:receipt"},
		{Scope: "acct_1", DerivedKey: "k-43:receipt"},
		{Scope: "acct_1", DerivedKey: "k-42:webhook"},
		{Scope: "acct_1k", DerivedKey: "-42:receipt"},
		{Scope: `a "quoted" <scope>`, DerivedKey: `"x@y", z:receipt`},
	} {
		id := other.MessageID("mail.example.com")
		assert.Regexp(t, messageID, id, "%+v", other)
		assert.False(t, seen[id], "%+v repeats a Message-ID", other)
		seen[id] = true
	}
}

// TestInsertOptsUniqueInEveryState: River keeps one job per Key in any state.
func TestInsertOptsUniqueInEveryState(t *testing.T) {
	opts := idemriver.Key{}.InsertOpts()
	assert.True(t, opts.UniqueOpts.ByArgs)
	assert.ElementsMatch(t, rivertype.JobStates(), opts.UniqueOpts.ByState)
}
