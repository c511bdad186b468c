package idgen_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

func ExampleNewSnowflake() {
	// A fixed clock, so the output is stable; production code omits WithClock.
	at := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	worker, _ := idgen.LayoutTwitter.Worker(3, 7) // datacenter 3, machine 7
	g, err := idgen.NewSnowflake(idgen.LayoutTwitter, worker, idgen.WithClock(func() time.Time { return at }))
	if err != nil {
		panic(err)
	}
	id, _ := g.Next()
	p := idgen.LayoutTwitter.Decompose(id)
	fmt.Println(id)
	fmt.Println(p.Time, p.Datacenter, p.Machine, p.Sequence)
	// Output:
	// 1929145904133468160
	// 2025-06-01 12:00:00 +0000 UTC 3 7 0
}

func ExampleLayout_Decompose_sonyflake() {
	// An ID made by sony/sonyflake: time (10 ms) | sequence | machine.
	p := idgen.LayoutSonyflake.Decompose(0x01A2B3C4D5_02_BEEF)
	fmt.Println(p.Time, p.Sequence, p.Worker)
	// Output:
	// 2016-11-22 00:56:16.21 +0000 UTC 2 48879
}

func ExampleSnowflake_Next_clockBackwards() {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	g, _ := idgen.NewSnowflake(idgen.Layout{}, 1, idgen.WithClock(func() time.Time { return now }))
	g.Next()
	now = now.Add(-time.Second) // an operator sets the clock back
	_, err := g.Next()
	var cbe *idgen.ClockBackwardsError
	fmt.Println(errors.Is(err, idgen.ErrClockBackwards), errors.As(err, &cbe) && cbe.Behind == time.Second)
	// Output:
	// true true
}

type fileStore struct{ mark time.Time }

func (s *fileStore) Load(context.Context) (time.Time, error) { return s.mark, nil }
func (s *fileStore) Store(_ context.Context, m time.Time) error {
	if m.After(s.mark) {
		s.mark = m
	}
	return nil
}

func ExampleOpenSnowflake() {
	ctx := context.Background()
	store := &fileStore{}
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	clock := idgen.WithClock(func() time.Time { return now })

	g, _ := idgen.OpenSnowflake(ctx, store, idgen.Layout{}, 1, clock)
	g.Next()
	g.Checkpoint(ctx, store) // periodically, and at shutdown

	now = now.Add(-time.Minute) // the host restarts with its clock a minute behind
	_, err := idgen.OpenSnowflake(ctx, store, idgen.Layout{}, 1, clock)
	fmt.Println(err)
	// Output:
	// idgen: clock moved backwards by 1m0s (tolerated: 5ms)
}

func ExampleID() {
	type order struct {
		ID idgen.ID `json:"id"`
	}
	b, _ := json.Marshal(order{ID: 1929145904133468160})
	fmt.Println(string(b))
	var o order
	json.Unmarshal([]byte(`{"id": 1929145904133468160}`), &o) // numbers are read too
	fmt.Println(o.ID, o.ID.Base32(), o.ID.Base58())
	// Output:
	// {"id":"1929145904133468160"}
	// 1929145904133468160 1NHDKZA7WCW00 5Uj2eeVUnX9
}

func ExampleParseObjectID() {
	id, err := idgen.ParseObjectID("507f1f77bcf86cd799439011")
	if err != nil {
		panic(err)
	}
	fmt.Println(id.Time(), id.Counter())
	// Output:
	// 2012-10-17 21:13:27 +0000 UTC 4427793
}

func ExampleSerialFormat_Parse() {
	p, err := idgen.SerialFormat{}.Parse("20240309140506789004200000000001")
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Time, p.Worker, p.Sequence)
	// Output:
	// 2024-03-09 14:05:06.789 +0000 UTC 42 1
}
