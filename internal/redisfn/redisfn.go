// Package redisfn holds the Lua of coordkit's Redis lock family (the hash
// lock of package lock and redlock, the read-write lock, Simple, the
// semaphore) as one Redis Functions library, "coordkit_v<N>", and runs its
// functions: FCALL where the server has Functions (Redis 7 and later),
// EVALSHA of the same code where it has not or refuses them (Runner).
//
// The library is loaded once per server (FUNCTION LOAD), and its top-level
// code runs once: the helpers (fields.lua, fence.lua, queue.lua and
// fresh.lua for the hash lock, grant.lua for the semaphore) are defined
// there, once, and each script's body is a registered function that calls
// them. Through EVALSHA, a script is its family's helpers followed by its
// body, as one text: Redis runs a script's body anew on every call, so the
// helpers are defined anew each time (the cost that Functions remove).
// Nothing is spliced into a body in either form.
//
// The library's name carries its version, and every function's name the
// same number ("ck<N>_acquire"), so two coordkit versions on one Redis
// load two libraries and never call each other's functions; a library of
// the same name but other code (a build that changed the Lua and kept the
// number) is never called either: the Runner uses EVALSHA then
// (TestLibraryVersion pins the code of each version).
package redisfn

import (
	"context"
	"embed"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Version is the library's version: its name is "coordkit_v<Version>" and
// its functions' "ck<Version>_<name>". Bump it with every change of the
// Lua (TestLibraryVersion fails until then).
const Version = 2

// Library is the library's name.
var Library = fmt.Sprintf("coordkit_v%d", Version)

//go:embed lua
var files embed.FS

func read(name string) string {
	b, err := files.ReadFile("lua/" + name)
	if err != nil {
		panic("redisfn: " + err.Error())
	}
	return string(b)
}

// Script is one function of the library (see the header of its .lua file
// for KEYS and ARGV).
type Script struct {
	file  string        // its file under lua/, "lock/acquire.lua"
	name  string        // its function's name, "ck<Version>_acquire"
	eval  *redis.Script // its helpers and body, for EVALSHA
	flags []string      // its function's flags (see def)
}

// Name returns the name of the script's function in the library.
func (s *Script) Name() string { return s.name }

// File returns the script's file, relative to lua/ ("lock/acquire.lua").
func (s *Script) File() string { return s.file }

// Hash returns the SHA1 that EVALSHA sends for the script.
func (s *Script) Hash() string { return s.eval.Hash() }

// Eval returns the script as EVALSHA runs it: its family's helpers, then
// its body.
func (s *Script) Eval() *redis.Script { return s.eval }

// family is a set of scripts that share helpers: in the library, one
// block (do ... end) that defines the helpers once and registers the
// scripts.
type family struct {
	dir     string
	helpers []string // files run before the bodies that use them
	reset   string   // Lua run at the start of every call of the family's functions, or ""
	scripts []*Script
	bare    map[string]bool // bodies that use no helper: EVALSHA runs them alone
}

var (
	hashLock = &family{
		dir:     "lock",
		helpers: []string{"fields.lua", "fence.lua", "queue.lua", "fresh.lua"},
		reset:   "now = nil",
		bare:    map[string]bool{"renew.lua": true, "inspect.lua": true},
	}
	rwSimple  = &family{dir: "lock", bare: map[string]bool{}}
	semaphore = &family{
		dir:     "semaphore",
		helpers: []string{"grant.lua"},
		bare:    map[string]bool{"acquire.lua": true, "renew.lua": true},
	}
	families = []*family{hashLock, rwSimple, semaphore}
)

// The flags of a function (FUNCTION LOAD's): a function without flags may
// write and is refused as a whole, before it runs, when Redis is over its
// maxmemory; a script run by EVALSHA fails only at its first command that
// adds data. So the scripts that give a hold, a permit or a queue place
// back, or only renew one (release, renew, leave, hand-off, force-release),
// may run then (allowOOM), as they could by EVALSHA (renew and release of
// a hold with one level add nothing), and inspect writes nothing (noWrites:
// it also runs on a replica and without min-replicas-to-write). The others
// (acquire, setlimit) are refused then, with nothing written
// (TestOutOfMemory).
var (
	allowOOM = []string{"allow-oom"}
	noWrites = []string{"no-writes"}
)

// def names a script of f: file (in f.dir), function name suffix, and
// the function's flags.
func (f *family) def(file, name string, flags ...[]string) *Script {
	s := &Script{file: f.dir + "/" + file, name: fmt.Sprintf("ck%d_%s", Version, name)}
	for _, fl := range flags {
		s.flags = append(s.flags, fl...)
	}
	body := read(s.file)
	if !f.bare[file] {
		var b strings.Builder
		for _, h := range f.helpers {
			b.WriteString(read(f.dir + "/" + h))
			b.WriteString("\n")
		}
		body = b.String() + body
	}
	s.eval = redis.NewScript(body)
	f.scripts = append(f.scripts, s)
	return s
}

// The scripts of the hash lock (package lock's Client, and redlock through
// hashlock.Node).
var (
	Acquire      = hashLock.def("acquire.lua", "acquire")
	Release      = hashLock.def("release.lua", "release", allowOOM)
	Handoff      = hashLock.def("handoff.lua", "handoff", allowOOM)
	Renew        = hashLock.def("renew.lua", "renew", allowOOM)
	Leave        = hashLock.def("leave.lua", "leave", allowOOM)
	ForceRelease = hashLock.def("force_release.lua", "force_release", allowOOM)
	Inspect      = hashLock.def("inspect.lua", "inspect", noWrites)
)

// The scripts of package lock's RW and Simple.
var (
	RWAcquire     = rwSimple.def("rw_acquire.lua", "rw_acquire")
	RWRelease     = rwSimple.def("rw_release.lua", "rw_release", allowOOM)
	RWRenew       = rwSimple.def("rw_renew.lua", "rw_renew", allowOOM)
	SimpleObtain  = rwSimple.def("simple_obtain.lua", "simple_obtain")
	SimpleRelease = rwSimple.def("simple_release.lua", "simple_release", allowOOM)
	SimpleRenew   = rwSimple.def("simple_renew.lua", "simple_renew", allowOOM)
)

// The scripts of package semaphore.
var (
	SemAcquire  = semaphore.def("acquire.lua", "sem_acquire")
	SemRelease  = semaphore.def("release.lua", "sem_release", allowOOM)
	SemRenew    = semaphore.def("renew.lua", "sem_renew", allowOOM)
	SemLeave    = semaphore.def("leave.lua", "sem_leave", allowOOM)
	SemSetLimit = semaphore.def("setlimit.lua", "sem_setlimit")
)

// All returns every script of the library.
func All() []*Script {
	var all []*Script
	for _, f := range families {
		all = append(all, f.scripts...)
	}
	return all
}

// Code returns the library's text, as FUNCTION LOAD takes it.
func Code() string { return code() }

var code = sync.OnceValue(func() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!lua name=%s\n", Library)
	b.WriteString("-- coordkit's Redis lock family: one block per family of scripts, its\n-- helpers defined once, then its functions (see internal/redisfn).\n")
	for _, f := range families {
		b.WriteString("do\n")
		for _, h := range f.helpers {
			b.WriteString(read(f.dir + "/" + h))
			b.WriteString("\n")
		}
		for _, s := range f.scripts {
			// The body is a function of KEYS and ARGV, the names it
			// has as a script.
			fmt.Fprintf(&b, "redis.register_function{function_name = '%s', callback = function(KEYS, ARGV)\n", s.name)
			if f.reset != "" {
				b.WriteString(f.reset + "\n")
			}
			b.WriteString(read(s.file))
			b.WriteString("\nend, flags = {")
			for i, fl := range s.flags {
				if i > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "'%s'", fl)
			}
			b.WriteString("}}\n")
		}
		b.WriteString("end\n")
	}
	return b.String()
})

// Carried returns a string that every call of s carries on the wire, and
// no other command does, under the mode a Runner of this process settles
// on against a Redis 7 server (Functions, unless EnvVar is "off"): the
// function's name as FCALL's argument (framed as RESP sends it, so that
// FUNCTION LOAD's text, which names every function, does not match), or
// the script's SHA1. Tests arm faults on a script's calls with it.
func (s *Script) Carried() string {
	if os.Getenv(EnvVar) == "off" {
		return s.Hash()
	}
	return fmt.Sprintf("\r\n%s\r\n", s.name)
}

// Preload makes s runnable on c's server without a load round trip on
// the wire later (tests that count or cut a script's calls): SCRIPT LOAD
// of its EVALSHA text and, unless EnvVar is "off", the library.
func (s *Script) Preload(ctx context.Context, c redis.Cmdable) error {
	if err := s.eval.Load(ctx, c).Err(); err != nil {
		return err
	}
	if os.Getenv(EnvVar) == "off" {
		return nil
	}
	return Load(ctx, c)
}
