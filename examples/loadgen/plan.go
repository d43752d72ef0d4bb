package main

import (
	"math"
	"math/rand/v2"
)

// plan is the order in which keys are sent: request i sends key keys[i]. Key n first
// appears before key n+1, and a duplicate only names a key that appeared earlier.
type plan struct {
	keys     []int32
	distinct int // distinct keys in the plan: 0 … distinct-1
}

// newPlan spreads requests over at most maxKeys keys so that a fraction dup of them
// reuse a key that appeared earlier: requests−round(requests×dup) new keys, capped by
// maxKeys (the remaining requests are duplicates too), at least one. New keys and
// duplicates are shuffled over the whole plan (the first request is always a new key),
// and a duplicate picks uniformly among the keys that appeared before it.
func newPlan(requests, maxKeys int, dup float64, seed uint64) plan {
	distinct := requests - int(math.Round(float64(requests)*dup))
	distinct = max(min(distinct, maxKeys), 1)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	fresh := make([]bool, requests)
	for i := range distinct {
		fresh[i] = true
	}
	rest := fresh[1:]
	r.Shuffle(len(rest), func(i, j int) { rest[i], rest[j] = rest[j], rest[i] })
	p := plan{keys: make([]int32, requests), distinct: distinct}
	next := int32(0)
	for i, f := range fresh {
		if f {
			p.keys[i] = next
			next++
		} else {
			p.keys[i] = int32(r.IntN(int(next)))
		}
	}
	return p
}

// dupRatio is the fraction of the plan's requests that reuse a key.
func (p plan) dupRatio() float64 {
	return float64(len(p.keys)-p.distinct) / float64(len(p.keys))
}
