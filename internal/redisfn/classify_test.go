package redisfn

import (
	"errors"
	"fmt"
	"testing"
)

// replyErr is a Redis error reply, as go-redis returns one.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// TestClassify: which errors settle EVALSHA for good, which make a call
// load the library again, which turn FCALL off; matched on the reply's
// own prefix, so that a script's error that quotes a key name never
// passes for the server's.
func TestClassify(t *testing.T) {
	cases := []struct {
		err                        error
		decisive, missing, refused bool
	}{
		{replyErr("ERR unknown command 'FUNCTION', with args beginning with: 'LOAD'"), true, false, true},
		{replyErr("ERR unknown subcommand 'LOAD'. Try FUNCTION HELP."), true, false, false},
		{replyErr("NOPERM this user has no permissions to run the 'function|load' command"), true, false, false},
		{replyErr("NOPERM this user has no permissions to run the 'fcall' command"), true, false, true},
		{replyErr("NOPERM this user has no permissions to access one of the keys used as arguments"), true, false, false},
		{replyErr("ERR Error registering functions: ..."), true, false, false},
		{fmt.Errorf("redisfn: %w: coordkit_v2", errOtherCode), true, false, false},
		{replyErr("ERR Function not found"), false, true, false},
		{replyErr("LOADING Redis is loading the dataset in memory"), false, false, false},
		{replyErr("BUSY Redis is busy running a script."), false, false, false},
		{replyErr("OOM command not allowed when used memory > 'maxmemory'."), false, false, false},
		{replyErr("CLUSTERDOWN The cluster is down"), false, false, false},
		{replyErr("lock: hold count of coordkit:lock:{ERR Function not found} is not a number"), false, false, false},
		{replyErr("lock: fencing counter x:{ERR unknown command} is not a number"), false, false, false},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false, false, false},
		{errors.New("ERR Function not found"), false, false, false}, // not a reply: go-redis's own
	}
	for _, c := range cases {
		if got := decisive(c.err); got != c.decisive {
			t.Errorf("decisive(%q) = %v", c.err, got)
		}
		if got := missing(c.err); got != c.missing {
			t.Errorf("missing(%q) = %v", c.err, got)
		}
		if got := refused(c.err); got != c.refused {
			t.Errorf("refused(%q) = %v", c.err, got)
		}
	}
}
