package idgen

import (
	"bytes"
	"database/sql/driver"
	"encoding/json"
	"io"
	"time"

	"github.com/google/uuid"
)

// UUID is an RFC 9562 UUID made by github.com/google/uuid, with the text,
// JSON and SQL methods of this package's other ID types. The zero value is the
// nil UUID.
type UUID uuid.UUID

// NewUUIDv4 returns a random (version 4) UUID from crypto/rand. It returns an
// error only if the random source fails.
func NewUUIDv4() (UUID, error) {
	u, err := uuid.NewRandom()
	return UUID(u), err
}

// NewUUIDv4FromReader returns a version 4 UUID whose random bits come from r.
func NewUUIDv4FromReader(r io.Reader) (UUID, error) {
	u, err := uuid.NewRandomFromReader(r)
	return UUID(u), err
}

// NewUUIDv7 returns a time-ordered (version 7) UUID: 48 bits of Unix
// milliseconds, then a 12-bit sub-millisecond counter that google/uuid keeps
// monotonic within the process (UUIDs from one process strictly increase, in
// bytes and in text), then random bits. It returns an error only if the random
// source fails.
func NewUUIDv7() (UUID, error) {
	u, err := uuid.NewV7()
	return UUID(u), err
}

// NewUUIDv7FromReader is NewUUIDv7 with its random bits from r.
func NewUUIDv7FromReader(r io.Reader) (UUID, error) {
	u, err := uuid.NewV7FromReader(r)
	return UUID(u), err
}

// ParseUUID parses the 36-character hyphenated form (either case); it also
// accepts the forms google/uuid.Parse accepts (32 hex digits, urn:uuid:, braces).
// It returns an error wrapping ErrInvalidID for anything else.
func ParseUUID(s string) (UUID, error) {
	u, err := uuid.Parse(s)
	if err != nil {
		return UUID{}, invalidID("uuid", "%v", err)
	}
	return UUID(u), nil
}

// Version returns the UUID's version number (4, 7, ...).
func (u UUID) Version() int { return int(uuid.UUID(u).Version()) }

// Time returns the millisecond of a version 7 UUID, and the zero time for other
// versions.
func (u UUID) Time() time.Time {
	if u.Version() != 7 {
		return time.Time{}
	}
	ms := int64(u[0])<<40 | int64(u[1])<<32 | int64(u[2])<<24 | int64(u[3])<<16 | int64(u[4])<<8 | int64(u[5])
	return time.UnixMilli(ms).UTC()
}

// IsZero reports whether u is the nil UUID.
func (u UUID) IsZero() bool { return u == UUID{} }

// String returns the 36-character lower-case hyphenated form.
func (u UUID) String() string { return uuid.UUID(u).String() }

// MarshalText returns the hyphenated form.
func (u UUID) MarshalText() ([]byte, error) { return uuid.UUID(u).MarshalText() }

// UnmarshalText parses any form ParseUUID accepts.
func (u *UUID) UnmarshalText(b []byte) error {
	v, err := ParseUUID(string(b))
	if err != nil {
		return err
	}
	*u = v
	return nil
}

// MarshalJSON returns the hyphenated form as a JSON string.
func (u UUID) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 38)
	b = append(b, '"')
	b = append(b, u.String()...)
	return append(b, '"'), nil
}

// UnmarshalJSON accepts a JSON string in any form ParseUUID accepts, or null
// (which leaves u unchanged).
func (u *UUID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return invalidID("uuid", "JSON %s is not a string", truncate(b))
	}
	return u.UnmarshalText([]byte(s))
}

// Value stores the hyphenated form.
func (u UUID) Value() (driver.Value, error) { return u.String(), nil }

// Scan reads a string or []byte in any form ParseUUID accepts, the 16 raw
// bytes, or NULL (the nil UUID).
func (u *UUID) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*u = UUID{}
		return nil
	case string:
		return u.UnmarshalText([]byte(v))
	case []byte:
		if len(v) == 16 {
			copy(u[:], v)
			return nil
		}
		return u.UnmarshalText(v)
	}
	return invalidID("uuid", "cannot scan %T", src)
}
