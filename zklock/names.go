package zklock

import (
	"net/url"
	"strconv"
	"strings"
)

// MaxKeyLen is the longest key, in bytes, that Obtain accepts.
const MaxKeyLen = 1024

// protectedPrefix starts every lock node's name, as in Curator's protected
// mode: "_c_" + a per-attempt UUID + "-" + kind + "-" + sequence.
const protectedPrefix = "_c_"

// kind is the type of a lock node, the part of its name before the sequence.
type kind string

const (
	kindLock  kind = "lock"  // exclusive (Client's mutex)
	kindWrite kind = "write" // exclusive (write side of a read-write lock)
	kindRead  kind = "read"  // shared (read side of a read-write lock)
)

// exclusive reports whether a node of kind k excludes every other node.
// Unknown kinds (nodes written by someone else) count as exclusive.
func (k kind) exclusive() bool { return k != kindRead }

// escapeKey turns key into one znode name: url.PathEscape (which escapes
// '/', '%', control characters and every non-ASCII byte), with the names
// ZooKeeper reserves ("." and "..") escaped as well. It is injective.
func escapeKey(key string) (string, error) {
	if key == "" || len(key) > MaxKeyLen {
		return "", ErrInvalidKey
	}
	switch key {
	case ".":
		return "%2E", nil
	case "..":
		return "%2E%2E", nil
	}
	return url.PathEscape(key), nil
}

// validRoot reports whether p is an absolute path with non-empty segments,
// none of them "." or "..", and no trailing slash.
func validRoot(p string) bool {
	if len(p) < 2 || p[0] != '/' || p[len(p)-1] == '/' {
		return false
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for _, r := range seg {
			if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
				return false
			}
		}
	}
	return true
}

// node is one child of a key's parent, parsed from its name.
type node struct {
	name string
	guid string // the protected-mode UUID, "" if the name has none
	kind kind
	seq  int64
}

// parseNode parses "_c_<guid>-<kind>-<seq>" (and, for nodes written by other
// clients, any "<prefix><kind>-<seq>" whose sequence is the 10 digits
// ZooKeeper appends). ok is false for names without a sequence.
func parseNode(name string) (n node, ok bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || len(name)-i-1 < 10 {
		return node{}, false
	}
	seq, err := strconv.ParseInt(name[i+1:], 10, 64)
	if err != nil {
		return node{}, false
	}
	n = node{name: name, seq: seq}
	rest := name[:i]
	j := strings.LastIndexByte(rest, '-')
	n.kind = kind(rest[j+1:])
	if j >= 0 && strings.HasPrefix(rest, protectedPrefix) {
		n.guid = rest[len(protectedPrefix):j]
	}
	return n, true
}
