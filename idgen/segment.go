package idgen

// SegmentStats are the counters of one segment generator (Leaf's segment
// mode: redisid's Segment, sqlid's Leaf and Tinyid generators) since its
// creation.
type SegmentStats struct {
	Fetches   int64 // segments reserved in the store (Redis, a database)
	Waits     int64 // times a Next call had to wait for a round trip
	Rollbacks int64 // fetches that found the store's counter at or below High and raised it
	Step      int64 // size of the next segment to reserve (0 before the first, when the store's own step is used)
	High      int64 // the highest counter value reserved so far: the floor of the next fetch
	Ready     bool  // the next segment is reserved and waiting in memory
}
