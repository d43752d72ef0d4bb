package demo

import (
	"net/http"
	"strconv"
)

// Order is an order as the API returns it.
type Order struct {
	ID        string `json:"id"`
	Item      string `json:"item"`
	Quantity  int64  `json:"quantity"`
	CreatedAt string `json:"created_at"`
}

// CreateOrder handles POST /v1/orders behind the atomic middleware: the order row is
// written in the key's own transaction, so it commits together with the recorded 201,
// or not at all. An invalid body is a 400 problem, recorded and replayed like a success.
func (a *App) CreateOrder(r *http.Request, account string) Reply {
	ctx := r.Context()
	body, bad := a.readBody(r)
	if bad != nil {
		return *bad
	}
	in, bad := parseOrder(body)
	if bad != nil {
		return *bad
	}
	tx, err := a.be.tx(ctx)
	if err != nil {
		return a.fail(ctx, "orders: no idempotency transaction", err)
	}
	o := Order{Item: in.Item, Quantity: in.Quantity}
	created := now()
	id, err := a.be.insertID(ctx, tx, `INSERT INTO orders (account, item, quantity, created_at) VALUES (?, ?, ?, ?)`,
		account, o.Item, o.Quantity, a.be.createdAt(created))
	if err != nil {
		return a.fail(ctx, "orders: insert", err)
	}
	o.ID, o.CreatedAt = strconv.FormatInt(id, 10), formatTime(created)
	return jsonReply(http.StatusCreated, o, "Location", "/v1/orders/"+o.ID)
}

const orderColumns = `id, item, quantity, created_at`

func scanOrder(r row) (Order, error) {
	var o Order
	var id int64
	err := r.Scan(&id, &o.Item, &o.Quantity, stamp{&o.CreatedAt})
	o.ID = strconv.FormatInt(id, 10)
	return o, err
}

// ListOrders handles GET /v1/orders: the account's orders, oldest first.
func (a *App) ListOrders(r *http.Request, account string) Reply {
	ctx := r.Context()
	rs, err := a.be.db.Query(ctx, `SELECT `+orderColumns+` FROM orders WHERE account = ? ORDER BY id`, account)
	if err != nil {
		return a.fail(ctx, "orders: list", err)
	}
	defer rs.Close()
	list := struct {
		Orders []Order `json:"orders"`
	}{Orders: []Order{}}
	for rs.Next() {
		o, err := scanOrder(rs)
		if err != nil {
			return a.fail(ctx, "orders: list", err)
		}
		list.Orders = append(list.Orders, o)
	}
	if err := rs.Err(); err != nil {
		return a.fail(ctx, "orders: list", err)
	}
	return jsonReply(http.StatusOK, list)
}

// GetOrder handles GET /v1/orders/{id}: 404 for an unknown id or another account's.
func (a *App) GetOrder(r *http.Request, account, id string) Reply {
	ctx := r.Context()
	n, ok := parseID(id)
	if !ok {
		return notFoundReply("order", id)
	}
	o, err := scanOrder(a.be.db.QueryRow(ctx, `SELECT `+orderColumns+` FROM orders WHERE account = ? AND id = ?`, account, n))
	switch {
	case notFound(err):
		return notFoundReply("order", id)
	case err != nil:
		return a.fail(ctx, "orders: get", err)
	}
	return jsonReply(http.StatusOK, o)
}

// parseID reads an id as the API prints it (a decimal number, no sign, no leading zero).
func parseID(id string) (int64, bool) {
	n, err := strconv.ParseInt(id, 10, 64)
	return n, err == nil && n > 0 && strconv.FormatInt(n, 10) == id
}
