package modeltest_test

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/coordkit/coordkit/internal/testserver"
)

var (
	flagSeed    = flag.Uint64("model.seed", 0, "run only this seed (one sequence per system); 0: random seeds, printed")
	flagSteps   = flag.Int("model.steps", 0, "operations per sequence (0: 30, long mode 120)")
	flagDur     = flag.Duration("model.dur", 0, "time per system, new seeds until it is spent (0: 3.5s, long mode 1m)")
	flagLong    = flag.Bool("model.long", false, "long mode (also COORDKIT_MODEL_LONG=1): more steps, more time, larger shrink budget")
	flagReentry = flag.Bool("model.reentry", true, "generate re-entries (nested obtains by the holding owner, pairs of one owner); false explores past a re-entry bug")
	flagSkip    = flag.String("model.skip", "", "comma-separated kinds of steps not to generate (fence-ahead, delete, pair, cancel-at-grant, ...; reply-lost: no lost replies), to explore past a known bug")
	flagVerbose = flag.Bool("model.v", false, "log every step of the generated sequences")
	flagShrink  = flag.Duration("model.shrink", 0, "time budget for shrinking a failure, per system (0: 8s, long mode 3m)")
)

// masters are three independent Redis servers: redlock runs on all of
// them, the single-server locks on the first.
var masters []*testserver.Redis

type serverRun struct{ m *testing.M }

func (r serverRun) Run() int {
	var err error
	if masters, err = testserver.NewRedisMasters(3); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		for _, s := range masters {
			s.Close()
		}
	}()
	return r.m.Run()
}

// go-redis retries the dial of a closed pool's server in a goroutine that
// sleeps a second before it sees that its pool was closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(serverRun{m},
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// long reports whether the long mode (make chaos) is on.
func long() bool {
	if *flagLong {
		return true
	}
	v, _ := strconv.ParseBool(os.Getenv("COORDKIT_MODEL_LONG"))
	return v
}

func steps() int {
	switch {
	case *flagSteps > 0:
		return *flagSteps
	case long():
		return 120
	}
	return 30
}

func runTime() time.Duration {
	switch {
	case *flagDur > 0:
		return *flagDur
	case long():
		return time.Minute
	}
	return 3500 * time.Millisecond
}

func shrinkBudget() time.Duration {
	switch {
	case *flagShrink > 0:
		return *flagShrink
	case long():
		return 3 * time.Minute
	}
	return 8 * time.Second
}
