package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// maxProblems is how many violations a verdict keeps to print.
const maxProblems = 10

// verdict is the exactly-once check of one run: the rows the server lists for the
// account, matched to the run's keys.
type verdict struct {
	route   string
	acked   int // distinct keys of the run acknowledged by a 201
	created int // rows (orders or payments) for keys of the run
	charges int // payments: provider charges for keys of the run
	others  int // rows of the account that belong to no key of this run
	// problems are the first maxProblems violations; count is all of them.
	problems []string
	count    int
}

// exactlyOnce reports whether every acknowledged key has exactly one row, with the id
// its 201 named, no other key of the run has one, and at least one key was
// acknowledged (a run where everything failed proves nothing).
func (v verdict) exactlyOnce() bool {
	return v.acked > 0 && v.created == v.acked && v.count == 0
}

func (v *verdict) problem(format string, args ...any) {
	if v.count < maxProblems {
		v.problems = append(v.problems, fmt.Sprintf(format, args...))
	}
	v.count++
}

// verify lists what the server holds for the account and matches it to what the
// responses said about each key.
func (l *loader) verify(ctx context.Context) (verdict, error) {
	v := verdict{route: l.cfg.route}
	rows := make([][]string, len(l.keys)) // ids of each key's rows
	charges := make([]int, len(l.keys))   // payments: provider charges of each key
	chargeKey := map[string]int{}         // payments: charge id → key number
	if l.cfg.route == routePayments {
		var list struct {
			Charges []struct {
				ID             string `json:"id"`
				IdempotencyKey string `json:"idempotency_key"`
			} `json:"charges"`
		}
		if err := l.get(ctx, "/v1/provider/charges", &list); err != nil {
			return v, err
		}
		for _, c := range list.Charges {
			base, ok := strings.CutSuffix(c.IdempotencyKey, ":charge")
			if n, mine := l.keyNumber(base); ok && mine {
				chargeKey[c.ID] = n
				charges[n]++
				v.charges++
			}
		}
		var payments struct {
			Payments []struct {
				ID       string `json:"id"`
				ChargeID string `json:"charge_id"`
			} `json:"payments"`
		}
		if err := l.get(ctx, "/v1/payments", &payments); err != nil {
			return v, err
		}
		for _, p := range payments.Payments {
			if n, mine := chargeKey[p.ChargeID]; mine {
				rows[n] = append(rows[n], p.ID)
				v.created++
			} else {
				v.others++
			}
		}
	} else {
		var orders struct {
			Orders []struct {
				ID   string `json:"id"`
				Item string `json:"item"`
			} `json:"orders"`
		}
		if err := l.get(ctx, "/v1/orders", &orders); err != nil {
			return v, err
		}
		for _, o := range orders.Orders {
			key, ok := strings.CutPrefix(o.Item, "item ")
			if n, mine := l.keyNumber(key); ok && mine {
				rows[n] = append(rows[n], o.ID)
				v.created++
			} else {
				v.others++
			}
		}
	}

	for n := range l.keys {
		k := &l.keys[n]
		if k.acked {
			v.acked++
		}
		switch {
		case len(rows[n]) > 1:
			v.problem("key %s has %d rows: %v", l.key(n), len(rows[n]), rows[n])
		case k.acked && len(rows[n]) == 0:
			v.problem("key %s got a 201 (Location %s) but has no row", l.key(n), k.location)
		case k.acked && k.location != l.path+"/"+rows[n][0]:
			v.problem("key %s got a 201 with Location %q, but its row is %s/%s", l.key(n), k.location, l.path, rows[n][0])
		case !k.acked && len(rows[n]) == 1:
			v.problem("key %s was never acknowledged, yet has row %s", l.key(n), rows[n][0])
		}
		if k.originals > 1 {
			v.problem("key %s got %d original (not replayed) 201s: the operation ran more than once", l.key(n), k.originals)
		}
		if k.mismatches > 0 {
			v.problem("key %s got %d 201s naming another Location than its first, %s", l.key(n), k.mismatches, k.location)
		}
		if l.cfg.route == routePayments {
			switch {
			case charges[n] > 1:
				v.problem("key %s has %d provider charges", l.key(n), charges[n])
			case k.acked && charges[n] == 0:
				v.problem("key %s got a 201 but the provider has no charge for it", l.key(n))
			}
		}
	}
	return v, nil
}

// keyNumber returns n for the key l.key(n) of this run.
func (l *loader) keyNumber(key string) (n int, ok bool) {
	s, ok := strings.CutPrefix(key, l.run+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= len(l.keys) || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}

// get decodes the JSON answer of GET path as the run's account.
func (l *loader) get(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.cfg.url+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Account-ID", l.cfg.account)
	resp, err := l.client.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d: %.300s", path, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}
