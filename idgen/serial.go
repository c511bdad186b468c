package idgen

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// SerialFormat describes a fixed-width decimal serial number, a business flow
// number such as an order or payment number: 17 digits of time to the
// millisecond (yyyyMMddHHmmssSSS), then the worker, then the sequence within
// the millisecond, each zero-padded. It is a value: zero fields mean defaults.
// The zero SerialFormat is 32 characters: 17 of time, 4 of worker and 11 of
// sequence, in UTC.
type SerialFormat struct {
	// Width is the total number of digits; the default is 32. The sequence
	// gets Width - 17 - WorkerDigits digits, which must be 1 to 18.
	Width int
	// WorkerDigits is the number of worker digits, 1 to 18; the default is 4.
	WorkerDigits int
	// Location is the time zone of the time digits; the default is UTC.
	// NewSerial rejects a zone with a future offset change: a clock set back
	// by daylight saving time would repeat serials.
	Location *time.Location
}

// SerialParts is a parsed serial number.
type SerialParts struct {
	// Time is the serial's millisecond, in the format's Location.
	Time time.Time
	// Worker and Sequence are the serial's worker and sequence numbers.
	Worker, Sequence int64
}

type serialSpec struct {
	width, workerDigits, seqDigits int
	loc                            *time.Location
}

const timeDigits = 17 // yyyyMMddHHmmssSSS

func (f SerialFormat) spec() (serialSpec, error) {
	s := serialSpec{width: f.Width, workerDigits: f.WorkerDigits, loc: f.Location}
	if s.width == 0 {
		s.width = 32
	}
	if s.workerDigits == 0 {
		s.workerDigits = 4
	}
	if s.loc == nil {
		s.loc = time.UTC
	}
	s.seqDigits = s.width - timeDigits - s.workerDigits
	switch {
	case s.workerDigits < 1 || s.workerDigits > 18:
		return s, fmt.Errorf("%w: serial worker digits %d not in [1, 18]", ErrInvalidLayout, s.workerDigits)
	case s.seqDigits < 1 || s.seqDigits > 18:
		return s, fmt.Errorf("%w: serial width %d leaves %d sequence digits, want 1 to 18", ErrInvalidLayout, s.width, s.seqDigits)
	}
	return s, nil
}

// Validate reports whether f is a usable format, with an error wrapping
// ErrInvalidLayout if not.
func (f SerialFormat) Validate() error {
	_, err := f.spec()
	return err
}

// Format returns the serial of p (its Time truncated to the millisecond). It
// returns an error wrapping ErrInvalidLayout for an invalid format and
// ErrInvalidID for a part that does not fit its digits or a year outside
// 0000-9999.
func (f SerialFormat) Format(p SerialParts) (string, error) {
	s, err := f.spec()
	if err != nil {
		return "", err
	}
	if p.Worker < 0 || p.Worker >= pow10[s.workerDigits] {
		return "", invalidID("serial", "worker %d does not fit %d digits", p.Worker, s.workerDigits)
	}
	if p.Sequence < 0 || p.Sequence >= pow10[s.seqDigits] {
		return "", invalidID("serial", "sequence %d does not fit %d digits", p.Sequence, s.seqDigits)
	}
	if y := p.Time.In(s.loc).Year(); y < 0 || y > 9999 {
		return "", invalidID("serial", "year %d does not fit 4 digits", y)
	}
	return string(s.append(make([]byte, 0, s.width), p.Time, p.Worker, p.Sequence)), nil
}

func (s *serialSpec) append(dst []byte, t time.Time, worker, seq int64) []byte {
	t = t.In(s.loc)
	y, mo, d := t.Date()
	h, mi, sec := t.Clock()
	dst = appendPadded(dst, int64(y), 4)
	dst = appendPadded(dst, int64(mo), 2)
	dst = appendPadded(dst, int64(d), 2)
	dst = appendPadded(dst, int64(h), 2)
	dst = appendPadded(dst, int64(mi), 2)
	dst = appendPadded(dst, int64(sec), 2)
	dst = appendPadded(dst, int64(t.Nanosecond()/int(time.Millisecond)), 3)
	dst = appendPadded(dst, worker, s.workerDigits)
	return appendPadded(dst, seq, s.seqDigits)
}

// Parse splits a serial into its time, worker and sequence. It returns an
// error wrapping ErrInvalidID for a string of the wrong width, a non-digit, or
// time digits that name no instant in the format's Location (a 13th month, a
// 30th of February, a local time skipped by a zone change).
func (f SerialFormat) Parse(str string) (SerialParts, error) {
	s, err := f.spec()
	if err != nil {
		return SerialParts{}, err
	}
	if len(str) != s.width {
		return SerialParts{}, invalidID("serial", "length %d, want %d", len(str), s.width)
	}
	for i := 0; i < len(str); i++ {
		if str[i] < '0' || str[i] > '9' {
			return SerialParts{}, invalidID("serial", "non-digit %q at %d", str[i], i)
		}
	}
	num := func(from, n int) int { return int(parseDigits(str[from : from+n])) }
	y, mo, d, h, mi, sec, ms := num(0, 4), num(4, 2), num(6, 2), num(8, 2), num(10, 2), num(12, 2), num(14, 3)
	t := time.Date(y, time.Month(mo), d, h, mi, sec, ms*int(time.Millisecond), s.loc)
	ty, tmo, td := t.Date()
	th, tmi, tsec := t.Clock()
	if ty != y || int(tmo) != mo || td != d || th != h || tmi != mi || tsec != sec {
		return SerialParts{}, invalidID("serial", "%s is not a time in %s", str[:timeDigits], s.loc)
	}
	return SerialParts{
		Time:     t,
		Worker:   parseDigits(str[timeDigits : timeDigits+s.workerDigits]),
		Sequence: parseDigits(str[timeDigits+s.workerDigits:]),
	}, nil
}

