# coordkit: `make test` installs the servers (if missing), vets and runs
# every test with the race detector against real Redis and ZooKeeper.

GO ?= go

.PHONY: deps test vet demo bench

deps:
	./scripts/deps.sh

vet:
	$(GO) vet ./...

test: deps vet
	$(GO) test -race -count=1 -timeout 20m ./...

# The main job on a fresh machine: the ticket-stock race under every strategy
# and the withdrawal flow. Each example starts the servers it needs on
# loopback ports in a temporary directory and stops them when it ends.
demo: deps
	$(GO) run ./examples/tickets
	@echo
	$(GO) run ./examples/withdrawal

# coordkit against its peer libraries, every suite, medians of 3 rounds of
# 2 s; bench/ has its own go.mod. Takes a while: not part of test or demo.
bench: deps
	cd bench && $(GO) run . -rounds 3 -dur 2s
