package idgen

import (
	"bytes"
	"database/sql/driver"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// ObjectID is a MongoDB ObjectId: 4 bytes of big-endian seconds since the
// Unix epoch, a 5-byte random value chosen once per generator (process), and a
// 3-byte big-endian counter that starts at a random value and wraps at 2^24.
// Its bytes and its 24-character hex text are what MongoDB drivers produce and
// accept. The zero value is the all-zero ObjectId.
type ObjectID [12]byte

// ObjectIDGenerator makes ObjectIDs with one process value and one counter.
// It is safe for concurrent use and does not allocate.
type ObjectIDGenerator struct {
	process [5]byte
	now     func() time.Time
	_       [64]byte      // keeps counter off the line of the read-only fields
	counter atomic.Uint32 // next counter value; only the low 24 bits are used
	_       [60]byte
}

// NewObjectIDGenerator returns a generator whose process value and counter
// start come from the WithRand source (crypto/rand by default) and whose
// seconds come from the WithClock clock. It returns an error if the random
// source fails.
func NewObjectIDGenerator(opts ...Option) (*ObjectIDGenerator, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	var b [8]byte
	if _, err := io.ReadFull(o.rand, b[:]); err != nil {
		return nil, fmt.Errorf("idgen: objectid random value: %w", err)
	}
	g := &ObjectIDGenerator{now: o.now}
	copy(g.process[:], b[:5])
	g.counter.Store(uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]))
	return g, nil
}

// New returns the next ObjectID.
func (g *ObjectIDGenerator) New() ObjectID {
	var id ObjectID
	binary.BigEndian.PutUint32(id[0:4], uint32(g.now().Unix()))
	copy(id[4:9], g.process[:])
	c := g.counter.Add(1) - 1 // 2^32 is a multiple of 2^24: the low 24 bits wrap cleanly
	id[9], id[10], id[11] = byte(c>>16), byte(c>>8), byte(c)
	return id
}

var defaultObjectIDs = sync.OnceValue(func() *ObjectIDGenerator {
	g, err := NewObjectIDGenerator()
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return g
})

// NewObjectID returns an ObjectID from the process-wide generator (time.Now,
// crypto/rand), as MongoDB drivers do.
func NewObjectID() ObjectID { return defaultObjectIDs().New() }

// ObjectIDFromTime returns the smallest ObjectID of t's second (process value
// and counter zero), for range queries on _id.
func ObjectIDFromTime(t time.Time) ObjectID {
	var id ObjectID
	binary.BigEndian.PutUint32(id[0:4], uint32(t.Unix()))
	return id
}

// ParseObjectID parses the 24-character hex form (either case). It returns an
// error wrapping ErrInvalidID for any other input.
func ParseObjectID(s string) (ObjectID, error) {
	var id ObjectID
	if len(s) != 24 {
		return id, invalidID("objectid", "length %d, want 24 hex digits", len(s))
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return ObjectID{}, invalidID("objectid", "%q: %v", s, err)
	}
	return id, nil
}

// Time returns the ObjectID's second, reading the 4 bytes as unsigned, as the
// MongoDB ObjectId specification requires (valid until 2106-02-07T06:28:15Z).
func (id ObjectID) Time() time.Time {
	return time.Unix(int64(binary.BigEndian.Uint32(id[0:4])), 0).UTC()
}

// Process returns the 5-byte per-process random value.
func (id ObjectID) Process() [5]byte { return [5]byte(id[4:9]) }

// Counter returns the 3-byte counter.
func (id ObjectID) Counter() uint32 {
	return uint32(id[9])<<16 | uint32(id[10])<<8 | uint32(id[11])
}

// IsZero reports whether id is the all-zero ObjectId.
func (id ObjectID) IsZero() bool { return id == ObjectID{} }

// String returns the 24-character lower-case hex form.
func (id ObjectID) String() string {
	var b [24]byte
	hex.Encode(b[:], id[:])
	return string(b[:])
}

// MarshalText returns the hex form.
func (id ObjectID) MarshalText() ([]byte, error) {
	b := make([]byte, 24)
	hex.Encode(b, id[:])
	return b, nil
}

// UnmarshalText parses the hex form.
func (id *ObjectID) UnmarshalText(b []byte) error {
	v, err := ParseObjectID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// MarshalJSON returns the hex form as a JSON string, as MongoDB drivers do.
func (id ObjectID) MarshalJSON() ([]byte, error) {
	b := make([]byte, 26)
	b[0], b[25] = '"', '"'
	hex.Encode(b[1:25], id[:])
	return b, nil
}

// UnmarshalJSON accepts a hex JSON string, MongoDB extended JSON
// {"$oid": "<hex>"}, or null (which leaves id unchanged).
func (id *ObjectID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil
	}
	var s string
	if len(b) > 0 && b[0] == '{' {
		var ext struct {
			OID *string `json:"$oid"`
		}
		if err := json.Unmarshal(b, &ext); err != nil || ext.OID == nil {
			return invalidID("objectid", "JSON object without a $oid string")
		}
		s = *ext.OID
	} else if err := json.Unmarshal(b, &s); err != nil {
		return invalidID("objectid", "JSON %s is neither a string nor {\"$oid\": ...}", truncate(b))
	}
	return id.UnmarshalText([]byte(s))
}

// Value stores the hex form.
func (id ObjectID) Value() (driver.Value, error) { return id.String(), nil }

// Scan reads the hex form (string or []byte), the 12 raw bytes, or NULL (the
// zero ObjectID).
func (id *ObjectID) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*id = ObjectID{}
		return nil
	case string:
		return id.UnmarshalText([]byte(v))
	case []byte:
		if len(v) == 12 {
			copy(id[:], v)
			return nil
		}
		return id.UnmarshalText(v)
	}
	return invalidID("objectid", "cannot scan %T", src)
}

func truncate(b []byte) string {
	if len(b) > 32 {
		return string(b[:32]) + "…"
	}
	return string(b)
}
