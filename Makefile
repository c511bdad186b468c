# coordkit: `make test` installs the servers (if missing) and the pinned Go
# tools (staticcheck, gotestsum: scripts/tools.sh, into bin/), vets every
# module (go vet and staticcheck), runs every test with the race detector
# against real Redis, ZooKeeper, MariaDB, PostgreSQL and etcd, then the chaos
# checker's short profile (chaos/, a module of its own).

GO ?= go

.PHONY: deps tools test test-stress vet demo bench chaos chaos-short chaos-mutants contrib

deps:
	./scripts/deps.sh

tools:
	GO=$(GO) ./scripts/tools.sh

# go vet and staticcheck in every module make test tests: the root module
# (the library), cmd/coordctl and examples/ (modules of their own: they need
# more than the library's dependencies, client_golang and SQL drivers),
# etcd/ (the etcd backend, whose client brings gRPC), contrib/* and chaos
# (with and without its chaosbroken tag); the list is scripts/vet.sh's, and
# scripts/vet.sh DIR... vets others.
vet:
	GO=$(GO) ./scripts/vet.sh

# Each step (vet, the packages of each module, chaos-short) runs even if an
# earlier one failed; scripts/test.sh prints a line per package as it ends,
# a failing test's own lines, and a summary at the end, and fails if any
# step did. STEPS="vet packages" and PKGS=./lock select (see the script).
test: deps
	GO=$(GO) CHAOS_SEED=$(CHAOS_SEED) ./scripts/test.sh

# make test 5 times in a row beside a CPU burner on every core, then once
# pinned to one core (taskset -c 0); each run's time and result in a
# summary (scripts/test-stress.sh). About an hour on 2 cores: not part of
# test.
test-stress: deps
	MAKE=$(MAKE) ./scripts/test-stress.sh

# The adapters, each a module of its own (so that their dependencies stay
# out of the module graph of users who import only the library).
contrib:
	GO=$(GO) ./scripts/vet.sh contrib/*/
	set -e; for m in contrib/*/; do (cd $$m && $(GO) test -race -count=1 ./...); done

# The chaos checker's own tests, then every lock backend and the ID workload
# in client processes under a seeded nemesis, histories checked: the short
# profile (seven backends, at most 4 minutes on 2 cores), then etcd's short
# run (about 40 s).
# The seed (default 1) is printed; CHAOS_SEED=n draws another schedule.
CHAOS_SEED ?= 1
chaos-short:
	GO=$(GO) ./scripts/vet.sh chaos chaos:chaosbroken
	cd chaos && $(GO) test -race -count=1 ./...
	cd chaos && $(GO) run . -profile short -seed $(CHAOS_SEED)
	cd chaos && $(GO) run . -profile short -backend etcd -seed $(CHAOS_SEED)

# The long profile: at most 30 minutes on a 2-core machine. Not part of test.
# First the model-based test of the Redis lock family in its long mode (a
# minute per lock, about 5 minutes; its short mode runs in `make test`).
chaos: deps
	COORDKIT_MODEL_LONG=1 $(GO) test -race -count=1 -timeout 30m ./internal/modeltest
	cd chaos && $(GO) run . -profile long -seed $(CHAOS_SEED)

# The main job on a fresh machine: the ticket-stock race under every strategy,
# the withdrawal flow and the transfer by Saga, TCC and XA (examples/ is a module of its own: it needs the SQL
# drivers that the library leaves to its users). Each example starts the servers it needs on
# loopback ports in a temporary directory and stops them when it ends.
demo: deps
	cd examples && $(GO) run ./tickets
	@echo
	cd examples && $(GO) run ./withdrawal
	@echo
	cd examples && $(GO) run ./transfer

# coordkit against its peer libraries, every suite, medians of 3 rounds of
# 2 s; bench/ has its own go.mod. Takes a while: not part of test or demo.
bench: deps
	cd bench && $(GO) run . -rounds 3 -dur 2s

# The mutant catalog (chaos/mutants/*.patch, README in chaos/): each
# realistic bug applied to a scratch copy of HEAD, built, and run under the
# checker on the backends its header names, one at a time; prints the table
# and the kill rate. Not part of test. MUTANTS=01,02 selects,
# MUTANT_PROFILE (short), MUTANT_SEEDS ("1"), MUTANT_TIMEOUT (4m per run),
# MUTANT_OUT (results dir) pass through the environment.
chaos-mutants:
	cd chaos && $(GO) run ./mutants
