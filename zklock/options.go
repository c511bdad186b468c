package zklock

import (
	"time"

	"github.com/go-zookeeper/zk"
)

// DefaultRoot is the parent of every key's znode unless WithRoot says otherwise.
const DefaultRoot = "/coordkit/locks"

// Option configures a Client.
type Option func(*options)

type options struct {
	root           string
	acl            []zk.ACL
	sessionTimeout time.Duration
}

func defaultOptions() options {
	return options{
		root: DefaultRoot,
		acl:  zk.WorldACL(zk.PermAll),
	}
}

// WithRoot sets the path under which every key gets its parent znode.
// Missing nodes of the path are created on demand (persistent). Default:
// DefaultRoot, "/coordkit/locks".
func WithRoot(path string) Option { return func(o *options) { o.root = path } }

// WithACL sets the ACL of every znode the Client creates (root path, key
// parents and lock nodes). For a digest ACL (zk.DigestACL(zk.PermAll, user,
// password)) the connection must have authenticated first with
// conn.AddAuth("digest", []byte(user+":"+password)); go-zookeeper re-sends it
// on every reconnection. Every Client locking the same keys needs the
// permissions to create and delete children of, and set data on, the key
// parents. Default: zk.WorldACL(zk.PermAll).
func WithACL(acl []zk.ACL) Option { return func(o *options) { o.acl = acl } }

// WithSessionTimeout tells the Client the session timeout of its conn (the
// one given to zk.Connect; ZooKeeper clamps it to [2, 20] ticks by default,
// so pass the negotiated value if it differs). A lease whose connection has
// been down for a third of it is then reported lost; see the package
// documentation for why a third. go-zookeeper waits a second before dialling
// again once it has tried every server (with a standalone server: at every
// reconnection), so with d under about 4 s any blip loses the leases.
// Default: 0, unknown: a lease is reported lost as soon as its connection is
// lost, the conservative choice.
func WithSessionTimeout(d time.Duration) Option {
	return func(o *options) { o.sessionTimeout = d }
}
