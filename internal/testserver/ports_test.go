package testserver

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// TestFreePortReserved: freePort draws below the kernel's ephemeral range,
// never the same port twice in a process, and holds each port's lock file,
// so that another test process cannot draw it while its server is down
// between a kill and a restart.
func TestFreePortReserved(t *testing.T) {
	lo, hi := portRange()
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Fatal(err)
	}
	var elo, ehi int
	if _, err := fmt.Sscan(string(b), &elo, &ehi); err != nil {
		t.Fatal(err)
	}
	if !(hi < elo || lo > ehi) {
		t.Fatalf("ports %d-%d overlap the ephemeral range %d-%d", lo, hi, elo, ehi)
	}
	seen := map[int]bool{}
	for range 20 {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < lo || p > hi || seen[p] {
			t.Fatalf("port %d: outside %d-%d or drawn twice", p, lo, hi)
		}
		seen[p] = true
		f, err := os.Open(filepath.Join(os.TempDir(), "coordkit-ports", strconv.Itoa(p)))
		if err != nil {
			t.Fatal(err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		f.Close()
		if err == nil {
			t.Fatalf("port %d: its lock file is not held", p)
		}
	}
}
