package idgen

import (
	"fmt"
	"math"
	"time"
)

// Order is where a layout puts the sequence relative to the worker number.
// Every order keeps the time in the high bits, so IDs sort by time.
type Order uint8

const (
	// TimeWorkerSequence is time | worker | sequence, as Twitter's Snowflake
	// and most of its descendants lay out an ID. It is the zero Order.
	TimeWorkerSequence Order = iota
	// TimeSequenceWorker is time | sequence | worker, as Sonyflake lays out an
	// ID. IDs of one generator still increase strictly.
	TimeSequenceWorker
)

func (o Order) String() string {
	switch o {
	case TimeWorkerSequence:
		return "time|worker|sequence"
	case TimeSequenceWorker:
		return "time|sequence|worker"
	}
	return fmt.Sprintf("Order(%d)", uint8(o))
}

// TwitterEpoch is the epoch of Twitter's Snowflake, 2010-11-04T01:42:54.657Z
// (1288834974657 ms after the Unix epoch).
var TwitterEpoch = time.UnixMilli(1288834974657).UTC()

// Layout says how a Snowflake ID's 63 (or Bits) bits are split between the
// time since Epoch in units of Tick, the worker number (optionally split into a
// datacenter and a machine) and the sequence within one tick. It is a value:
// zero fields mean defaults, and Validate checks it as a whole.
//
// The zero Layout is Twitter's 41 / 10 / 12 bits at 1 ms from TwitterEpoch
// (LayoutWorker10).
type Layout struct {
	// Name is a label for messages and tables; it does not affect IDs.
	Name string

	// TimeBits, WorkerBits and SequenceBits must sum to Bits. When all three
	// are zero the layout is 41 / 10 / 12; otherwise each is taken as given
	// (a WorkerBits of 0 is a single-worker layout).
	TimeBits, WorkerBits, SequenceBits int

	// DatacenterBits is how many of the WorkerBits hold a datacenter number;
	// the rest hold a machine number. 0 (the default) does not split the worker.
	DatacenterBits int

	// DatacenterLow puts the datacenter in the low part of the worker field,
	// below the machine (the 41/6+8/8 layout); by default it is the high part
	// (Twitter's 5+5).
	DatacenterLow bool

	// Order is where the sequence sits; the default is TimeWorkerSequence.
	Order Order

	// Bits is the width of the IDs: 63 (the default, a non-negative int64) or
	// fewer, such as 53 for IDs that JavaScript numbers hold exactly.
	Bits int

	// Epoch is the instant the time field counts from; the default is
	// TwitterEpoch. It must not be before the Unix epoch (1970-01-01 UTC):
	// generators count nanoseconds since the epoch in an int64, which holds
	// 292 years, and read clocks up to 2262. NewSnowflake also rejects an
	// epoch later than its clock.
	Epoch time.Time

	// Tick is the unit of the time field; the default is 1 ms.
	Tick time.Duration
}

