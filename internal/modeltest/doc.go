// Package modeltest holds a model-based (stateful property) test of the
// Redis lock family: lock.New (Client, reentrant), lock.NewSimple,
// lock.NewRW, redlock.New over three masters and the Redis semaphore.
// Seeded random sequences of operations run against real Redis servers —
// obtain (TryObtain, random TTLs from 150 ms to 8 s), nested obtain by
// the holding owner, two goroutines of one owner obtaining at once,
// release (of live, lost and released leases), waits, the lock's key
// deleted (on one master for redlock), a reply lost and the command resent
// (a go-redis hook, as MaxRetries does after a network error), the fencing
// counter set ahead of the server's clock, a waiter's ctx cancelled as the
// lock is released to it — and after every step the answers and Redis's
// state are checked against a small reference model: who may hold, token
// order, what each lease reports (Err, Until, Lost), what each release
// answers, and that no lease's Until outlives the key that holds it. A
// failing sequence is shrunk (delta debugging over the recorded steps,
// replayed on a fresh key) and printed one step a line with its seed.
//
// The package has no code of its own: see its tests.
//
//	go test -race ./internal/modeltest                          # short: about 3.5 s per system
//	COORDKIT_MODEL_LONG=1 go test -timeout 30m ./internal/modeltest  # long: a minute per system, 120 steps
//	go test ./internal/modeltest -run 'TestModel/Client$' -model.seed=N  # one seed again
//
// Flags: -model.seed, -model.steps, -model.dur (per system), -model.long,
// -model.shrink (shrinking budget per system), -model.v (log every step),
// -model.reentry=false and -model.skip=kind,... (leave out steps that
// trigger a known bug, to look past it).
package modeltest
