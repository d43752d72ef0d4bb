package pgxstore

import "github.com/jackc/pgx/v5"

// batch is a pgx.Batch of at most three queries (BEGIN among them) and nine arguments
// whose queries, list and arguments live in the batch itself: an atomic lock holds one,
// so its claim and its completion do not allocate them one by one. reset empties it for
// the next round trip.
type batch struct {
	pgx.Batch
	list  [3]*pgx.QueuedQuery
	qs    [2]pgx.QueuedQuery
	args  [9]any
	used  int  // arguments in use
	begun bool // the first query is pgx's BEGIN, not one of qs
}

// reset empties b (its previous batch has been closed) and, when begin is set, queues
// the BEGIN of a transaction at level iso first.
func (b *batch) reset(begin bool, iso pgx.TxIsoLevel) *pgx.Batch {
	// The queries are overwritten whole: a sent QueuedQuery remembers the statement
	// description of the connection it went to.
	b.Batch = pgx.Batch{QueuedQueries: b.list[:0]}
	b.used, b.begun = 0, begin
	if begin {
		b.BeginTx(pgx.TxOptions{IsoLevel: iso})
	}
	return &b.Batch
}

// queue adds sql with args to b.
func (b *batch) queue(sql string, args ...any) {
	n := len(b.QueuedQueries)
	if b.begun {
		n--
	}
	q := &b.qs[n]
	start := b.used
	if b.used += copy(b.args[start:], args); b.used-start != len(args) {
		panic("pgxstore: a batch holds at most nine arguments") // a programming error: grow args
	}
	*q = pgx.QueuedQuery{SQL: sql, Arguments: b.args[start:b.used:b.used]}
	b.QueuedQueries = append(b.QueuedQueries, q)
}
