package idgen_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/coordkit/coordkit/idgen"
)

func TestUUIDv4(t *testing.T) {
	u, err := idgen.NewUUIDv4()
	if err != nil || u.Version() != 4 || u.IsZero() || !u.Time().IsZero() {
		t.Fatalf("NewUUIDv4 = %s (version %d), %v", u, u.Version(), err)
	}
	z := bytes.NewReader(make([]byte, 16))
	u, err = idgen.NewUUIDv4FromReader(z)
	if err != nil || u.String() != "00000000-0000-4000-8000-000000000000" {
		t.Fatalf("NewUUIDv4FromReader(zeros) = %s, %v", u, err)
	}
}

func TestUUIDv7Monotonic(t *testing.T) {
	prev, _ := idgen.NewUUIDv7()
	for range 20000 {
		u, err := idgen.NewUUIDv7()
		if err != nil || u.Version() != 7 {
			t.Fatalf("NewUUIDv7 = %s, %v", u, err)
		}
		if bytes.Compare(u[:], prev[:]) <= 0 || u.String() <= prev.String() {
			t.Fatalf("%s after %s: not increasing", u, prev)
		}
		prev = u
	}
	if d := time.Since(prev.Time()); d < 0 || d > time.Minute {
		t.Fatalf("Time = %v", prev.Time())
	}
	u, err := idgen.NewUUIDv7FromReader(bytes.NewReader(make([]byte, 16)))
	if err != nil || u.Version() != 7 {
		t.Fatalf("NewUUIDv7FromReader = %s, %v", u, err)
	}
}

func TestUUIDEncodings(t *testing.T) {
	const s = "0190a6d2-7d1c-7b3e-8c4d-1a2b3c4d5e6f"
	u, err := idgen.ParseUUID(s)
	if err != nil || u.String() != s || u.Version() != 7 {
		t.Fatalf("ParseUUID = %s, %v", u, err)
	}
	if want := time.UnixMilli(0x0190a6d27d1c).UTC(); !u.Time().Equal(want) {
		t.Errorf("Time = %v, want %v", u.Time(), want)
	}
	b, _ := json.Marshal(u)
	if string(b) != `"`+s+`"` {
		t.Errorf("json = %s", b)
	}
	var back idgen.UUID
	if err := json.Unmarshal(b, &back); err != nil || back != u {
		t.Errorf("json round trip = %s, %v", back, err)
	}
	for _, in := range []string{`12`, `"x"`, `{}`} {
		if err := json.Unmarshal([]byte(in), &back); !errors.Is(err, idgen.ErrInvalidID) {
			t.Errorf("Unmarshal(%s) = %v", in, err)
		}
	}
	v, _ := u.Value()
	for _, src := range []any{v, []byte(s), u[:]} {
		var got idgen.UUID
		if err := got.Scan(src); err != nil || got != u {
			t.Errorf("Scan(%T) = %s, %v", src, got, err)
		}
	}
	if err := back.Scan(nil); err != nil || !back.IsZero() {
		t.Errorf("Scan(nil) = %s, %v", back, err)
	}
	if err := back.Scan(1.5); !errors.Is(err, idgen.ErrInvalidID) {
		t.Errorf("Scan(float) = %v", err)
	}
	txt, _ := u.MarshalText()
	if string(txt) != s {
		t.Errorf("MarshalText = %s", txt)
	}
}
