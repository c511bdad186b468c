package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Event is one line of a client's history file. Mono is CLOCK_MONOTONIC in
// nanoseconds: the clock is system-wide on Linux, so events of different
// processes on the machine compare by it; Wall is for people.
type Event struct {
	Proc  string `json:"p"`               // process incarnation, e.g. "s1.2" (slot 1, second process)
	G     int    `json:"g"`               // goroutine within the process
	Op    string `json:"op"`              // see the op constants
	Key   string `json:"key,omitempty"`   // lock key
	Hold  string `json:"hold,omitempty"`  // hold id: proc/g/n, one per lock.Do call (proc/g/n/r: its re-entry)
	Outer string `json:"outer,omitempty"` // invoke of a re-entry: the outer hold's id
	Mode  string `json:"mode,omitempty"`  // invoke on the rw backend's read side: "r" (modeRead)
	Token int64  `json:"tok,omitempty"`   // fencing token (acquired, write)
	Owner string `json:"owner,omitempty"`
	Res   string `json:"res,omitempty"` // result: ok, refused, notheld, timeout, error: …
	// Late (acquired): how many ms the lease's own deadline
	// (lock.LeaseStatus.Until) was already behind when Obtain returned
	// it, at least 1; -1: the lease was already reported lost (Until
	// zero); 0: neither.
	Late int64 `json:"late,omitempty"`
	// Until: the lease's own deadline (CLOCK_MONOTONIC ns; 0 if never
	// read): as Obtain returned it (acquired); as the holder last read it,
	// at its acquisition or in its section's work (lost); as read in a
	// Redlock long section (until).
	Until int64 `json:"until,omitempty"`
	Val   int64 `json:"v,omitempty"` // counter value read or written
	// The ids backend (ids.go): the part (zk, redis, seg), the process's
	// lease number for it, the worker ID, a clock reading (Unix ns) and the
	// clock's offset (ns).
	Part   string `json:"part,omitempty"`
	Lease  int    `json:"lease,omitempty"`
	Worker int64  `json:"worker,omitempty"`
	Clock  int64  `json:"clock,omitempty"`
	Off    int64  `json:"off,omitempty"`
	Wall   int64  `json:"wall"`
	Mono   int64  `json:"mono"`
}

// Ops in a history. A lock.Do call writes invoke, then acquired or fail;
// inside the section cas (fenced write: invoke and answer as two events
// casinv and cas), read, write; then release and released; lost whenever
// the lease's Lost channel closes before the release. A section that
// re-enters its key (client.go, reenterSection) then writes the nested
// lock.Do as a hold of its own, id proc/g/n/r, whose invoke names the
// outer hold (Outer): invoke, acquired (the inner lease's token) or fail,
// cas, release, released, lost; and after it the outer hold's second cas.
// A loss of the outer hold that the inner acquisition revealed is recorded
// before that acquisition.
const (
	opInvoke   = "invoke"
	opAcquired = "acquired"
	opFail     = "fail"
	opCASInv   = "casinv"
	opCAS      = "cas"
	opRead     = "read"
	opWriteInv = "writeinv"
	opWrite    = "write"
	opLost     = "lost"
	opOverdue  = "overdue" // the lease's own deadline passed (Val: ms ago) and its Lost is still open (worker.checkOverdue)
	opUntil    = "until"   // redlock: a long section's reading of its lease's deadline (Until, mono), every 100 ms of its work (worker.noteDeadline)
	opThin     = "thin"    // a hold raised by a re-entry had less than half its raised TTL left (Val: ms left), Lost open (worker.checkRaised)
	opRelease  = "release"
	opReleased = "released"
	opStart    = "start" // first line of a process's history
	// opStall: the process itself ran nothing for Val ms (stamped at the
	// stall's end; watchStalls): a host so loaded that a 10 ms ticker was
	// that late, or a SIGSTOP. Its leases could not be renewed meanwhile.
	opStall = "stall"
)

// modeRead marks the invocation of a read-side hold (the rw backend): read
// holds share a key with each other, never with a write hold.
const modeRead = "r"

// monoNow reads CLOCK_MONOTONIC.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return time.Now().UnixNano() // cannot happen on Linux; keeps ordering within a process
	}
	return ts.Nano()
}

// Recorder appends events to one history file, one write(2) per line, so a
// process killed with SIGKILL loses no event it recorded. Safe for
// concurrent use.
type Recorder struct {
	proc string
	mu   sync.Mutex // protects f
	f    *os.File
}

// NewRecorder creates (or appends to) the history file at path.
func NewRecorder(path, proc string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Recorder{proc: proc, f: f}, nil
}

// Record stamps e with the process and both clocks and appends it.
func (r *Recorder) Record(e Event) Event {
	e.Proc = r.proc
	r.mu.Lock()
	defer r.mu.Unlock()
	// Stamp under the lock, so the file's order is the clocks' order.
	e.Mono = monoNow()
	e.Wall = time.Now().UnixNano()
	b, _ := json.Marshal(&e) // Event has no field that can fail to marshal
	r.f.Write(append(b, '\n'))
	return e
}

// Close closes the file.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Close()
}

// ReadHistories reads every hist-*.jsonl file in dir, sorted by Mono. A
// torn last line (a process killed in the middle of a write) is skipped;
// any other malformed line is an error.
func ReadHistories(dir string) ([]Event, error) {
	files, err := filepath.Glob(filepath.Join(dir, "hist-*.jsonl"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("chaos: no histories in %s", dir)
	}
	var all []Event
	for _, name := range files {
		evs, err := readHistory(name)
		if err != nil {
			return nil, err
		}
		all = append(all, evs...)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Mono < all[j].Mono })
	return all, nil
}

func readHistory(name string) ([]Event, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var evs []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	var torn error
	line := 0
	for sc.Scan() {
		line++
		if torn != nil {
			return nil, torn // a bad line followed by more lines is not a torn tail
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			torn = fmt.Errorf("chaos: %s:%d: %w", name, line, err)
			continue
		}
		if e.Proc == "" || e.Op == "" {
			return nil, fmt.Errorf("chaos: %s:%d: event without process or op", name, line)
		}
		evs = append(evs, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("chaos: %s: %w", name, err)
	}
	return evs, nil
}

// errName maps an error to its short name in a history.
type errName struct {
	target error
	name   string
}

// errKind names an error for a history: stable short strings, not messages.
func errKind(err error, kinds ...errName) string {
	if err == nil {
		return "ok"
	}
	for _, k := range kinds {
		if errors.Is(err, k.target) {
			return k.name
		}
	}
	s := err.Error()
	if len(s) > 120 {
		s = s[:120]
	}
	return "error: " + strings.ReplaceAll(s, "\n", " ")
}
