# One entry point per job. `make check` is what CI runs (via .ci/run).
GO      ?= go
BIN     ?= bin
VERSION ?= 0.1.0
LDFLAGS := -s -w -X github.com/microvms/microvms/agentd.Version=$(VERSION)

.PHONY: all gen drift fmt vet lint test check build bench fuzz clean demo

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

# The main job on one machine: microvm run --local builds, launches, runs
# `uname -a` in a MicroVM on the in-process emulator, reports the cost and
# tears down.
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

clean:
	rm -rf $(BIN)
