// Package modeltest holds a model-based (stateful property) test of the
// Redis lock family: seeded random sequences of operations (obtain,
// nested obtain, release, waits, a deleted key, a lost and resent reply, a
// fencing counter ahead of the clock, a ctx cancelled at a grant) run
// against real Redis servers, each step checked against a small reference
// model of what is allowed; a failing sequence is shrunk to a short one and
// printed with its seed. The package has no code of its own: see its tests.
//
//	go test -race ./internal/modeltest                    # short (make test)
//	COORDKIT_MODEL_LONG=1 go test ./internal/modeltest    # several minutes
//	go test ./internal/modeltest -run 'TestModel/Client' -model.seed=N  # replay one seed
package modeltest
