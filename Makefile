# coordkit: `make test` installs the servers (if missing), vets and runs
# every test with the race detector against real Redis and ZooKeeper.

GO ?= go

.PHONY: deps test vet

deps:
	./scripts/deps.sh

vet:
	$(GO) vet ./...

test: deps vet
	$(GO) test -race -count=1 -timeout 20m ./...
