// Package redisid hands out IDs from Redis: Leaf-style segments served from
// memory, the step hash, plain INCR counters, and the TIME script scheme.
// Every generator implements Generator (Next(ctx) (int64, error)) and is safe
// for concurrent use. Pick by what the IDs must be:
//
//   - Segments: dense, strictly increasing per process, unique everywhere,
//     at memory speed (one atomic add per ID, no I/O, no allocation). The
//     default choice.
//   - Counter: every ID straight from Redis (INCR), gap-free while no
//     process crashes; one round trip per ID.
//   - Hash: IDs whose rules (offset, step) live in a Redis hash that people
//     edit by hand; one Lua round trip per ID.
//   - Time: 64-bit IDs that carry the Redis server's millisecond and a
//     logical shard, from several independent Redis nodes; one Lua round trip
//     per ID.
//
// Segments, the default choice:
//
//	ids, err := redisid.NewSegments(rdb) // one per process, shared by every tag
//	if err != nil {
//		return err
//	}
//	defer ids.Close()
//	id, err := ids.Next(ctx, "order") // from memory; Redis is read in the background
//
// The options that matter: WithStep and WithStepBounds (segment sizes,
// 1000 to 10,000,000 by default), WithTargetInterval (time between fetches the
// step adapts to, one minute), WithPrefix (the counter keys' prefix,
// DefaultPrefix), WithMetrics and WithLogger. Redis 6.2 or later is required.
//
// # Guarantees
//
// Segments are strictly increasing within a process (an ID is larger than
// every ID whose Next returned before this Next began) and unique across
// processes, because INCRBY hands every range out once; a crash wastes at most
// the unused rest of the process's segments. Counter values are gap-free
// while no process crashes. Every counter-based generator (Segments, Counter,
// Hash) raises the counter past the highest value it handed out when Redis
// comes back with older data, so a process never repeats its own IDs;
// uniqueness across processes after a Redis data loss needs persistence, or a
// floor set with RaiseCounter (Rollback, below). The TIME script
// detects a Redis clock that went backwards and answers so instead of reusing
// sequence values (TIME scheme, below).
//
// # Segments (Leaf's segment mode on Redis)
//
// Each tag (order, user, …) has a counter key, prefix+tag (default
// "coordkit:id:seg:order"). A process reserves the range (end-step, end] with one
// INCRBY key step and serves it from memory: Next is an atomic add on the
// segment in use. When 15 % of a segment is used, a goroutine owned by the
// Segments registry reserves the next one (double buffer), so in steady state
// no caller waits for Redis; Stats().Waits counts the calls that did. The
// switch to the next segment happens under a mutex only when the current one
// is used up, and only then, so IDs come out in the order of the atomic adds:
// strictly increasing within a process (an ID is larger than every ID whose
// Next returned before this Next began), and unique across processes because
// INCRBY hands every range out once.
//
// The step adapts to the draw rate as in Leaf: it doubles when the time
// between two fetches was shorter than the target interval (default one
// minute) and halves when it was more than twice as long, within
// [1000, 10_000_000] by default (WithStepBounds). While a fetch is late, every
// 1024th caller yields the processor (runtime.Gosched), so that on a machine
// whose CPUs are all busy calling Next the goroutine reading Redis's reply is
// not starved.
//
// A crash wastes at most the unused rest of the process's segments: the one
// in use and the one reserved ahead, so at most twice the upper step bound
// per tag. IDs are positive; the first ID of a fresh key is 1. After Close the
// segments in memory are still served, then Next returns ErrClosed.
//
// # Step hash
//
// The scheme of the Spring Boot Redis ID recipe: a hash with fields offset,
// step, current and start. While start is 0, the next value is offset, and
// the script sets current = offset and start = 1; after that each value is
// current + step (HINCRBY, exact in int64). One Lua script reads and advances
// the hash atomically; it works on hashes created by hand:
//
//	HSET user_table_key offset 1 step 5 current 1 start 0
//
// hands out 1, 6, 11, …. CreateHash creates such a hash unless the key exists
// (it never clobbers). k Redis nodes hand out disjoint series when every node
// has the same step k and its own offset in 1..k (node i: offset i+1): node 0
// issues 1, 1+k, 1+2k, …, node 1 issues 2, 2+k, …. A missing field, a field
// that is not a canonical integer, a step <= 0 or a key of another type is
// ErrCorrupt; a missing key is ErrNoHash.
//
// # Counter
//
// Next is INCR key; NextN(n) is INCRBY key n and returns the first of n
// consecutive values. One round trip per call.
//
// # Rollback
//
// A Redis that restarts from older data (AOF with appendfsync everysec, an
// RDB snapshot, a failover to a lagging replica) can hand out a counter value
// again. Every counter-based generator here (Segments, Counter, Hash) keeps
// the highest value it has handed out. A request carries that floor as it was
// when the request was sent; when Redis answers a value (or, for a segment,
// a range reaching) at or below it, the generator raises the counter past it
// atomically — one Lua script: counter = max(counter, floor) + n, compared as
// decimal strings so no value passes through a Lua double; for the step hash,
// current advances by whole steps, keeping its residue — and serves the value
// above. Stats().Rollbacks counts it for segments.
//
// This protects a process against repeating its own IDs. It cannot protect
// against repeating IDs that another process handed out after the point
// Redis fell back to: no generator knows those. Duplicates across processes
// after a Redis data loss are excluded only if Redis keeps its data
// (appendonly yes with appendfsync always, or a replica promoted only when
// in sync), or if the user sets a fresh floor before traffic resumes:
// RaiseCounter(ctx, rdb, key, maxIDInTheDatabase). The same holds for a
// Redis that was restarted without persistence.
//
// # TIME scheme
//
// hengyunabc/redis-id-generator's layout: an ID is
//
//	ms << 22 | shard << 10 | sequence
//
// with ms the Redis server's TIME in milliseconds since 1970-01-01 UTC (41
// bits), a logical shard of 12 bits (0..4095, e.g. a user ID modulo 4096 so a
// user's rows share a shard) and a sequence of 10 bits within the
// millisecond. 41 bits of milliseconds since 1970 run out on
// 2039-09-07T15:47:35.551Z (End); from then on Next returns ErrTimeOverflow.
// Parse splits an ID; FromReply builds one from the 4-tuple (seconds,
// microseconds, shard, sequence) that a script of this shape returns.
//
// N Redis nodes, each with an index i in [0, N), issue only sequence values
// congruent to i modulo N, so no two nodes can issue the same ID; each node
// can issue 1024/N IDs per millisecond, tag and shard. A Time client tries
// the node that last worked and moves on to the next one when a node fails,
// is busy or its clock went back.
//
// The script fixes three faults of the well-known version:
//
//   - Every key it touches is passed in KEYS, and both keys of a tag share
//     the hash tag {tag}, so it runs on Redis Cluster (the original builds
//     its key inside the script and passes the shard as a key).
//   - A full millisecond makes it answer REDISID_BUSY with the microseconds
//     to the next millisecond, and the client tries another node or waits,
//     instead of spinning in an INCRBY loop inside Redis (which, since
//     keys do not expire during a script, never ends).
//   - The sequence belongs to the millisecond it was issued in (stored with
//     it), not to a key that expires 1 ms after its first use and can start
//     again within the same TIME millisecond. A per-tag last-millisecond mark
//     detects a Redis clock that went backwards: the script answers
//     REDISID_BACKWARDS instead of reusing sequence values; the client waits
//     if the gap is within WithMaxClockBack (default 10 ms), else it counts
//     the node as failed (ErrClockBackwards) and tries the others.
//
// # Redis keys
//
//	coordkit:id:seg:<tag>            string  Segments counter (DefaultPrefix; WithPrefix)
//	<key>                            string  Counter, and RaiseCounter
//	<key>                            hash    step hash: offset, step, current, start
//	coordkit:id:time:{<tag>}:seq     hash    TIME scheme: m<shard> = ms of the shard's
//	                                         last ID, q<shard> = its sequence
//	coordkit:id:time:{<tag>}:last    string  TIME scheme: the tag's last millisecond
//
// Every key coordkit chooses starts with "coordkit:", so one ACL key pattern
// (~coordkit:*) covers them all; Counter and Hash use the key they are given.
//
// Versions before this schema used "redisid:seg:" and "redisid:time:"
// (LegacyPrefix, LegacyTimePrefix). With the default prefixes, a tag that
// still has such keys goes on with them, so that no ID is issued twice
// across an upgrade, and processes of the older and the newer version share
// them during a rolling upgrade: Segments picks the LegacyPrefix counter at a
// tag's first fetch if it exists and the new one does not; the TIME script
// uses the legacy keys whenever the legacy mark exists. Only a tag that is
// new to both versions and first used by both during the rolling upgrade can
// end up with two counters (one per version); avoid that by deploying with
// WithPrefix(LegacyPrefix) / WithTimeKeyPrefix(LegacyTimePrefix) first, or by
// adding new tags after the upgrade. To move a tag to the new key later, stop
// its writers and RENAME the legacy key (the TIME scheme: both of the tag's
// keys; the new names share the tag's Cluster slot).
//
// No key expires: a counter must outlive every process, and the TIME keys are
// at most one hash of 8192 small fields and one string per tag. Tags of the
// TIME scheme must not contain braces (ErrBadTag).
//
// Scripts are in raise.lua, stephash.lua, createhash.lua and time.lua, each
// with a header documenting KEYS and ARGV; they run with EVALSHA and fall back
// to EVAL on NOSCRIPT (a restarted Redis has an empty script cache).
// LoadScripts loads them all.
//
// # Deadlines
//
// Segment.Next honours ctx itself while it waits for a fetch. Counter, Hash
// and Time calls are single go-redis commands: go-redis abandons a blocked
// socket read when ctx's deadline passes only if the client was built with
// ContextTimeoutEnabled; otherwise its ReadTimeout (default 3 s) bounds them.
// For Time nodes, a client with MaxRetries -1 and a short DialTimeout makes a
// dead node cost one failed dial before the client moves on.
//
// # When not to use it
//
// Not for IDs that must be unguessable (they count up). Not when gaps are
// forbidden (no generator here is gap-free across crashes, not even Counter,
// whose caller may crash before using the value). Segments reorder IDs across
// processes: IDs are increasing per process, only roughly increasing (by
// segment) overall. The TIME scheme depends on the Redis hosts' clocks and
// ends in 2039; for IDs made without Redis see package idgen (Snowflake).
package redisid