// The presets below are the layouts in wide use. Capacity and lifetime are in
// the package documentation; Layout.PerSecond and Layout.End compute them.
var (
	// LayoutTwitter is Twitter's Snowflake: 41 bits of milliseconds since
	// TwitterEpoch, a 5-bit datacenter above a 5-bit machine, 12-bit sequence.
	LayoutTwitter = Layout{Name: "twitter", TimeBits: 41, WorkerBits: 10, DatacenterBits: 5, SequenceBits: 12, Epoch: TwitterEpoch, Tick: time.Millisecond}

	// LayoutWorker10 is the zero Layout spelled out: 41 bits of milliseconds
	// since TwitterEpoch, an undivided 10-bit worker, 12-bit sequence.
	LayoutWorker10 = Layout{Name: "worker10", TimeBits: 41, WorkerBits: 10, SequenceBits: 12, Epoch: TwitterEpoch, Tick: time.Millisecond}

	// LayoutMachine6DC8 is 41 bits of milliseconds since 2019-04-01T00:00+08:00,
	// a 6-bit machine above an 8-bit datacenter, and an 8-bit sequence: the
	// "custom worker" of the Spring Cloud microservices book, for fleets that
	// need more nodes and fewer IDs per node than Twitter's layout gives.
	LayoutMachine6DC8 = Layout{Name: "machine6dc8", TimeBits: 41, WorkerBits: 14, DatacenterBits: 8, DatacenterLow: true, SequenceBits: 8, Epoch: time.UnixMilli(1554048000000).UTC(), Tick: time.Millisecond}

	// LayoutSonyflake is Sonyflake's layout: 39 bits of 10 ms units since
	// 2014-09-01T00:00:00Z, then an 8-bit sequence, then a 16-bit machine
	// (TimeSequenceWorker), so Decompose reads IDs made by sony/sonyflake and
	// a Snowflake with this layout makes IDs sonyflake.Decompose reads.
	LayoutSonyflake = Layout{Name: "sonyflake", TimeBits: 39, WorkerBits: 16, SequenceBits: 8, Order: TimeSequenceWorker, Epoch: time.Date(2014, 9, 1, 0, 0, 0, 0, time.UTC), Tick: 10 * time.Millisecond}

	// LayoutJS53 keeps IDs below 2^53, so JavaScript numbers (and JSON
	// parsers that use float64) hold them exactly: 38 bits of 10 ms units
	// since 2025-01-01T00:00:00Z, a 7-bit worker, 8-bit sequence.
	LayoutJS53 = Layout{Name: "js53", Bits: 53, TimeBits: 38, WorkerBits: 7, SequenceBits: 8, Epoch: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), Tick: 10 * time.Millisecond}
)

// Presets returns the preset layouts, for tables and tests.
func Presets() []Layout {
	return []Layout{LayoutTwitter, LayoutWorker10, LayoutMachine6DC8, LayoutSonyflake, LayoutJS53}
}

// Parts is a decomposed Snowflake ID.
type Parts struct {
	// Time is the start of the ID's tick, in UTC.
	Time time.Time
	// Ticks is the raw time field: ticks since the layout's epoch.
	Ticks int64
	// Worker is the whole worker field; Datacenter and Machine are its parts
	// when the layout splits it (otherwise Datacenter is 0 and Machine equals Worker).
	Worker, Datacenter, Machine int64
	// Sequence is the ID's number within its tick and worker.
	Sequence int64
}

// spec is a validated Layout with its derived shifts and masks.
type spec struct {
	timeBits, workerBits, seqBits, dcBits, bits uint
	dcLow                                       bool
	order                                       Order
	epoch                                       time.Time
	epochNs, tickNs                             int64
	seqMask                                     uint64
	maxTicks                                    int64 // 1 << timeBits
	maxWorker                                   int64
}

