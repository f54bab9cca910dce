# One entry point per job. `make check` is what CI runs (via .ci/run).
GO      ?= go
BIN     ?= bin
VERSION ?= 0.1.0
LDFLAGS := -s -w -X github.com/microvms/microvms/agentd.Version=$(VERSION)

.PHONY: all gen drift fmt vet lint test faults check build bench fuzz clean demo

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

# The fault suite: the real agentd killed mid-upload and restarted, a client
# killed mid-upload, ENOSPC mid-file and mid-tar on a tmpfs in a private mount
# namespace, a stream cut and resumed, slow unauthenticated bodies, cut and
# refused archives. Strict: a fault it cannot inject (no root, no unshare, no
# curl) fails instead of skipping. It runs as part of check.
FAULTS := ^(TestFault|TestSlowOpenBodiesAreBounded|TestTarFailedMemberKeepsExistingFile|TestTarWithoutEndMarkerIs400AndLandsNothing|TestRangedReadStopsWhenTheClientGoes|TestDeviceNodesAreNeverReplaced|TestTarSparseMemberStaysSparse)
faults:
	AGENTD_FAULTS_STRICT=1 $(GO) test -count=1 -run '$(FAULTS)' ./agentd/

check: drift fmt vet lint test faults

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

clean:
	rm -rf $(BIN)
