package history

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// violations checks a history of one key for the model's rules directly, in a single
// pass: a wrong answer; a second run; two different responses; a replay returned before
// the run began; a 409 or a run that began after a response was returned. Each is a
// violation on its own, so a history with one is not linearizable; porcupine, which then
// has to search every order of the concurrent requests to say so, is spared the search
// and the message names the requests.
func violations(ops []porcupine.Operation) []string {
	var bad []string
	describe := func(op porcupine.Operation) string {
		o := op.Output.(Output)
		ret := "never"
		if op.Return != math.MaxInt64 {
			ret = time.Duration(op.Return).String()
		}
		return fmt.Sprintf("[%v–%s %s %.60q]", time.Duration(op.Call), ret, o.Kind, o.Response)
	}
	var run *porcupine.Operation
	firstReturn := int64(math.MaxInt64) // the earliest return of a response
	var response string
	for i := range ops {
		op := &ops[i]
		o := op.Output.(Output)
		switch o.Kind {
		case Wrong:
			bad = append(bad, "a wrong answer "+describe(*op))
		case Fresh:
			if run != nil {
				bad = append(bad, "a second run "+describe(*op)+" after "+describe(*run))
			}
			run = op
		}
		if o.Kind == Fresh || o.Kind == Replayed {
			if response == "" {
				response = o.Response
			} else if o.Response != response {
				bad = append(bad, fmt.Sprintf("two responses: %.60q and %s", response, describe(*op)))
			}
			firstReturn = min(firstReturn, op.Return)
		}
	}
	for _, op := range ops {
		o := op.Output.(Output)
		switch {
		case o.Kind == Replayed && run != nil && op.Return < run.Call:
			bad = append(bad, "a replay "+describe(op)+" before the run "+describe(*run))
		case (o.Kind == InProgress || o.Kind == Fresh) && op.Call > firstReturn:
			bad = append(bad, fmt.Sprintf("%s began after a response was returned at %v", describe(op), time.Duration(firstReturn)))
		}
	}
	return bad
}