func (l Layout) spec() (spec, error) {
	bad := func(format string, args ...any) (spec, error) {
		return spec{}, fmt.Errorf("%w: %s", ErrInvalidLayout, fmt.Sprintf(format, args...))
	}
	if l.TimeBits < 0 || l.WorkerBits < 0 || l.SequenceBits < 0 || l.DatacenterBits < 0 || l.Bits < 0 {
		return bad("negative bit count")
	}
	if l.TimeBits == 0 && l.WorkerBits == 0 && l.SequenceBits == 0 {
		l.TimeBits, l.WorkerBits, l.SequenceBits = 41, 10, 12
	}
	if l.Bits == 0 {
		l.Bits = 63
	}
	if l.Bits > 63 {
		return bad("%d bits do not fit a non-negative int64 (at most 63)", l.Bits)
	}
	if l.TimeBits == 0 {
		return bad("no time bits")
	}
	if sum := l.TimeBits + l.WorkerBits + l.SequenceBits; sum != l.Bits {
		return bad("time %d + worker %d + sequence %d bits = %d, want %d", l.TimeBits, l.WorkerBits, l.SequenceBits, sum, l.Bits)
	}
	if l.DatacenterBits > l.WorkerBits {
		return bad("datacenter bits %d exceed worker bits %d", l.DatacenterBits, l.WorkerBits)
	}
	if l.DatacenterLow && l.DatacenterBits == 0 {
		return bad("DatacenterLow without DatacenterBits")
	}
	if l.Order > TimeSequenceWorker {
		return bad("unknown order %d", l.Order)
	}
	if l.Tick == 0 {
		l.Tick = time.Millisecond
	}
	if l.Tick < 0 {
		return bad("negative tick %v", l.Tick)
	}
	if l.Epoch.IsZero() {
		l.Epoch = TwitterEpoch
	}
	// A generator counts the time since the epoch in int64 nanoseconds
	// (clock.UnixNano() - epoch.UnixNano()), which hold 292 years; clock
	// readings go up to 2262, where UnixNano ends. Only epochs from the Unix
	// epoch on keep that difference from overflowing: an epoch in 1700 would
	// turn today's clock into a time far before the epoch.
	if l.Epoch.Before(time.Unix(0, 0)) {
		return bad("epoch %v before the Unix epoch 1970-01-01T00:00:00Z: nanoseconds since it overflow an int64 for clock readings up to 2262", l.Epoch.UTC())
	}
	if l.Epoch.After(time.Unix(0, math.MaxInt64)) {
		return bad("epoch %v after 2262", l.Epoch.UTC())
	}
	epochNs := l.Epoch.UnixNano()
	tickNs := int64(l.Tick)
	if l.TimeBits >= 63 || tickNs > math.MaxInt64>>uint(l.TimeBits) {
		return bad("%d time bits of %v span more than 292 years", l.TimeBits, l.Tick)
	}
	span := tickNs << uint(l.TimeBits)
	if epochNs > math.MaxInt64-span {
		return bad("time bits run out after 2262")
	}
	return spec{
		timeBits:   uint(l.TimeBits),
		workerBits: uint(l.WorkerBits),
		seqBits:    uint(l.SequenceBits),
		dcBits:     uint(l.DatacenterBits),
		bits:       uint(l.Bits),
		dcLow:      l.DatacenterLow,
		order:      l.Order,
		epoch:      l.Epoch,
		epochNs:    epochNs,
		tickNs:     tickNs,
		seqMask:    1<<uint(l.SequenceBits) - 1,
		maxTicks:   1 << uint(l.TimeBits),
		maxWorker:  1<<uint(l.WorkerBits) - 1,
	}, nil
}

// Validate reports whether l is a usable layout: bit counts that sum to Bits
// (63 by default), a datacenter no wider than the worker, a positive tick, an
// epoch not before 1970-01-01 UTC, and time bits that run out before the year
// 2262. It returns an error wrapping
// ErrInvalidLayout that says what is wrong. Whether the epoch is in the future
// is checked by NewSnowflake against its own clock.
func (l Layout) Validate() error {
	_, err := l.spec()
	return err
}

// PerSecond returns how many IDs one worker can issue per second:
// 2^SequenceBits per tick. It returns 0 for an invalid layout.
func (l Layout) PerSecond() float64 {
	s, err := l.spec()
	if err != nil {
		return 0
	}
	return float64(s.seqMask+1) * float64(time.Second) / float64(s.tickNs)
}

// End returns the first instant the layout's time bits cannot hold: the epoch
// plus 2^TimeBits ticks. It returns the zero time for an invalid layout.
func (l Layout) End() time.Time {
	s, err := l.spec()
	if err != nil {
		return time.Time{}
	}
	return s.epoch.Add(time.Duration(s.maxTicks * s.tickNs)).UTC()
}

