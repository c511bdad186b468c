package txn_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/sqllock"
	"github.com/coordkit/coordkit/txn"
)

// TestBadInput: every bad argument is an error wrapping ErrInvalid, never
// a panic, and logs nothing.
func TestBadInput(t *testing.T) {
	db := banks[0].db
	for name, opts := range map[string][]txn.Option{
		"prefix":  {txn.WithTablePrefix("Bad-Prefix")},
		"ttl":     {txn.WithLeaseTTL(time.Millisecond)},
		"retry":   {txn.WithRetry(nil)},
		"clock":   {txn.WithClock(nil)},
		"nothing": nil,
	} {
		_, err := txn.New(db, sqllock.MySQL, ids, opts...)
		if name == "nothing" {
			if err != nil {
				t.Errorf("New with no option: %v", err)
			}
			continue
		}
		if !errors.Is(err, txn.ErrInvalid) {
			t.Errorf("New with a bad %s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := txn.New(nil, sqllock.MySQL, ids); !errors.Is(err, txn.ErrInvalid) {
		t.Errorf("nil db: %v", err)
	}
	if _, err := txn.New(db, 0, ids); !errors.Is(err, txn.ErrInvalid) {
		t.Errorf("no dialect: %v", err)
	}
	if _, err := txn.New(db, sqllock.MySQL, nil); !errors.Is(err, txn.ErrInvalid) {
		t.Errorf("nil IDs: %v", err)
	}

	m := newManager(t, banks[0], "")
	ok := func(context.Context, txn.Branch) error { return nil }
	step := txn.SagaStep{Action: ok, Compensate: ok}
	work := func(context.Context, txn.Execer, txn.Branch) error { return nil }
	for name, err := range map[string]error{
		"no steps":      m.RegisterSaga("empty"),
		"no branches":   m.RegisterTCC("empty"),
		"nil action":    m.RegisterSaga("nil", txn.SagaStep{Compensate: ok}),
		"nil confirm":   m.RegisterTCC("nil", txn.TCCBranch{Try: ok, Cancel: ok}),
		"empty name":    m.RegisterSaga("", step),
		"long name":     m.RegisterSaga(string(make([]byte, txn.MaxNameLen+1)), step),
		"twice":         errors.Join(m.RegisterSaga("twice", step), m.RegisterTCC("twice", txn.TCCBranch{Try: ok, Confirm: ok, Cancel: ok})),
		"xa nil db":     m.RegisterXA("xa", txn.XABranch{Dialect: sqllock.MySQL, Work: work}),
		"xa nil work":   m.RegisterXA("xa", txn.XABranch{DB: db, Dialect: sqllock.MySQL}),
		"xa dialect":    m.RegisterXA("xa", txn.XABranch{DB: db, Work: work}),
		"xa empty":      m.RegisterXA("xa"),
		"unknown name":  run(m, "nope", nil, time.Second),
		"zero timeout":  run(m, "twice", nil, 0),
		"neg timeout":   run(m, "twice", nil, -time.Second),
		"large payload": run(m, "twice", make([]byte, txn.MaxPayload+1), time.Second),
	} {
		if !errors.Is(err, txn.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	zero, err := txn.New(banks[0].db, sqllock.MySQL, txn.IDFunc(func() int64 { return 0 }))
	if err != nil {
		t.Fatal(err)
	}
	if err := zero.RegisterSaga("s", step); err != nil {
		t.Fatal(err)
	}
	if err := run(zero, "s", nil, time.Second); !errors.Is(err, txn.ErrInvalid) {
		t.Errorf("gid 0: %v, want ErrInvalid", err)
	}
	if st, err := m.Stuck(ctxTimeout(t, 5*time.Second), 0); err != nil || len(st) != 0 {
		t.Errorf("Stuck: %v, %v", st, err)
	}
}

func run(m *txn.Manager, name string, payload []byte, timeout time.Duration) error {
	_, err := m.Run(context.Background(), name, payload, timeout)
	return err
}

// TestMissingTables: a Manager whose tables were never created fails Run
// with ErrSchema, before any branch func runs.
func TestMissingTables(t *testing.T) {
	for _, b := range banks {
		m, err := txn.New(b.db, b.d, ids, txn.WithTablePrefix("never_made_"))
		if err != nil {
			t.Fatal(err)
		}
		called := false
		f := func(context.Context, txn.Branch) error { called = true; return nil }
		if err := m.RegisterSaga("s", txn.SagaStep{Action: f, Compensate: f}); err != nil {
			t.Fatal(err)
		}
		if err := run(m, "s", nil, time.Second); !errors.Is(err, txn.ErrSchema) || called {
			t.Errorf("%s: Run: %v (branch called: %v), want ErrSchema and no call", b.name, err, called)
		}
	}
}
