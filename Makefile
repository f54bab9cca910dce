# One entry point per job. `make check` is what CI runs (via .ci/run).
GO      ?= go
BIN     ?= bin
VERSION ?= 0.1.0
LDFLAGS := -s -w -X github.com/microvms/microvms/agentd.Version=$(VERSION)

.PHONY: all gen drift fmt vet lint test check build bench fuzz mutate clean demo

all: build

# Regenerate gen/ and docs/schema.json from api/.
gen:
	$(GO) run ./schema/cmd/gen

# The drift gate: regenerating must change nothing that is committed, and must
# leave no generated file git does not know about.
drift: gen
	git diff --exit-code -- gen docs
	@untracked=$$(git ls-files --others --exclude-standard -- gen docs); \
	if [ -n "$$untracked" ]; then echo "untracked generated files:"; echo "$$untracked"; exit 1; fi

# gofmt must have nothing to say about any tracked or new Go file.
fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go'; git ls-files --others --exclude-standard '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint:
	$(GO) run honnef.co/go/tools/cmd/staticcheck ./...

test:
	$(GO) test -count=1 ./...

check: drift fmt vet lint test

# agentd for the host, and the static linux/arm64 binary the MicroVM image needs.
build:
	$(GO) build -o $(BIN)/ ./cmd/...
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/linux-arm64/agentd ./cmd/agentd

# The main job on one machine: agentd on loopback, bootstrapped through its run
# hook, driven by the microvm CLI.
demo:
	bash scripts/demo.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# Every fuzz target of every package, FUZZTIME each (go test allows one
# target per run). The seed corpora also run as plain tests in `make test`.
FUZZTIME ?= 30s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$target"; \
	    $(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 2s $$pkg || exit 1; \
	  done; \
	done

# Mutation testing with go-gremlins (pinned in tools.go), one package at a
# time and one worker, so a 2-core machine shared with other work keeps up;
# a per-package table of killed, lived, timed-out and not-covered mutants and
# every survivor go to stdout, the raw reports to bin/mutate. Slow (minutes a
# package, agentd far more), so not part of check.
MUTATE_PKGS    ?= agentd/internal/linerange client/cost agentd/internal/tarx client/control client client/sandbox cmd/microvm agentd
MUTATE_WORKERS ?= 1
mutate:
	$(GO) run ./internal/mutate -pkgs '$(MUTATE_PKGS)' -workers $(MUTATE_WORKERS) -out $(BIN)/mutate

clean:
	rm -rf $(BIN)