// Worker returns the worker number made of a datacenter and a machine number,
// or an error wrapping ErrInvalidWorker (or ErrInvalidLayout) if either does
// not fit the layout.
func (l Layout) Worker(datacenter, machine int64) (int64, error) {
	s, err := l.spec()
	if err != nil {
		return 0, err
	}
	dcMax := int64(1)<<s.dcBits - 1
	mBits := s.workerBits - s.dcBits
	mMax := int64(1)<<mBits - 1
	if datacenter < 0 || datacenter > dcMax {
		return 0, fmt.Errorf("%w: datacenter %d not in [0, %d]", ErrInvalidWorker, datacenter, dcMax)
	}
	if machine < 0 || machine > mMax {
		return 0, fmt.Errorf("%w: machine %d not in [0, %d]", ErrInvalidWorker, machine, mMax)
	}
	if s.dcLow {
		return machine<<s.dcBits | datacenter, nil
	}
	return datacenter<<mBits | machine, nil
}

// Decompose splits id into its time, worker (with datacenter and machine) and
// sequence. Bits above the layout's width are ignored. It returns the zero
// Parts for an invalid layout.
func (l Layout) Decompose(id int64) Parts {
	s, err := l.spec()
	if err != nil {
		return Parts{}
	}
	return s.decompose(id)
}

func (s *spec) decompose(id int64) Parts {
	u := uint64(id) & (1<<s.bits - 1)
	var p Parts
	wMask := uint64(1)<<s.workerBits - 1
	switch s.order {
	case TimeSequenceWorker:
		p.Worker = int64(u & wMask)
		p.Sequence = int64(u >> s.workerBits & s.seqMask)
	default:
		p.Sequence = int64(u & s.seqMask)
		p.Worker = int64(u >> s.seqBits & wMask)
	}
	p.Ticks = int64(u >> (s.workerBits + s.seqBits))
	p.Time = time.Unix(0, s.epochNs+p.Ticks*s.tickNs).UTC()
	mBits := s.workerBits - s.dcBits
	if s.dcLow {
		p.Datacenter = p.Worker & (1<<s.dcBits - 1)
		p.Machine = p.Worker >> s.dcBits
	} else {
		p.Datacenter = p.Worker >> mBits
		p.Machine = p.Worker & (1<<mBits - 1)
	}
	return p
}

// Compose builds the ID of p.Time (rounded down to its tick), p.Worker and
// p.Sequence; Datacenter, Machine and Ticks are ignored (see Layout.Worker).
// It returns an error wrapping ErrInvalidLayout, ErrInvalidWorker or
// ErrInvalidID if the layout is invalid or a part does not fit. Compose of
// Decompose returns the ID for every ID within the layout's width, which makes
// it useful for the smallest ID of an instant in range queries.
func (l Layout) Compose(p Parts) (int64, error) {
	s, err := l.spec()
	if err != nil {
		return 0, err
	}
	if p.Worker < 0 || p.Worker > s.maxWorker {
		return 0, fmt.Errorf("%w: worker %d not in [0, %d]", ErrInvalidWorker, p.Worker, s.maxWorker)
	}
	if p.Sequence < 0 || uint64(p.Sequence) > s.seqMask {
		return 0, invalidID("snowflake", "sequence %d not in [0, %d]", p.Sequence, s.seqMask)
	}
	if p.Time.Before(s.epoch) || !p.Time.Before(s.epoch.Add(time.Duration(s.maxTicks*s.tickNs))) {
		return 0, invalidID("snowflake", "time %v outside the layout's range", p.Time)
	}
	ticks := p.Time.Sub(s.epoch).Nanoseconds() / s.tickNs
	return s.compose(uint64(ticks)<<s.seqBits|uint64(p.Sequence), p.Worker), nil
}

// compose turns a generator state (ticks << seqBits | sequence) and a worker
// into an ID.
func (s *spec) compose(state uint64, worker int64) int64 {
	if s.order == TimeSequenceWorker {
		return int64(state<<s.workerBits | uint64(worker))
	}
	return int64((state&^s.seqMask)<<s.workerBits | uint64(worker)<<s.seqBits | state&s.seqMask)
}
