package testserver

import (
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

// MariaDBDatabase is the database every MariaDB server starts with (created
// by its init file); DSN connects to it.
const MariaDBDatabase = "coordkit"

// SQLOption configures a MariaDB or PostgreSQL server.
type SQLOption func(*sqlOptions)

type sqlOptions struct {
	args []string
}

// WithServerArgs adds command-line arguments to the server: mariadbd
// options ("--innodb-lock-wait-timeout=2") or postgres ones ("-c",
// "deadlock_timeout=100ms"). Default: none.
func WithServerArgs(args ...string) SQLOption {
	return func(o *sqlOptions) { o.args = append(o.args, args...) }
}

// MariaDB is one mariadbd process (Debian's mariadb-server) on 127.0.0.1,
// with a fresh data directory made by mariadb-install-db, root without a
// password, and the database MariaDBDatabase. InnoDB writes its log at each
// commit and flushes it once a second (innodb_flush_log_at_trx_commit=2):
// Kill loses no committed write, only an OS crash would. Its temporary
// files go to a tmpdir of its own (mariadbd deletes its tmpdir's #sql*
// files at start-up). A failed start leaves the logs of the install and
// of the server in the directory its error names. Its methods are safe for
// concurrent use.
type MariaDB struct{ sqlServer }

// NewMariaDB copies a data directory into a new temporary directory (made
// by mariadb-install-db once per machine, see templateDir), starts
// mariadbd on a free loopback port and waits until it greets clients. The
// caller must Close it. A missing mariadbd or mariadb-install-db is
// ErrMissingBinary, naming the package to install.
func NewMariaDB(opts ...SQLOption) (*MariaDB, error) {
	var o sqlOptions
	for _, opt := range opts {
		opt(&o)
	}
	bin, err := findBinary("mariadbd", "/usr/sbin", "mariadb-server") // /usr/sbin: off a user's PATH
	if err != nil {
		return nil, err
	}
	install, err := findBinary("mariadb-install-db", "", "mariadb-server")
	if err != nil {
		return nil, err
	}
	dir, err := tempDir("mariadb")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	// Every mariadbd, the one mariadb-install-db runs included, deletes at
	// start-up each #sql* file in its tmpdir (/tmp by default): the
	// temporary tables of any other server starting or running. With a
	// shared /tmp, parallel test processes failed each other's installs
	// ("ERROR: 1051 Unknown table 'mysql.tmp_user_sys'", 1 run in 3 of six
	// concurrent installs). Each server has a tmpdir of its own.
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	common := []string{"--innodb-log-file-size=16M", "--innodb-buffer-pool-size=32M"}
	installArgs := append([]string{"--no-defaults", "--auth-root-authentication-method=normal", "--skip-test-db"}, common...)
	if os.Geteuid() == 0 {
		installArgs = append(installArgs, "--user=root")
	}
	common = append(common, "--tmpdir="+tmp)
	tmpl, err := templateDir("mariadb", nil, []string{bin, install}, installArgs, func(scratch string) error {
		// The install's own mariadbd gets a tmpdir of its own too.
		if err := os.Mkdir(filepath.Join(scratch, "tmp"), 0o755); err != nil {
			return err
		}
		return runAs(nil, scratch, install, append(installArgs,
			"--datadir="+filepath.Join(scratch, "data"), "--tmpdir="+filepath.Join(scratch, "tmp"))...)
	})
	if err == nil {
		err = copyData(tmpl, dir)
	}
	if err != nil {
		removeKeepingLogs(dir)
		return nil, err
	}
	initFile := filepath.Join(dir, "init.sql")
	if err := os.WriteFile(initFile, []byte("CREATE DATABASE IF NOT EXISTS "+MariaDBDatabase+";\n"), 0o644); err != nil {
		os.RemoveAll(dir)
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
			"--no-defaults", "--datadir=" + data, "--port=" + strconv.Itoa(port),
			"--bind-address=127.0.0.1", "--socket=" + filepath.Join(dir, "mariadb.sock"),
			"--pid-file=" + filepath.Join(dir, "mariadb.pid"), "--init-file=" + initFile,
			"--innodb-flush-log-at-trx-commit=2", "--skip-log-bin", "--max-connections=300",
		}, common...)
		if os.Geteuid() == 0 {
			args = append(args, "--user=root")
		}
		args = append(args, o.args...)
		m := &MariaDB{sqlServer{port: port, dir: dir, proc: &process{
			name: "mariadbd :" + strconv.Itoa(port), bin: bin, args: args,
			dir: dir, log: filepath.Join(dir, "mariadb.log"),
		}}}
		m.ready = m.greets
		if last = m.start(); last == nil {
			return m, nil
		}
		m.proc.kill()
		if !strings.Contains(last.Error(), "in use") {
			break
		}
	}
	removeKeepingLogs(dir)
	return nil, last
}

// StartMariaDB is NewMariaDB for tests: it fails tb on error and closes the
// server when the test ends.
func StartMariaDB(tb testing.TB, opts ...SQLOption) *MariaDB {
	tb.Helper()
	m, err := NewMariaDB(opts...)
	return must(tb, m, err)
}

// DSN returns a data source name for github.com/go-sql-driver/mysql that
// connects as root to MariaDBDatabase, with params (e.g.
// "clientFoundRows=true") appended.
func (m *MariaDB) DSN(params ...string) string { return m.DSNAt(m.Addr(), params...) }

// DSNAt is DSN through another address, such as a Proxy's in front of the
// server.
func (m *MariaDB) DSNAt(addr string, params ...string) string {
	dsn := "root@tcp(" + addr + ")/" + MariaDBDatabase
	if len(params) > 0 {
		dsn += "?" + strings.Join(params, "&")
	}
	return dsn
}

// greets reads the server's handshake packet: the server sends it once it
// accepts clients, after its init file ran. An error packet (0xff, such as
// "too many connections") is not ready.
func (m *MariaDB) greets() error {
	c, err := net.DialTimeout("tcp", m.Addr(), time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return err
	}
	n := int(binary.LittleEndian.Uint32(append(hdr[:3:3], 0)))
	if n == 0 || n > 1<<16 {
		return fmt.Errorf("handshake of %d bytes", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return err
	}
	if body[0] != 10 { // protocol version 10; 0xff is an error packet
		return fmt.Errorf("handshake: %q", strings.TrimSpace(string(body[min(len(body), 3):])))
	}
	return nil
}
