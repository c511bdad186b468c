package idgen_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

// The vectors of the MongoDB ObjectId specification: the timestamp is an
// unsigned 32-bit number of seconds.
func TestObjectIDSpecVectors(t *testing.T) {
	for _, tc := range []struct{ hex, time string }{
		{"000000000000000000000000", "1970-01-01T00:00:00Z"},
		{"7FFFFFFF0000000000000000", "2038-01-19T03:14:07Z"},
		{"800000000000000000000000", "2038-01-19T03:14:08Z"},
		{"FFFFFFFF0000000000000000", "2106-02-07T06:28:15Z"},
	} {
		id, err := idgen.ParseObjectID(tc.hex)
		if err != nil {
			t.Fatalf("ParseObjectID(%s): %v", tc.hex, err)
		}
		if got := id.Time().Format(time.RFC3339); got != tc.time {
			t.Errorf("%s: Time = %s, want %s", tc.hex, got, tc.time)
		}
		if id.String() != toLower(tc.hex) {
			t.Errorf("String = %s", id.String())
		}
		if idgen.ObjectIDFromTime(id.Time()) != id {
			t.Errorf("ObjectIDFromTime(%s) = %s", id.Time(), idgen.ObjectIDFromTime(id.Time()))
		}
	}
}

func toLower(s string) string { return string(bytes.ToLower([]byte(s))) }

// seqReader yields fixed bytes: the 5-byte process value, then the counter start.
type seqReader []byte

func (r *seqReader) Read(p []byte) (int, error) {
	if len(*r) == 0 {
		return 0, io.EOF
	}
	n := copy(p, *r)
	*r = (*r)[n:]
	return n, nil
}

func TestObjectIDGenerator(t *testing.T) {
	clock := newClock(time.Unix(0x5F5E1000, 0))
	rnd := seqReader{0xA1, 0xA2, 0xA3, 0xA4, 0xA5, 0xFF, 0xFF, 0xFE}
	g, err := idgen.NewObjectIDGenerator(idgen.WithClock(clock.Now), idgen.WithRand(&rnd))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"5f5e1000a1a2a3a4a5fffffe",
		"5f5e1000a1a2a3a4a5ffffff",
		"5f5e1000a1a2a3a4a5000000", // the counter wraps at 2^24
		"5f5e1000a1a2a3a4a5000001",
	}
	for i, w := range want {
		id := g.New()
		if id.String() != w {
			t.Fatalf("ID %d = %s, want %s", i, id, w)
		}
		if id.Process() != [5]byte{0xA1, 0xA2, 0xA3, 0xA4, 0xA5} || !id.Time().Equal(time.Unix(0x5F5E1000, 0)) {
			t.Fatalf("ID %d: process %x, time %v", i, id.Process(), id.Time())
		}
	}
	if c := g.New().Counter(); c != 2 {
		t.Fatalf("Counter = %d, want 2", c)
	}
	if _, err := idgen.NewObjectIDGenerator(idgen.WithRand(&seqReader{1, 2})); err == nil {
		t.Fatal("short random source: no error")
	}
}

func TestObjectIDUnique(t *testing.T) {
	seen := map[idgen.ObjectID]bool{}
	for range 100000 {
		id := idgen.NewObjectID()
		if seen[id] {
			t.Fatalf("duplicate %s", id)
		}
		seen[id] = true
		if time.Since(id.Time()) > time.Minute || id.IsZero() {
			t.Fatalf("ID %s: time %v", id, id.Time())
		}
	}
}

func TestObjectIDEncodings(t *testing.T) {
	id, _ := idgen.ParseObjectID("507f1f77bcf86cd799439011")
	b, err := json.Marshal(struct{ ID idgen.ObjectID }{id})
	if err != nil || string(b) != `{"ID":"507f1f77bcf86cd799439011"}` {
		t.Fatalf("json = %s, %v", b, err)
	}
	for _, in := range []string{`"507f1f77bcf86cd799439011"`, `"507F1F77BCF86CD799439011"`, `{"$oid":"507f1f77bcf86cd799439011"}`} {
		var got idgen.ObjectID
		if err := json.Unmarshal([]byte(in), &got); err != nil || got != id {
			t.Errorf("Unmarshal(%s) = %s, %v", in, got, err)
		}
	}
	for _, in := range []string{`12`, `"507f"`, `{"oid":"507f1f77bcf86cd799439011"}`, `"507f1f77bcf86cd79943901g"`, `[]`} {
		var got idgen.ObjectID
		if err := json.Unmarshal([]byte(in), &got); !errors.Is(err, idgen.ErrInvalidID) {
			t.Errorf("Unmarshal(%s) = %v, want ErrInvalidID", in, err)
		}
	}
	got := id
	if err := json.Unmarshal([]byte(`null`), &got); err != nil || got != id {
		t.Errorf("null: %s, %v", got, err)
	}
	txt, _ := id.MarshalText()
	var back idgen.ObjectID
	if err := back.UnmarshalText(txt); err != nil || back != id {
		t.Errorf("text round trip: %s, %v", back, err)
	}
	v, _ := id.Value()
	for _, src := range []any{v, []byte(v.(string)), id[:]} {
		var s idgen.ObjectID
		if err := s.Scan(src); err != nil || s != id {
			t.Errorf("Scan(%T) = %s, %v", src, s, err)
		}
	}
	s := id
	if err := s.Scan(nil); err != nil || !s.IsZero() {
		t.Errorf("Scan(nil) = %s, %v", s, err)
	}
	if err := s.Scan(42); !errors.Is(err, idgen.ErrInvalidID) {
		t.Errorf("Scan(int) = %v", err)
	}
}
