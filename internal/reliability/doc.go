// Package reliability holds idem's fault-injection, timeout, outage, multi-instance and
// security tests, run over HTTP through core's net/http middleware on pgxstore and a
// real PostgreSQL, and the loopback TCP Proxy they use to break the network between the
// store and the database on command (cut every connection, refuse new ones, stall and
// resume, or cut just as the server answers COMMIT).
//
// The package's only code is the Proxy; everything else is tests. Run them with:
//
//	go test -race ./internal/reliability/
//	IDEM_FAULT_TRIALS=1000 go test -race -run TestFaultTrials -v ./internal/reliability/
//
//	go test -run '^$' -fuzz '^FuzzFingerprintJSON$' -fuzztime 3m ./internal/reliability/
//
// IDEM_FAULT_TRIALS sets the number of crash trials (default 100); IDEM_FLOOD_KEYS the
// size of the one-scope key flood (default 10000).
package reliability
