package idgen

import (
	"bytes"
	"database/sql/driver"
	"encoding/json"
	"strconv"
)

// Text encodings of int64 IDs. Base32 (Crockford's alphabet) and base58 (the
// Bitcoin alphabet) are fixed width and their alphabets are in ASCII order, so
// for non-negative IDs the byte order of the text is the numeric order: the
// strings sort like the IDs. Negative values encode as their two's-complement
// uint64 and sort after all non-negative ones; every int64 round-trips.
const (
	// Base32Len is the width of EncodeBase32's output: 13 characters hold 64 bits.
	Base32Len = 13
	// Base58Len is the width of EncodeBase58's output: 11 characters hold 64 bits.
	Base58Len = 11

	base32Alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
	base58Alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
)

var base32Decode, base58Decode = func() (d32, d58 [256]byte) {
	for i := range d32 {
		d32[i], d58[i] = 0xFF, 0xFF
	}
	for i := 0; i < len(base32Alphabet); i++ {
		c := base32Alphabet[i]
		d32[c] = byte(i)
		if c >= 'A' && c <= 'Z' {
			d32[c+'a'-'A'] = byte(i)
		}
	}
	// Crockford: O and o read as 0; I, i, L and l read as 1.
	d32['O'], d32['o'] = 0, 0
	d32['I'], d32['i'], d32['L'], d32['l'] = 1, 1, 1, 1
	for i := 0; i < len(base58Alphabet); i++ {
		d58[base58Alphabet[i]] = byte(i)
	}
	return d32, d58
}()

// AppendBase32 appends the 13-character Crockford base32 form of id to dst.
func AppendBase32(dst []byte, id int64) []byte {
	var b [Base32Len]byte
	u := uint64(id)
	for i := Base32Len - 1; i >= 0; i-- {
		b[i] = base32Alphabet[u&31]
		u >>= 5
	}
	return append(dst, b[:]...)
}

// EncodeBase32 returns the 13-character Crockford base32 form of id
// (upper case, zero-padded, sortable).
func EncodeBase32(id int64) string { return string(AppendBase32(make([]byte, 0, Base32Len), id)) }

// DecodeBase32 parses Crockford base32 of 1 to 13 characters, case-insensitive,
// reading O as 0 and I and L as 1. It returns an error wrapping ErrInvalidID for
// an empty string, another character, or a value above 64 bits.
func DecodeBase32(s string) (int64, error) {
	if len(s) == 0 || len(s) > Base32Len {
		return 0, invalidID("base32", "length %d, want 1 to %d", len(s), Base32Len)
	}
	if len(s) == Base32Len && base32Decode[s[0]] > 15 {
		return 0, invalidID("base32", "%q exceeds 64 bits", s)
	}
	var u uint64
	for i := 0; i < len(s); i++ {
		d := base32Decode[s[i]]
		if d == 0xFF {
			return 0, invalidID("base32", "bad character %q", s[i])
		}
		u = u<<5 | uint64(d)
	}
	return int64(u), nil
}

// AppendBase58 appends the 11-character base58 form of id to dst.
func AppendBase58(dst []byte, id int64) []byte {
	var b [Base58Len]byte
	u := uint64(id)
	for i := Base58Len - 1; i >= 0; i-- {
		b[i] = base58Alphabet[u%58]
		u /= 58
	}
	return append(dst, b[:]...)
}

// EncodeBase58 returns the 11-character base58 form of id (Bitcoin alphabet,
// padded with '1', the zero digit; sortable).
func EncodeBase58(id int64) string { return string(AppendBase58(make([]byte, 0, Base58Len), id)) }

// DecodeBase58 parses base58 (Bitcoin alphabet, case-sensitive) of 1 to 11
// characters. It returns an error wrapping ErrInvalidID for an empty string,
// another character, or a value above 64 bits.
func DecodeBase58(s string) (int64, error) {
	if len(s) == 0 || len(s) > Base58Len {
		return 0, invalidID("base58", "length %d, want 1 to %d", len(s), Base58Len)
	}
	var u uint64
	for i := 0; i < len(s); i++ {
		d := base58Decode[s[i]]
		if d == 0xFF {
			return 0, invalidID("base58", "bad character %q", s[i])
		}
		if u > (1<<64-1-uint64(d))/58 {
			return 0, invalidID("base58", "%q exceeds 64 bits", s)
		}
		u = u*58 + uint64(d)
	}
	return int64(u), nil
}

// ID is an int64 ID (a Snowflake's) that travels as a decimal string: in text,
// and in JSON, where numbers above 2^53 lose precision in JavaScript and in
// any parser that reads numbers as float64. It is always a string in JSON,
// whatever its value, so clients see one type per field. The zero value is 0.
type ID int64

// ParseID parses a decimal ID. It returns an error wrapping ErrInvalidID for
// anything but an optionally signed decimal int64.
func ParseID(s string) (ID, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, invalidID("decimal", "%q: %v", s, err.(*strconv.NumError).Err)
	}
	return ID(v), nil
}

// Int64 returns id as an int64.
func (id ID) Int64() int64 { return int64(id) }

// String returns the decimal form.
func (id ID) String() string { return strconv.FormatInt(int64(id), 10) }

// Base32 returns EncodeBase32(id).
func (id ID) Base32() string { return EncodeBase32(int64(id)) }

// Base58 returns EncodeBase58(id).
func (id ID) Base58() string { return EncodeBase58(int64(id)) }

// MarshalText returns the decimal form.
func (id ID) MarshalText() ([]byte, error) { return strconv.AppendInt(nil, int64(id), 10), nil }

// UnmarshalText parses the decimal form.
func (id *ID) UnmarshalText(b []byte) error {
	v, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// MarshalJSON returns the decimal form as a JSON string.
func (id ID) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 22)
	b = append(b, '"')
	b = strconv.AppendInt(b, int64(id), 10)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts a JSON string holding a decimal ID, a JSON number that
// is an integer within int64 (no fraction or exponent: those are IDs already
// rounded by a float64), or null (which leaves id unchanged).
func (id *ID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		return nil
	case len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"':
		if bytes.IndexByte(b, '\\') < 0 {
			return id.UnmarshalText(b[1 : len(b)-1])
		}
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return invalidID("decimal", "JSON %s: %v", truncate(b), err)
		}
		return id.UnmarshalText([]byte(s))
	case len(b) > 0 && (b[0] == '-' || b[0] >= '0' && b[0] <= '9'):
		return id.UnmarshalText(b)
	}
	return invalidID("decimal", "JSON %s is neither a string nor an integer", truncate(b))
}

// Value stores id as an int64 (BIGINT).
func (id ID) Value() (driver.Value, error) { return int64(id), nil }

// Scan reads an int64, a decimal string or []byte, or NULL (0).
func (id *ID) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*id = 0
		return nil
	case int64:
		*id = ID(v)
		return nil
	case string:
		return id.UnmarshalText([]byte(v))
	case []byte:
		return id.UnmarshalText(v)
	}
	return invalidID("decimal", "cannot scan %T", src)
}
