package idgen_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/coordkit/coordkit/idgen"
)

// The fuzz targets run their seeds (f.Add and testdata/fuzz) as ordinary
// tests; `go test -fuzz FuzzX ./idgen/` explores further.

func FuzzParseObjectID(f *testing.F) {
	f.Add("507f1f77bcf86cd799439011")
	f.Add("FFFFFFFF0000000000000000")
	f.Add("507f1f77bcf86cd79943901")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := idgen.ParseObjectID(s)
		if err != nil {
			return
		}
		if id.String() != strings.ToLower(s) {
			t.Fatalf("ParseObjectID(%q).String() = %s", s, id)
		}
		var back idgen.ObjectID
		b, _ := json.Marshal(id)
		if err := json.Unmarshal(b, &back); err != nil || back != id {
			t.Fatalf("JSON round trip of %s: %s, %v", id, back, err)
		}
	})
}

func FuzzObjectIDUnmarshalJSON(f *testing.F) {
	f.Add([]byte(`{"$oid":"507f1f77bcf86cd799439011"}`))
	f.Add([]byte(`"507f1f77bcf86cd799439011"`))
	f.Add([]byte(`{"$oid":5}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var id idgen.ObjectID
		if err := id.UnmarshalJSON(b); err != nil {
			return
		}
		out, _ := id.MarshalJSON()
		var back idgen.ObjectID
		if err := back.UnmarshalJSON(out); err != nil || back != id {
			t.Fatalf("round trip of %s: %s, %v", id, back, err)
		}
	})
}

func FuzzDecodeBase32(f *testing.F) {
	f.Add("0000000000000")
	f.Add("7ZZZZZZZZZZZZ")
	f.Add("fzzzzzzzzzzzz")
	f.Add("oIL")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := idgen.DecodeBase32(s)
		if err != nil {
			return
		}
		enc := idgen.EncodeBase32(v)
		if back, err := idgen.DecodeBase32(enc); err != nil || back != v || len(enc) != idgen.Base32Len {
			t.Fatalf("%q → %d → %s → %d, %v", s, v, enc, back, err)
		}
	})
}

func FuzzDecodeBase58(f *testing.F) {
	f.Add("11111111111")
	f.Add("jpXCZedGfVQ")
	f.Add("jpXCZedGfVR")
	f.Fuzz(func(t *testing.T, s string) {
		v, err := idgen.DecodeBase58(s)
		if err != nil {
			return
		}
		enc := idgen.EncodeBase58(v)
		if len(s) == idgen.Base58Len && enc != s {
			t.Fatalf("%q → %d → %s", s, v, enc)
		}
		if back, err := idgen.DecodeBase58(enc); err != nil || back != v {
			t.Fatalf("%q → %d → %s → %d, %v", s, v, enc, back, err)
		}
	})
}

func FuzzEncodings(f *testing.F) {
	f.Add(int64(0))
	f.Add(int64(-1))
	f.Add(int64(1<<63 - 1))
	f.Fuzz(func(t *testing.T, v int64) {
		if got, err := idgen.DecodeBase32(idgen.EncodeBase32(v)); err != nil || got != v {
			t.Fatalf("base32 %d → %d, %v", v, got, err)
		}
		if got, err := idgen.DecodeBase58(idgen.EncodeBase58(v)); err != nil || got != v {
			t.Fatalf("base58 %d → %d, %v", v, got, err)
		}
		if got, err := idgen.ParseID(idgen.ID(v).String()); err != nil || got != idgen.ID(v) {
			t.Fatalf("decimal %d → %d, %v", v, got, err)
		}
	})
}

func FuzzIDUnmarshalJSON(f *testing.F) {
	f.Add([]byte(`"9007199254740993"`))
	f.Add([]byte(`9007199254740993`))
	f.Add([]byte(`-0`))
	f.Add([]byte(`"\u0031"`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var id idgen.ID
		if err := id.UnmarshalJSON(b); err != nil {
			return
		}
		out, _ := json.Marshal(id)
		var back idgen.ID
		if err := json.Unmarshal(out, &back); err != nil || back != id {
			t.Fatalf("%s → %d → %s → %d, %v", b, id, out, back, err)
		}
	})
}

func FuzzParseUUID(f *testing.F) {
	f.Add("0190a6d2-7d1c-7b3e-8c4d-1a2b3c4d5e6f")
	f.Add("{0190a6d2-7d1c-7b3e-8c4d-1a2b3c4d5e6f}")
	f.Add("urn:uuid:0190a6d2-7d1c-7b3e-8c4d-1a2b3c4d5e6f")
	f.Add("0190a6d27d1c7b3e8c4d1a2b3c4d5e6f")
	f.Fuzz(func(t *testing.T, s string) {
		u, err := idgen.ParseUUID(s)
		if err != nil {
			return
		}
		if back, err := idgen.ParseUUID(u.String()); err != nil || back != u {
			t.Fatalf("%q → %s → %s, %v", s, u, back, err)
		}
	})
}

func FuzzSerialParse(f *testing.F) {
	f.Add("20240309140506789004200000000001")
	f.Add("20240230140506789004200000000001")
	f.Add("00000101000000000000000000000000")
	f.Fuzz(func(t *testing.T, s string) {
		var format idgen.SerialFormat
		p, err := format.Parse(s)
		if err != nil {
			return
		}
		if out, err := format.Format(p); err != nil || out != s {
			t.Fatalf("%q → %+v → %q, %v", s, p, out, err)
		}
	})
}

func FuzzDecompose(f *testing.F) {
	f.Add(int64(0))
	f.Add(int64(1<<53 - 1))
	f.Add(int64(1<<63 - 1))
	f.Add(int64(1288834974657) << 22)
	f.Fuzz(func(t *testing.T, id int64) {
		for _, l := range idgen.Presets() {
			if l.Bits != 0 && id >= int64(1)<<uint(l.Bits) || id < 0 {
				continue
			}
			p := l.Decompose(id)
			if back, err := l.Compose(p); err != nil || back != id {
				t.Fatalf("%s: %d → %+v → %d, %v", l.Name, id, p, back, err)
			}
		}
	})
}
