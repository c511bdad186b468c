package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// mutexInput is one operation on a key's mutex.
type mutexInput struct {
	Acquire bool
	Hold    string
	Read    bool // rwModel: the read side
}

// mutexModel is a mutex whose state is the holding hold's id ("" free).
// Acquire is legal on a free mutex and takes it; release is legal only by
// the holder and frees it. Ambiguous outcomes are operations whose return
// is late: a loss the holder learned of (Lost, or a release answered "not
// held") is a release that took effect anywhere between the acquisition's
// request (a holder stopped before its acquisition returned can get a
// lease that had already run out) and the report; a release that failed, or a holder that died, is a
// release that took effect by the report, the failure or the death, plus
// the lease's life at the latest. An acquisition that failed (timeout,
// error) never gave its caller a critical section, and whatever its
// request left on a server is bounded by that server's lease life: it is
// left out (it can only delay others, which is liveness).
var mutexModel = porcupine.Model{
	Init: func() any { return "" },
	Step: func(state, input, _ any) (bool, any) {
		in := input.(mutexInput)
		s := state.(string)
		if in.Acquire {
			return s == "", in.Hold
		}
		return s == in.Hold, ""
	},
	Equal: func(a, b any) bool { return a.(string) == b.(string) },
	DescribeOperation: func(input, _ any) string {
		in := input.(mutexInput)
		if in.Acquire {
			return "acquire " + in.Hold
		}
		return "release " + in.Hold
	},
	DescribeState: func(s any) string {
		if s.(string) == "" {
			return "free"
		}
		return "held by " + s.(string)
	},
}

// rwState is a read-write lock's state: the writer's hold ("" none) and
// the readers' holds, sorted and joined by commas (comparable, for
// porcupine's cache).
type rwState struct {
	W, R string
}

// rwModel is mutexModel for the rw backend (lock.RW): a read acquisition
// is legal while no write hold holds, a write acquisition while nothing
// does; each release is legal only by a holder of that side.
var rwModel = porcupine.Model{
	Init: func() any { return rwState{} },
	Step: func(state, input, _ any) (bool, any) {
		in := input.(mutexInput)
		s := state.(rwState)
		var rs []string
		if s.R != "" {
			rs = strings.Split(s.R, ",")
		}
		switch {
		case in.Acquire && in.Read:
			if s.W != "" {
				return false, s
			}
			rs = append(rs, in.Hold)
			sort.Strings(rs)
			return true, rwState{R: strings.Join(rs, ",")}
		case in.Acquire:
			return s.W == "" && s.R == "", rwState{W: in.Hold}
		case in.Read:
			i := slices.Index(rs, in.Hold)
			if i < 0 {
				return false, s
			}
			return true, rwState{W: s.W, R: strings.Join(slices.Delete(rs, i, i+1), ",")}
		}
		return s.W == in.Hold, rwState{R: s.R}
	},
	Equal: func(a, b any) bool { return a.(rwState) == b.(rwState) },
	DescribeOperation: func(input, _ any) string {
		in := input.(mutexInput)
		side := "write"
		if in.Read {
			side = "read"
		}
		if in.Acquire {
			return "acquire " + side + " " + in.Hold
		}
		return "release " + side + " " + in.Hold
	},
	DescribeState: func(s any) string {
		st := s.(rwState)
		switch {
		case st.W != "":
			return "written by " + st.W
		case st.R != "":
			return "read by " + st.R
		}
		return "free"
	},
}

// linearTimeout bounds porcupine per key.
const linearTimeout = 60 * time.Second

// mayHaveWiped reports whether a fault under which h's backend documents
// a lost hold (documentedFaults) overlapped h, from its request to its
// release's answer.
func mayHaveWiped(in Input, h *Hold) bool {
	doc := documentedFaults(in.Backend)
	for _, f := range in.Faults {
		if f.Kind == fEtcdKeyDelete {
			continue // its rounds free only the holds they deleted (checkLinearizable: wipedFrom)
		}
		if f.Err == "" && doc[f.Kind] && (f.Proc == "" || f.Proc == h.Proc) && f.Start <= h.Released && f.End >= h.Invoke {
			return true
		}
	}
	return false
}

