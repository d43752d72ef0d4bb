package history

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// state is what the model knows of one key: nothing recorded (none), a response recorded
// that no client has seen yet (unknown: a request that failed closed may have recorded
// it), or the recorded response.
type state struct {
	recorded bool
	known    bool
	response string
}

var none = state{}

// step is the sequential specification of one key: the states a request can leave the key
// in, given the state it found and the answer it got; none means the answer was not
// possible.
func step(s state, out Output) []state {
	switch out.Kind {
	case Fresh: // the one run: only while nothing is recorded
		if !s.recorded {
			return []state{{recorded: true, known: true, response: out.Response}}
		}
	case Replayed: // the recorded response, byte for byte
		switch {
		case s.recorded && !s.known:
			return []state{{recorded: true, known: true, response: out.Response}}
		case s.recorded && s.response == out.Response:
			return []state{s}
		}
	case InProgress: // only while nothing is recorded
		if !s.recorded {
			return []state{s}
		}
	case Failed: // failed closed: nothing changed, or it recorded a response unseen yet
		if !s.recorded {
			return []state{s, {recorded: true}}
		}
		return []state{s}
	}
	return nil
}

// Model is the porcupine model of idempotency keys, partitioned by key (see the package
// comment).
var Model = oneKey()

func oneKey() porcupine.Model {
	m := porcupine.NondeterministicModel{
		Partition: partition,
		Init:      func() []any { return []any{none} },
		Step: func(s, _, out any) []any {
			next := step(s.(state), out.(Output))
			states := make([]any, len(next))
			for i, n := range next {
				states[i] = n
			}
			return states
		},
		Equal: func(a, b any) bool { return a.(state) == b.(state) },
		DescribeOperation: func(in, out any) string {
			o := out.(Output)
			return fmt.Sprintf("%s → %s %.80s", in.(Input).Key, o.Kind, o.Response)
		},
		DescribeState: func(s any) string {
			st := s.(state)
			switch {
			case !st.recorded:
				return "nothing recorded"
			case !st.known:
				return "recorded, unseen"
			}
			return fmt.Sprintf("recorded %.80s", st.response)
		},
	}
	return m.ToModel()
}

// partition splits a history by key.
func partition(ops []porcupine.Operation) [][]porcupine.Operation {
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
