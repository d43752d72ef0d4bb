package history

import (
	"fmt"
	"hash/fnv"

	"github.com/anishathalye/porcupine"
)

// state is what the model knows of one key: the set of states it may be in, since a
// request that failed closed may or may not have recorded a response. none: nothing
// recorded; unseen: a response recorded that no client has seen yet; known: the recorded
// response a client saw (empty when it may be in neither).
type state struct {
	none, unseen bool
	known        string
	hasKnown     bool
}

// initial is a key never used: nothing recorded.
var initial = state{none: true}

// step is the sequential specification of one key: the set of states a request can leave
// the key in, given the set it found and the answer it got; ok is false when the answer
// was not possible from any of them.
func step(s state, out Output) (state, bool) {
	var next state
	switch out.Kind {
	case Fresh: // the one run: only while nothing is recorded
		if s.none {
			next = state{known: out.Response, hasKnown: true}
		}
	case Replayed: // the recorded response, byte for byte
		if s.unseen || s.hasKnown && s.known == out.Response {
			next = state{known: out.Response, hasKnown: true}
		}
	case InProgress: // only while nothing is recorded
		next = state{none: s.none}
	case Failed: // failed closed: nothing changed, or it recorded a response unseen yet
		next = s
		if s.none && !out.ranNot {
			next.unseen = true
		}
	}
	return next, next.none || next.unseen || next.hasKnown
}

// Model is the porcupine model of idempotency keys, partitioned by key (see the package
// comment).
var Model = porcupine.Model{
	Partition: partition,
	Init:      func() any { return initial },
	Step: func(s, _, out any) (bool, any) {
		next, ok := step(s.(state), out.(Output))
		return ok, next
	},
	Equal: func(a, b any) bool { return a.(state) == b.(state) },
	Hash: func(s any) uint64 {
		st := s.(state)
		h := fnv.New64a()
		fmt.Fprintf(h, "%t%t%t%s", st.none, st.unseen, st.hasKnown, st.known)
		return h.Sum64()
	},
	DescribeOperation: func(in, out any) string {
		o := out.(Output)
		return fmt.Sprintf("%s → %s %.80s", in.(Input).Key, o.Kind, o.Response)
	},
	DescribeState: func(s any) string {
		st := s.(state)
		d := ""
		if st.none {
			d += "nothing recorded; "
		}
		if st.unseen {
			d += "recorded, unseen; "
		}
		if st.hasKnown {
			d += fmt.Sprintf("recorded %.80s", st.known)
		}
		return d
	},
}

// partition splits a history by key. In a key's history that holds a run (a fresh
// answer), no request that failed closed can have recorded a response as well (that
// would be a second run): each is marked as one that recorded nothing (Output.ranNot),
// which spares the checker the orders in which such a request records what the replays
// then show (one per subset of the replays) and holds only where the model holds.
func partition(ops []porcupine.Operation) [][]porcupine.Operation {
	parts := byKey(ops)
	for _, part := range parts {
		ran := false
		for _, op := range part {
			ran = ran || op.Output.(Output).Kind == Fresh
		}
		if !ran {
			continue
		}
		for i, op := range part {
			if o := op.Output.(Output); o.Kind == Failed {
				o.ranNot = true
				part[i].Output = o
			}
		}
	}
	return parts
}

// byKey splits a history by key, into new slices.
func byKey(ops []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range ops {
		k := op.Input.(Input).Key
		i, ok := byKey[k]
		if !ok {
			i = len(parts)
			byKey[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}
