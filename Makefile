# One entry point per job. `make check` is what CI runs (via .ci/run).
GO      ?= go
BIN     ?= bin
VERSION ?= 0.1.0
LDFLAGS := -s -w -X github.com/microvms/microvms/agentd.Version=$(VERSION)

.PHONY: all gen drift fmt vet lint lint-api test test-clients check build bench fuzz clean demo

all: build

# The TypeScript client's pinned npm tools (openapi-typescript, tsc), installed
# from its committed lockfile.
TS_DIR := clients/typescript
$(TS_DIR)/node_modules/.installed: $(TS_DIR)/package-lock.json
	cd $(TS_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Regenerate gen/, docs/schema.json and the Python client (schema/) and the
# TypeScript client's types (openapi-typescript) from api/.
gen: $(TS_DIR)/node_modules/.installed
	$(GO) run ./schema/cmd/gen
	cd $(TS_DIR) && npm run --silent gen

# The drift gate: regenerating must change nothing that is committed, and must
# leave no generated file git does not know about.
GENERATED := gen docs clients/python/microvms_agentd clients/typescript/src
drift: gen
	git diff --exit-code -- $(GENERATED)
	@untracked=$$(git ls-files --others --exclude-standard -- $(GENERATED)); \
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

# api/openapi.yaml under Redocly (recommended-strict) and Spectral (oas), and
# docs/schema.json under a strict JSON Schema 2020-12 reader (Ajv). The npm
# tools are pinned by tools/lint/package-lock.json and installed by `npm ci`.
LINT_DIR := tools/lint
$(LINT_DIR)/node_modules/.installed: $(LINT_DIR)/package-lock.json
	cd $(LINT_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

lint-api: $(LINT_DIR)/node_modules/.installed
	cd $(LINT_DIR) && REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
	  node_modules/.bin/redocly lint --config redocly.yaml --format=stylish ../../api/openapi.yaml
	cd $(LINT_DIR) && node_modules/.bin/spectral lint --fail-severity=hint --ruleset .spectral.yaml ../../api/openapi.yaml
	cd $(LINT_DIR) && node --test test/

# The generated clients against a real agentd each test starts on 127.0.0.1
# (identity repair off): python3 -m unittest, then tsc and node --test.
CLIENTS_AGENTD := $(abspath $(BIN))/clients-test/agentd
test-clients: $(TS_DIR)/node_modules/.installed
	$(GO) build -o $(CLIENTS_AGENTD) ./cmd/agentd
	cd clients/python && AGENTD_BIN=$(CLIENTS_AGENTD) PYTHONDONTWRITEBYTECODE=1 python3 -m unittest -v
	cd $(TS_DIR) && node_modules/.bin/tsc -p . && AGENTD_BIN=$(CLIENTS_AGENTD) node --test dist/test/

check: drift fmt vet lint lint-api test test-clients

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
