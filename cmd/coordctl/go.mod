module github.com/coordkit/coordkit/cmd/coordctl

go 1.26.0

replace github.com/coordkit/coordkit => ../..

require (
	github.com/coordkit/coordkit v0.0.0-00010101000000-000000000000
	github.com/go-zookeeper/zk v1.0.4
	github.com/redis/go-redis/v9 v9.23.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
