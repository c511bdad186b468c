// Package idgen generates unique IDs in process, with no server and no round
// trip: Snowflake int64 IDs in a configurable layout, MongoDB ObjectIDs, UUIDs
// (v4, v7), fixed-width decimal serial numbers, and nanosecond keys for one
// process; and it encodes int64 IDs as decimal, base32 and base58 text.
//
// A Snowflake generator needs a worker number unique among the generators
// running at once (package workerid leases one):
//
//	ids, err := idgen.NewSnowflake(idgen.LayoutTwitter, 7) // worker 7
//	if err != nil {
//		return err
//	}
//	id, err := ids.Next()                 // unique, increasing, no I/O
//	fmt.Println(idgen.EncodeBase58(id))   // or keep the int64; idgen.ID for JSON and SQL
//	oid := idgen.NewObjectID()            // MongoDB ObjectID
//	u, err := idgen.NewUUIDv7()           // time-ordered UUID
//
// The options that matter: WithHighWater (start above a stored mark, see
// OpenSnowflake and Checkpoint), WithTolerance (how far back a clock step is
// waited out, DefaultTolerance 5 ms), WithLease (stop when a worker lease is
// lost), WithClock (the injectable clock, default time.Now), WithMetrics and
// WithLogger.
//
// # Guarantees
//
// IDs from one Snowflake strictly increase across all goroutines and never
// repeat. The generator keeps one atomic word, the tick and sequence of the
// last ID, and publishes each ID with a compare-and-swap (no lock; Next makes
// no allocation): the CAS order is the issue order, and every CAS makes the
// word larger. Two generators never issue the same ID as long as they run with
// different worker numbers (leasing worker numbers is the caller's or another
// package's job) and each starts above what its worker issued before (see
// High-water mark).
//
// When a tick's sequence is used up, Next waits for the next tick: it sleeps
// (nanosleep on Linux, which wakes within about 0.1 ms, where Go's timers round
// sub-millisecond sleeps up to a millisecond) until shortly before the tick,
// then yields until it. It does not burn a core for the tick, yet keeps up
// with the 4,096,000 IDs/s a 12-bit sequence allows at 1 ms.
//
// # Snowflake
//
// A Snowflake ID is a non-negative int64 made of the time since an epoch in
// ticks, a worker number unique among the generators running at once, and a
// sequence number within the tick:
//
//	0 | time (41) | worker (10, or datacenter + machine) | sequence (12)
//
// A Layout sets the bit counts, the epoch, the tick and the order of the
// fields; NewSnowflake(layout, worker) returns a generator. Layout.Validate
// and NewSnowflake reject (ErrInvalidLayout) an epoch before 1970-01-01 UTC:
// a generator counts nanoseconds since its epoch in an int64, which holds 292
// years, and an earlier epoch overflows it for clock readings before 2262
// (for today's clock, any epoch before about 1733). The presets:
//
//	preset             bits: time/worker/seq  tick   epoch                     IDs/s per worker  workers  time bits run out
//	LayoutTwitter      41 / 5+5 / 12          1 ms   2010-11-04T01:42:54.657Z  4,096,000         32 × 32  2080-07-10
//	LayoutWorker10     41 / 10 / 12           1 ms   2010-11-04T01:42:54.657Z  4,096,000         1024     2080-07-10
//	LayoutMachine6DC8  41 / 6+8 / 8           1 ms   2019-04-01T00:00+08:00    256,000           64 × 256 2088-12-05
//	LayoutSonyflake    39 / 16 / 8 (t|s|w)    10 ms  2014-09-01T00:00:00Z      25,600            65,536   2188-11-16
//	LayoutJS53         38 / 7 / 8 (53 bits)   10 ms  2025-01-01T00:00:00Z      25,600            128      2112-02-09
//
// The zero Layout is LayoutWorker10. LayoutSonyflake keeps Sonyflake's field
// order (time | sequence | machine), so IDs made by sony/sonyflake decompose
// here and the other way round. LayoutJS53's IDs stay below 2^53 for 87 years,
// so JavaScript numbers hold them exactly; it trades IDs per second (25,600
// per worker) and workers (128) for that. Layout.PerSecond and Layout.End
// compute the last two columns for any layout (the package tests check the
// table against them). Layout.Decompose splits an ID into time, worker
// (datacenter, machine) and sequence; Layout.Compose builds one.
//
// # Clock steps
//
// A wall clock stepped back (by NTP, an operator, a VM migration) could make a
// generator reissue IDs. What a Snowflake does when its clock reads earlier
// than the tick of its last ID, by how far behind it is:
//
//   - up to the tolerance (WithTolerance, default 5 ms): it keeps issuing from
//     the last tick's remaining sequence numbers and, once they are used up,
//     waits until the clock reaches the next tick. Callers block for at most
//     the step plus a tick.
//   - beyond it: Next returns *ClockBackwardsError (errors.Is
//     ErrClockBackwards) with the amount, until the clock catches up. Nothing
//     is issued, so nothing repeats; the caller sees the outage.
//
// Two policies keep issuing through larger steps instead, each bounded:
//
//   - WithBorrow(ahead), as Baidu's uid-generator and UUIDv7's counter: IDs may
//     run up to ahead of the clock. A step back of up to ahead is absorbed
//     (IDs keep the last tick until the clock catches up, borrowing later
//     ticks when a tick's sequence runs out), and a burst above the rate
//     borrows later ticks instead of waiting. Trade-off: IDs' times may be up
//     to ahead early, and a worker restarted within ahead of a burst must
//     start from a high-water mark that covers what it borrowed (see
//     High-water mark: a generator built from a store borrows only below
//     the mark it stored). Bound: MaxBorrow (1 minute).
//   - WithLogicalClock(maxLead): the generator keeps its own clock, which
//     runs on Go's monotonic clock (which steps never move) from the wall time
//     read at start, and jumps forward to the wall clock whenever that is
//     ahead, for good. A step back is ignored, also one that undoes an
//     earlier step forward: IDs keep flowing at the full rate, with times that
//     lead the wall clock by the size of the step, until the lead passes
//     maxLead and Next returns *ClockBackwardsError (Behind is the lead).
//     Trade-off: IDs' times stay off by the step until the wall clock catches
//     up (or for the life of the generator), and a restart reads the stepped
//     wall clock again, so it needs a high-water mark. Bound: MaxLogicalLead
//     (24 hours).
//
// A clock that jumps forward is followed at once; the time bits then run out
// earlier by the jump. Once the clock passes Layout.End, Next returns
// ErrTimeExhausted.
//
// # High-water mark
//
// Snowflake.HighWater is an instant before which all IDs issued so far lie.
// Snowflake.Checkpoint saves a mark through a HighWaterStore, periodically
// and at shutdown: HighWater, or for a generator built WithBorrow(ahead) a
// reservation, the later of HighWater and its clock plus ahead. Handed to the
// worker's next generator (OpenSnowflake, or WithHighWater), the mark makes
// that generator start above it, and fail with *ClockBackwardsError when its
// clock is behind it by more than its tolerance (or borrow): a restart after
// a clock rollback is detected instead of reissuing IDs. A generator built
// WithHighWater (OpenSnowflake builds them so, and stores a first
// reservation at once when it borrows) borrows ticks ahead of its clock only
// below the last mark it stored; once they are used up, Next waits for the
// clock or the next Checkpoint.
//
// What survives a crash, for a generator restarted from the last mark its
// predecessor stored (with WithHighWater, or OpenSnowflake, on both):
//
//   - every ID issued before that Checkpoint;
//   - every ID borrowed ahead of the clock since (it lies below the mark);
//   - every ID issued since at a tick the clock had reached, as long as the
//     new generator's clock at the restart is not behind the old one's at the
//     crash (a clock stepped back by more than the time since that
//     Checkpoint is): the clock itself is all that covers these.
//
// A generator built WithBorrow without WithHighWater borrows freely, and what
// it borrowed since its last Checkpoint does not survive a crash. A generator
// restarted from a reservation whose clock is behind it by more than its own
// tolerance (or borrow) fails with *ClockBackwardsError until its clock nears
// the mark: restart a borrowing worker with the same borrow.
//
// Snowflake.Retire stops a generator for good and returns its final mark: no
// ID is issued above it from then on, so a Checkpoint after Retire (at
// shutdown, or before the worker number goes elsewhere) covers everything the
// generator issued. Stores backed by Redis and ZooKeeper come with worker
// leasing, in another package; WithLease makes a generator return
// ErrLeaseLost once its lease's channel closes.
//
// # Other IDs
//
// ObjectID is MongoDB's 12-byte ObjectId: 4 bytes of big-endian Unix seconds
// (read as unsigned: valid until 2106-02-07T06:28:15Z), a 5-byte random value
// per generator (process), a 3-byte counter from a random start that wraps at
// 2^24. It is byte-compatible with MongoDB drivers; its text is 24 hex digits.
// Unique while no generator issues more than 16,777,216 IDs in one second.
//
// UUID wraps github.com/google/uuid: NewUUIDv4 (122 random bits) and
// NewUUIDv7 (Unix milliseconds, then a counter that keeps UUIDs of one process
// strictly increasing, then random bits).
//
// Serial makes fixed-width decimal serial numbers for business flows: by
// default 32 digits, yyyyMMddHHmmssSSS (17), worker (4), sequence (11), with
// Snowflake's guarantees and clock handling; SerialFormat.Parse splits one.
// NanoKeys makes Unix-nanosecond keys that increase within one process; they
// are not unique across processes or hosts.
//
// # Encodings and value types
//
// EncodeBase32 (Crockford, 13 characters) and EncodeBase58 (Bitcoin
// alphabet, 11 characters) are fixed width over alphabets in ASCII order, so
// the strings of non-negative IDs sort like the IDs; both round-trip every
// int64. ID is an int64 whose JSON is a string, because JSON numbers above
// 2^53 lose precision in JavaScript; it reads strings and integer numbers.
// ID, ObjectID and UUID implement String, encoding.TextMarshaler and
// TextUnmarshaler, json.Marshaler and Unmarshaler, driver.Valuer and
// sql.Scanner.
//
// # When not to use it
//
// Use a database sequence when IDs must be gap-free (Snowflake IDs skip
// freely). Do not run two generators with one worker number: nothing here can
// detect that (a worker-ID lease of the other package hands out one
// generator per lease). Expose Snowflake IDs only where revealing the issue time and
// the rate is acceptable; use NewUUIDv4 for unguessable IDs.
package idgen
