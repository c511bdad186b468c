package idgen

import "time"

// Metrics receives the measurements of coordkit's ID generators and worker
// leasers: Snowflake (WithMetrics here), redisid's Segments and
// workerid's leasers (their WithMetrics options) take the same hooks, so one
// adapter serves all; the Prometheus adapter is the module
// github.com/coordkit/coordkit/contrib/coordprom.
//
// Implementations embed NopMetrics, so that hooks added in later versions
// do nothing until they are implemented (the interface cannot be satisfied
// otherwise). They must be safe for concurrent use and must not block.
// Issued is called on the hot path, once per Next (with n IDs for NextN):
// keep it to an atomic add. Tags are the user's own bounded names (redisid
// tags, Leaf's biz tags); a Snowflake reports "".
type Metrics interface {
	// Issued reports n IDs handed out for tag.
	Issued(tag string, n int)
	// ClockBackwards reports a clock found behind the generator's last ID
	// by more than it tolerates: err is the *ClockBackwardsError the caller
	// got.
	ClockBackwards(behind time.Duration, err error)
	// SegmentFetched reports one segment reserved (or not, err) for tag:
	// its size and how long the round trip took.
	SegmentFetched(tag string, size int64, took time.Duration, err error)
	// SegmentWaited reports a Next call that waited for a segment.
	SegmentWaited(tag string, wait time.Duration)
	// LeaseLost reports a worker lease lost (not released): its generators
	// have stopped.
	LeaseLost(service string, worker int64, cause error)

	nop()
}

// NopMetrics implements Metrics and does nothing. Embed it in an
// implementation of Metrics and override the hooks it needs.
type NopMetrics struct{}

func (NopMetrics) Issued(string, int)                                 {}
func (NopMetrics) ClockBackwards(time.Duration, error)                {}
func (NopMetrics) SegmentFetched(string, int64, time.Duration, error) {}
func (NopMetrics) SegmentWaited(string, time.Duration)                {}
func (NopMetrics) LeaseLost(string, int64, error)                     {}
func (NopMetrics) nop()                                               {}
