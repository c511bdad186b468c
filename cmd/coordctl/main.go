// Command coordctl is coordkit's operator tool: it decodes and mints IDs,
// inspects and force-releases locks of every kind, lists leased worker IDs,
// registers ID tags, and serves IDs over HTTP with an operator page.
//
//	coordctl id decode 1541815603606036480 --layout twitter
//	coordctl id next --kind snowflake --worker 3 -n 5
//	coordctl lock inspect orders:42 [--kind hash|simple|redlock|zk|etcd] [--json]
//	coordctl lock release orders:42 --force
//	coordctl workers list orders --backend zk
//	coordctl tags add orders invoices
//	coordctl serve --listen 127.0.0.1:8080
//
// Connection flags (--redis, --redis-master, --redis-password, --redis-tls,
// --zk, --etcd) fall back to the environment variables COORDKIT_REDIS,
// COORDKIT_REDIS_MASTER, COORDKIT_REDIS_PASSWORD, COORDKIT_REDIS_TLS,
// COORDKIT_ZK and COORDKIT_ETCD. Commands that print state take --json; --version prints the
// build's version. Exit status: 0 success, 1 failure (e.g. a server is
// unreachable), 2 bad usage (a malformed address included).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
