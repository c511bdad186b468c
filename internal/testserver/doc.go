// Package testserver starts real Redis, ZooKeeper, MariaDB, PostgreSQL and
// etcd servers for coordkit's tests and benchmarks, and injects faults into them.
//
// Every server runs as a child process on a free 127.0.0.1 port in a
// temporary directory, and is stopped by its PID: by Close, by the test's
// Cleanup, and (through PR_SET_PDEATHSIG) by the kernel if the test binary
// itself dies. Nothing is ever looked up or killed by name.
//
// Servers:
//
//   - Redis: one redis-server without persistence by default (AOF optional);
//     Kill, Pause/Resume (SIGSTOP/SIGCONT), Restart on the same port with or
//     without its data, Snapshot and RestartFromSnapshot (an older RDB).
//   - StartRedisMasters: N independent masters (for Redlock).
//   - RedisCluster: three cluster-enabled masters with all 16384 slots
//     assigned; it returns once every node reports cluster_state:ok.
//   - RedisSentinel: a master, one replica and one Sentinel monitoring them;
//     its client is a failover client, and Failover promotes the replica.
//   - ZooKeeper: Debian's zookeeper jars started with QuorumPeerMain, alone or
//     as a 3-node ensemble on loopback; per node Kill and Restart. Dial
//     returns a connection routed through a Proxy per server, so that
//     ZKConn.Expire can expire its session for real (by partitioning it for
//     longer than the session timeout); DialNode reaches one node only.
//     NewZooKeeperEnsembleWith sets the ensemble's syncLimit and can route
//     the links between nodes through proxies, so that PartitionPeers and
//     Isolate cut a node off from the others while its clients still reach
//     it (a follower cut off from its leader).
//   - MariaDB: mariadbd on a data directory made by mariadb-install-db,
//     with the database coordkit; PostgreSQL: postgres on a cluster made by
//     initdb (both run as nobody when the tests run as root, since they
//     refuse root). The data directory is a copy of a template that
//     mariadb-install-db or initdb makes once per machine and set of
//     binaries, in $TMPDIR/coordkit-templates (a copy takes a tenth of the
//     time of a set-up, and make test starts dozens). Kill (a crash: SIGKILL, to PostgreSQL's backends too),
//     Pause/Resume (SIGSTOP/SIGCONT, backends included), Start and Restart
//     on the same port with the committed data. DSN and DSNAt (through a
//     Proxy) name the server for github.com/go-sql-driver/mysql and
//     github.com/jackc/pgx/v5/stdlib; this package imports no driver.
//   - Etcd: Debian's etcd server (package etcd-server, 3.4) alone or as a
//     3-member cluster on loopback, with a 50 ms heartbeat and a 500 ms
//     election timeout (so a 1 s lease is granted as asked), never the
//     service the package installs; per member Kill, Pause/Resume
//     (SIGSTOP/SIGCONT), Start and Restart on the same ports from its data
//     directory. Its clients are etcd's (in the etcd module, which this
//     package does not import); Proxies puts a Proxy in front of each member.
//   - Proxy: a TCP fault proxy between a client and any server: pass, added
//     latency, dropping new connections, cutting existing ones, and
//     black-holing (connections accepted, bytes never delivered), both ways
//     or one way only (a half-open link).
//
// Output: a server's own output goes to a log file in its directory (that
// of mariadb-install-db and initdb beside the template), never to the test's output. When a
// server fails to start, the error names that file, which is kept, and
// quotes its end (the set-up commands: the lines that report an error).
// The helpers that take a testing.TB route the process-wide loggers (slog's
// default, which every coordkit client built without WithLogger uses, the
// log package, go-redis's logger) and go-zookeeper's lines about DialT's
// connections to that test's output while it runs (logtest.Capture): they
// are shown with the test's own lines when it fails, never on stderr.
//
// Constructors come in two forms: StartX(t, ...) fails the test on error and
// registers Close with t.Cleanup; NewX(...) returns an error and leaves Close
// to the caller (TestMain and the bench program use these).
//
// A missing redis-server, java, ZooKeeper jar, mariadbd, postgres or etcd is an error that names the
// command that installs it (see InstallHint); tests never skip silently.
package testserver
