// Package consumertest proves Engine.Do on a real broker and real stores: NATS JetStream
// (127.0.0.1:4222, or TEST_NATS_URL) delivering at least once to consumers that apply each
// message through pgxstore or gormstore (PostgreSQL, SQLite), including a consumer process
// that crashes after its business write committed and before it acknowledged. Nothing is
// mocked: when NATS or PostgreSQL is unreachable the tests fail and say how to start it.
// Test support only; the package has no exported API.
package consumertest