var pow10 = func() (p [19]int64) {
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

func appendPadded(dst []byte, v int64, width int) []byte {
	var b [20]byte
	for i := width - 1; i >= 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
	return append(dst, b[:width]...)
}

func parseDigits(s string) int64 {
	var v int64
	for i := 0; i < len(s); i++ {
		v = v*10 + int64(s[i]-'0')
	}
	return v
}

// serialEpoch is where a Serial's engine counts milliseconds from; 2^42 of
// them last until 2139.
var serialEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	serialSeqBits  = 22 // engine sequence bits: at most 4,194,304 serials per ms
	serialTimeBits = 64 - serialSeqBits
)

// Serial issues serial numbers of one SerialFormat for one worker. Serials of
// one Serial strictly increase (as strings and as numbers) across goroutines
// and are never repeated, with the clock handling of Snowflake (WithTolerance,
// WithBorrow, WithLogicalClock, WithHighWater, WithLease). The sequence runs
// to 10^(sequence digits) - 1 per millisecond, or 4,194,303 if that is
// smaller. It is safe for concurrent use.
type Serial struct {
	e      *engine
	spec   serialSpec
	format SerialFormat
	worker int64
}

// NewSerial returns a generator of serials in format for worker, which must fit
// the worker digits. It returns an error wrapping ErrInvalidLayout for an
// invalid format or a Location with a future offset change, ErrInvalidWorker
// for a worker out of range, and the errors of NewSnowflake for its options.
func NewSerial(format SerialFormat, worker int64, opts ...Option) (*Serial, error) {
	sp, err := format.spec()
	if err != nil {
		return nil, err
	}
	if worker < 0 || worker >= pow10[sp.workerDigits] {
		return nil, fmt.Errorf("%w: worker %d does not fit %d digits", ErrInvalidWorker, worker, sp.workerDigits)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	if _, end := o.now().In(sp.loc).ZoneBounds(); !end.IsZero() {
		return nil, fmt.Errorf("%w: %s changes its UTC offset at %v, and local times that repeat would repeat serials", ErrInvalidLayout, sp.loc, end)
	}
	seqMax := uint64(min(pow10[sp.seqDigits], 1<<serialSeqBits)) - 1
	e, err := newEngine(serialSeqBits, seqMax, int64(time.Millisecond), serialEpoch.UnixNano(), 1<<serialTimeBits, o)
	if err != nil {
		return nil, err
	}
	return &Serial{e: e, spec: sp, format: format, worker: worker}, nil
}

// AppendNext appends the next serial to dst. It blocks and fails as
// Snowflake.Next does.
func (s *Serial) AppendNext(dst []byte) ([]byte, error) {
	hi, _, err := s.e.reserve(1)
	if err != nil {
		return dst, err
	}
	ms := int64(hi >> serialSeqBits)
	t := time.UnixMilli(serialEpoch.UnixMilli() + ms)
	return s.spec.append(dst, t, s.worker, int64(hi&(1<<serialSeqBits-1))), nil
}

// Next returns the next serial. It blocks and fails as Snowflake.Next does.
func (s *Serial) Next() (string, error) {
	b, err := s.AppendNext(make([]byte, 0, s.spec.width))
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// Format returns the generator's format, as given.
func (s *Serial) Format() SerialFormat { return s.format }

// HighWater is Snowflake.HighWater for serials.
func (s *Serial) HighWater() time.Time { return s.e.highWater() }

// Checkpoint is Snowflake.Checkpoint for serials: it stores the high-water
// mark (or, WithBorrow, the reservation a generator built WithHighWater
// borrows below) in store.
func (s *Serial) Checkpoint(ctx context.Context, store HighWaterStore) error {
	return s.e.checkpoint(ctx, store)
}

// NanoKeys issues int64 keys that are Unix nanoseconds, bumped by one where
// needed so that keys from one NanoKeys strictly increase. They are unique
// within one NanoKeys only: two processes (or two NanoKeys) read the same
// nanosecond, and clocks of different hosts disagree, so keys from more than
// one of them can repeat. Use Snowflake across processes. It is safe for
// concurrent use.
type NanoKeys struct {
	last atomic.Int64 // the last key issued
	now  func() time.Time
}

// NewNanoKeys returns a key generator reading the WithClock clock. It returns
// an error wrapping ErrInvalidOption for an invalid option.
func NewNanoKeys(opts ...Option) (*NanoKeys, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	return &NanoKeys{now: o.now}, nil
}

// Next returns the larger of the clock's Unix nanoseconds and the last key
// plus one. A clock stepped back makes keys run ahead of it, one nanosecond
// per key, until it catches up.
func (k *NanoKeys) Next() int64 {
	t := k.now().UnixNano()
	for {
		old := k.last.Load()
		nu := max(t, old+1)
		if k.last.CompareAndSwap(old, nu) {
			return nu
		}
	}
}
