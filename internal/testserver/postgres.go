package testserver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pgBinDirs is where Debian's postgresql packages put the server binaries,
// off PATH.
const pgBinDirs = "/usr/lib/postgresql/*/bin"

// Postgres is one PostgreSQL server (Debian's postgresql package) on
// 127.0.0.1, with a fresh cluster made by initdb: user postgres trusted
// without a password, database postgres, no Unix socket. It runs as the
// user nobody when this process is root (initdb and postgres refuse root),
// with fsync off (Kill loses no committed write, only an OS crash would).
// The server forks a backend per connection, each in a session of its own:
// Kill, Pause and Resume signal the postmaster it started and its children. Its methods are
// safe for concurrent use.
type Postgres struct{ sqlServer }

// NewPostgres copies a cluster made by initdb (once per machine, see
// templateDir) into a new temporary directory, starts postgres on a
// free loopback port and waits until it accepts a session. The caller must
// Close it. A missing initdb or postgres (looked up on PATH, then in
// /usr/lib/postgresql/*/bin) is ErrMissingBinary, naming the package to
// install.
func NewPostgres(opts ...SQLOption) (*Postgres, error) {
	var o sqlOptions
	for _, opt := range opts {
		opt(&o)
	}
	bin, err := findBinary("postgres", pgBinDirs, "postgresql")
	if err != nil {
		return nil, err
	}
	initdb, err := findBinary("initdb", filepath.Dir(bin), "postgresql")
	if err != nil {
		return nil, err
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := tempDir("postgres")
	if err != nil {
		return nil, err
	}
	if err := chownTree(dir, cred); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initArgs := []string{"-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C", "-N", "--no-instructions"}
	tmpl, err := templateDir("postgres", cred, []string{bin, initdb}, initArgs, func(scratch string) error {
		return runAs(cred, scratch, initdb, append([]string{"-D", filepath.Join(scratch, "data")}, initArgs...)...)
	})
	if err == nil {
		err = copyData(tmpl, dir)
	}
	if err != nil {
		removeKeepingLogs(dir)
		return nil, err
	}
	var last error
	for attempt := 0; attempt < 5; attempt++ { // a free port can be taken before we bind it
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args := append([]string{
			"-D", data, "-p", strconv.Itoa(port), "-h", "127.0.0.1", "-k", "",
			"-c", "fsync=off", "-c", "shared_buffers=32MB", "-c", "max_connections=300",
		}, o.args...)
		p := &Postgres{sqlServer{port: port, dir: dir, forks: true, proc: &process{
			name: "postgres :" + strconv.Itoa(port), bin: bin, args: args,
			dir: dir, log: filepath.Join(dir, "postgres.log"), cred: cred,
		}}}
		p.ready = p.serves
		if last = p.start(); last == nil {
			return p, nil
		}
		p.Kill()
		if !strings.Contains(last.Error(), "in use") {
			break
		}
	}
	removeKeepingLogs(dir)
	return nil, last
}

// StartPostgres is NewPostgres for tests: it fails tb on error and closes
// the server when the test ends.
func StartPostgres(tb testing.TB, opts ...SQLOption) *Postgres {
	tb.Helper()
	p, err := NewPostgres(opts...)
	return must(tb, p, err)
}

// DSN returns a connection URL (for github.com/jackc/pgx/v5/stdlib, or any
// libpq-style driver) as user postgres to database postgres, with params
// (e.g. "connect_timeout=2") appended.
func (p *Postgres) DSN(params ...string) string { return p.DSNAt(p.Addr(), params...) }

// DSNAt is DSN through another address, such as a Proxy's in front of the
// server.
func (p *Postgres) DSNAt(addr string, params ...string) string {
	return "postgres://postgres@" + addr + "/postgres?" + strings.Join(append([]string{"sslmode=disable"}, params...), "&")
}

// serves opens a session with the frontend/backend protocol (startup
// message, trust authentication) and waits for ReadyForQuery; a server
// that is starting up or recovering answers an error instead.
func (p *Postgres) serves() error {
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	var startup bytes.Buffer
	startup.Write([]byte{0, 0, 0, 0, 0, 3, 0, 0}) // length, protocol 3.0
	startup.WriteString("user\x00postgres\x00database\x00postgres\x00\x00")
	b := startup.Bytes()
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	if _, err := c.Write(b); err != nil {
		return err
	}
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if n < 0 || n > 1<<20 {
			return fmt.Errorf("message %q of %d bytes", hdr[0], n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(c, body); err != nil {
			return err
		}
		switch hdr[0] {
		case 'Z': // ReadyForQuery
			c.Write([]byte{'X', 0, 0, 0, 4}) // Terminate
			return nil
		case 'E':
			return fmt.Errorf("postgres: %s", pgErrorMessage(body))
		case 'R':
			if len(body) < 4 || binary.BigEndian.Uint32(body) != 0 {
				return fmt.Errorf("postgres asks for authentication (%x)", body)
			}
		}
	}
}

// pgErrorMessage returns the M (message) field of an ErrorResponse body.
func pgErrorMessage(body []byte) string {
	for _, f := range bytes.Split(body, []byte{0}) {
		if len(f) > 1 && f[0] == 'M' {
			return string(f[1:])
		}
	}
	return string(body)
}