// checkLinearizable checks each key's history against the mutex model,
// and writes porcupine's visualization next to the report on a violation.
func (r *Result) checkLinearizable(in Input) {
	clients := map[string]int{}
	clientOf := func(h *Hold) int {
		id := fmt.Sprintf("%s/%d", h.Proc, h.G)
		if h.Outer != "" { // a new hold taken by a re-entry, within its outer hold's section
			id += reentrySuffix
		}
		if c, ok := clients[id]; ok {
			return c
		}
		clients[id] = len(clients)
		return clients[id]
	}
	model := mutexModel
	if in.Backend == "rw" {
		model = rwModel
	}
	for _, key := range sortedKeys(r.byKey) {
		if key == twinKey {
			continue // one owner's racing holds overlap by design (client.go, twinLoop): checkOverlaps judges them
		}
		life := in.lifeOf(key).Nanoseconds() + reportSlack.Nanoseconds()
		var ops []porcupine.Operation
		var of []*Hold // the hold of each operation
		for _, h := range r.byKey[key] {
			c := clientOf(h)
			ops = append(ops, porcupine.Operation{ClientId: c, Input: mutexInput{Acquire: true, Hold: h.ID, Read: h.Read},
				Call: h.Invoke, Return: h.Acquired})
			of = append(of, h)
			call, ret := h.Release, h.Released
			switch rep := h.reportedAt(); {
			case h.RelRes != "ok" && r.wipedFrom(in, h) != 0:
				// Its hold key deleted by an operator (etcd-key-delete):
				// freed anywhere from the first deletion that can have
				// taken it on, believed until its release or its
				// process's end (etcdlock/doc.go).
				call, ret = max(h.Invoke, r.wipedFrom(in, h))+1, max(h.Released, h.Last, r.procEnd[h.Proc])+life
			case rep != 0: // lost anywhere after the request went out
				call, ret = h.Invoke+1, rep
			case h.Release != 0 && h.RelRes == "ok":
			case h.Release != 0 && h.Released != 0 && strings.HasPrefix(h.RelRes, "error") && mayHaveWiped(in, h):
				// A release that could not tell (cut off) of a hold a
				// documented fault may have taken from the servers
				// meanwhile: freed anywhere from its request on (the
				// overlap checker holds its end to the report bound).
				call, ret = h.Invoke+1, h.Released+life
			case h.Release != 0 && h.Released != 0: // failed: took effect or expired
				ret = h.Released + life
			default: // the process died holding (or never heard back)
				call, ret = h.Last, max(r.procEnd[h.Proc], h.Last)+life
			}
			if ret <= call {
				ret = call + 1
			}
			ops = append(ops, porcupine.Operation{ClientId: c, Input: mutexInput{Hold: h.ID, Read: h.Read}, Call: call, Return: ret})
			of = append(of, h)
		}
		res, info := porcupine.CheckOperationsVerbose(model, ops, linearTimeout)
		r.Linear[key] = string(res)
		if res == porcupine.Illegal {
			what, hs := firstIllegal(ops, of, info)
			what = "mutex history not linearizable: " + what
			if in.OutDir != "" {
				path := filepath.Join(in.OutDir, "porcupine-"+key+".html")
				if err := porcupine.VisualizePath(model, info, path); err == nil {
					what += "; visualization: " + path
				}
			}
			r.violate(aNonLinear, key, what, hs...)
		}
	}
}

// linearSummary is "Ok" if every key is, else the keys that are not.
func linearSummary(m map[string]string) string {
	var bad []string
	for k, v := range m {
		if v != string(porcupine.Ok) {
			bad = append(bad, k+":"+v)
		}
	}
	if len(bad) == 0 {
		return "linearizable"
	}
	sort.Strings(bad)
	return strings.Join(bad, " ")
}

// firstIllegal narrows a non-linearizable history to the step where every
// linearization stops: the operation that returns first among those the
// longest partial linearization porcupine found does not contain (no order
// of the operations before it lets it take effect by its return), the last
// operations that linearization placed, and every operation whose interval
// overlaps it. It describes them and returns their holds, for the
// violation's excerpt: a person reads the few holds around the first
// illegal step instead of the key's whole history.
func firstIllegal(ops []porcupine.Operation, of []*Hold, info porcupine.LinearizationInfo) (string, []*Hold) {
	var longest []int
	for _, part := range info.PartialLinearizations() {
		for _, seq := range part {
			if len(seq) > len(longest) {
				longest = seq
			}
		}
	}
	placed := make([]bool, len(ops))
	for _, id := range longest {
		if id >= 0 && id < len(ops) {
			placed[id] = true
		}
	}
	stuck := -1
	for i, op := range ops {
		if !placed[i] && (stuck < 0 || op.Return < ops[stuck].Return) {
			stuck = i
		}
	}
	if stuck < 0 {
		return "porcupine gave no partial linearization", nil
	}
	s := ops[stuck]
	describe := func(i int) string {
		op := ops[i]
		return fmt.Sprintf("%s [%s, %s]", mutexModel.DescribeOperation(op.Input, nil),
			time.Duration(op.Call-s.Call).Round(time.Microsecond), time.Duration(op.Return-s.Call).Round(time.Microsecond))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "no linearization places %s (times from its call)", describe(stuck))
	seen := map[*Hold]bool{of[stuck]: true}
	hs := []*Hold{of[stuck]}
	if n := len(longest); n > 0 {
		var last []string
		for _, id := range longest[max(n-3, 0):] {
			last = append(last, describe(id))
			if !seen[of[id]] {
				seen[of[id]] = true
				hs = append(hs, of[id])
			}
		}
		fmt.Fprintf(&b, "; the longest partial linearization (%d of %d operations) ends with %s", n, len(ops), strings.Join(last, ", "))
	}
	var overlapping []string
	for i, op := range ops {
		if i != stuck && op.Call < s.Return && op.Return > s.Call {
			overlapping = append(overlapping, describe(i))
			if !seen[of[i]] && len(hs) < 6 {
				seen[of[i]] = true
				hs = append(hs, of[i])
			}
		}
	}
	if n := len(overlapping); n > 8 {
		overlapping = append(overlapping[:8], fmt.Sprintf("and %d more", n-8))
	}
	if len(overlapping) > 0 {
		fmt.Fprintf(&b, "; overlapping it: %s", strings.Join(overlapping, ", "))
	}
	return b.String(), hs
}
