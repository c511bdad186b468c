package testserver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// A data directory made by mariadb-install-db or initdb costs a second of
// CPU and two of wall time, and make test starts dozens of SQL servers: each
// kind of directory is made once per machine and set of binaries, as a
// template that every later server copies (cp -a, a tenth of the time).
//
// A template lives in $TMPDIR/coordkit-templates/<kind>-<key>/data, where
// key hashes the set-up command, its arguments and the binaries' sizes and
// modification times (an upgraded server gets a new template). It is made
// under an exclusive flock on <kind>-<key>.lock (test processes run side by
// side), in a scratch directory renamed into place once the command
// succeeded: a template that exists is whole. The template's set-up log
// stays beside it.

// templateDir returns the template for the set-up that build performs,
// making it first if no process has. build gets an empty directory (owned
// by cred's user when not nil) and must leave the data directory in
// <dir>/data, its logs beside it. bins are the binaries whose identity goes
// into the key, args the set-up's arguments.
func templateDir(kind string, cred *syscall.Credential, bins, args []string, build func(dir string) error) (string, error) {
	h := sha256.New()
	for _, b := range bins {
		st, err := os.Stat(b)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d %d\n", b, st.Size(), st.ModTime().UnixNano())
	}
	fmt.Fprintf(h, "%s\n%d\n", strings.Join(args, "\x00"), os.Geteuid())
	root := filepath.Join(os.TempDir(), "coordkit-templates")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", err
	}
	name := kind + "-" + hex.EncodeToString(h.Sum(nil))[:16]
	dir := filepath.Join(root, name)
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(filepath.Join(dir, "data")); err == nil {
		return dir, nil
	}
	scratch, err := os.MkdirTemp(root, name+".building-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(scratch, 0o755); err != nil {
		os.RemoveAll(scratch)
		return "", err
	}
	if err := chownTree(scratch, cred); err != nil {
		os.RemoveAll(scratch)
		return "", err
	}
	if err := build(scratch); err != nil {
		removeKeepingLogs(scratch)
		return "", err
	}
	os.RemoveAll(dir) // a directory without data: left by an interrupted rename
	if err := os.Rename(scratch, dir); err != nil {
		os.RemoveAll(scratch)
		return "", err
	}
	return dir, nil
}

// copyData copies the template's data directory into dir as dir/data,
// keeping owners and modes (PostgreSQL refuses a data directory that others
// can read).
func copyData(template, dir string) error {
	out, err := exec.Command("cp", "-a", filepath.Join(template, "data"), filepath.Join(dir, "data")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("testserver: copying the data directory template %s: %v: %s", template, err, strings.TrimSpace(string(out)))
	}
	return nil
}
