package idgen_test

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/coordkit/coordkit/idgen"
)

func TestBase32(t *testing.T) {
	for _, tc := range []struct {
		id int64
		s  string
	}{
		{0, "0000000000000"},
		{1, "0000000000001"},
		{31, "000000000000Z"},
		{32, "0000000000010"},
		{math.MaxInt64, "7ZZZZZZZZZZZZ"},
		{-1, "FZZZZZZZZZZZZ"},
	} {
		if got := idgen.EncodeBase32(tc.id); got != tc.s {
			t.Errorf("EncodeBase32(%d) = %s, want %s", tc.id, got, tc.s)
		}
		if got, err := idgen.DecodeBase32(tc.s); err != nil || got != tc.id {
			t.Errorf("DecodeBase32(%s) = %d, %v", tc.s, got, err)
		}
	}
	for in, want := range map[string]int64{"z": 31, "O": 0, "i": 1, "L": 1, "10": 32} {
		if got, err := idgen.DecodeBase32(in); err != nil || got != want {
			t.Errorf("DecodeBase32(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "U", "0000000000000U", "G000000000000", "ZZZZZZZZZZZZZ", "-1"} {
		if _, err := idgen.DecodeBase32(bad); !errors.Is(err, idgen.ErrInvalidID) {
			t.Errorf("DecodeBase32(%q) = %v, want ErrInvalidID", bad, err)
		}
	}
}

func TestBase58(t *testing.T) {
	for _, tc := range []struct {
		id int64
		s  string
	}{
		{0, "11111111111"},
		{57, "1111111111z"},
		{58, "11111111121"},
		{math.MaxInt64, "NQm6nKp8qFC"},
		{-1, "jpXCZedGfVQ"},
	} {
		if got := idgen.EncodeBase58(tc.id); got != tc.s {
			t.Errorf("EncodeBase58(%d) = %s, want %s", tc.id, got, tc.s)
		}
		if got, err := idgen.DecodeBase58(tc.s); err != nil || got != tc.id {
			t.Errorf("DecodeBase58(%s) = %d, %v", tc.s, got, err)
		}
	}
	for _, bad := range []string{"", "0", "O", "l", "I", "111111111111", "jpXCZedGfVR", "zzzzzzzzzzz"} {
		if _, err := idgen.DecodeBase58(bad); !errors.Is(err, idgen.ErrInvalidID) {
			t.Errorf("DecodeBase58(%q) = %v, want ErrInvalidID", bad, err)
		}
	}
}

// TestEncodingsSort checks that the text of non-negative IDs sorts like the IDs.
func TestEncodingsSort(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	ids := make([]int64, 5000)
	for i := range ids {
		ids[i] = r.Int64() >> r.UintN(63)
	}
	slices.Sort(ids)
	for name, enc := range map[string]func(int64) string{"base32": idgen.EncodeBase32, "base58": idgen.EncodeBase58} {
		strs := make([]string, len(ids))
		for i, id := range ids {
			strs[i] = enc(id)
		}
		if !sort.StringsAreSorted(strs) {
			t.Errorf("%s: strings do not sort like the IDs", name)
		}
	}
}

func TestID(t *testing.T) {
	const big = idgen.ID(1<<53 + 1)
	b, err := json.Marshal(map[string]idgen.ID{"a": big, "b": 7})
	if err != nil || string(b) != `{"a":"9007199254740993","b":"7"}` {
		t.Fatalf("json = %s, %v", b, err)
	}
	for in, want := range map[string]idgen.ID{
		`"9007199254740993"`:    big,
		`9007199254740993`:      big,
		`"\u0039"`:              9,
		` -12 `:                 -12,
		`"9223372036854775807"`: math.MaxInt64,
	} {
		var got idgen.ID
		if err := json.Unmarshal([]byte(in), &got); err != nil || got != want {
			t.Errorf("Unmarshal(%s) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{`1.5`, `1e3`, `"x"`, `true`, `"9223372036854775808"`, `[]`, `""`} {
		var got idgen.ID
		if err := json.Unmarshal([]byte(in), &got); err == nil {
			t.Errorf("Unmarshal(%s) = %d, want an error", in, got)
		}
	}
	got := big
	if err := json.Unmarshal([]byte(`null`), &got); err != nil || got != big {
		t.Errorf("null: %d, %v", got, err)
	}
	if big.String() != "9007199254740993" || big.Int64() != 1<<53+1 {
		t.Errorf("String = %s", big)
	}
	if b32, _ := idgen.DecodeBase32(big.Base32()); b32 != int64(big) {
		t.Errorf("Base32 round trip")
	}
	if b58, _ := idgen.DecodeBase58(big.Base58()); b58 != int64(big) {
		t.Errorf("Base58 round trip")
	}
	v, _ := big.Value()
	if v != int64(big) {
		t.Errorf("Value = %v", v)
	}
	for _, src := range []any{int64(big), "9007199254740993", []byte("9007199254740993")} {
		var s idgen.ID
		if err := s.Scan(src); err != nil || s != big {
			t.Errorf("Scan(%T) = %d, %v", src, s, err)
		}
	}
	s := big
	if err := s.Scan(nil); err != nil || s != 0 {
		t.Errorf("Scan(nil) = %d, %v", s, err)
	}
	if err := s.Scan(1.5); !errors.Is(err, idgen.ErrInvalidID) {
		t.Errorf("Scan(float) = %v", err)
	}
	if _, err := idgen.ParseID("12a"); !errors.Is(err, idgen.ErrInvalidID) {
		t.Errorf("ParseID(12a) = %v", err)
	}
}
