# The two set-up commands are `make run` and `make test` (README.md).
GO      ?= go
BIN     := .cache/bin
TOOLS   := .cache/tools/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/etcdns/etcdns.Version=$(VERSION)

.PHONY: run test build tools vet unit integration compat docs fuzz bench clean

## run: build both programs and serve examples/ on 127.0.0.1:1053 (Ctrl-C stops)
run: build
	hack/run.sh

## test: everything CI runs: vet, unit tests, integration tests against real processes
test: tools vet unit integration

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/publisher ./cmd/publisher
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/dnsd ./cmd/dnsd

tools:
	hack/tools.sh

vet:
	$(GO) vet ./...
	$(GO) vet -tags integration ./integration/...
	$(GO) vet -tags bench ./bench/...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi

unit:
	$(GO) test -count=1 ./...

integration:
	$(GO) test -count=1 -tags integration -timeout 30m ./integration/...

## compat: regenerate docs/compatibility.md (dnsd, CoreDNS's etcd plugin on the same keys, its kubernetes plugin on the same objects)
compat: tools
	$(GO) test -count=1 -tags integration -run '^TestEndToEnd$$' ./integration/ -args -compat=$(CURDIR)/docs/compatibility.md

## docs: regenerate docs/configuration.md from config.yaml and config/config.go (after adding a setting)
docs:
	$(GO) generate ./config

## fuzz: each fuzz target for FUZZTIME (default 5m), one after another; seeds in <pkg>/testdata/fuzz.
## FUZZFLAGS adds go test flags: FUZZFLAGS=-parallel=1 leaves a shared machine some room.
FUZZTIME  ?= 5m
FUZZFLAGS ?=
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzKeyRoundTrip$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./keys
	$(GO) test -run '^$$' -fuzz '^FuzzParseKey$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./keys
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./keys
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeFast$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./keys
	$(GO) test -run '^$$' -fuzz '^FuzzEncodeFast$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./keys
	$(GO) test -run '^$$' -fuzz '^FuzzHostAddr$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./keys
	$(GO) test -run '^$$' -fuzz '^FuzzServeDNS$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./server
	$(GO) test -run '^$$' -fuzz '^FuzzTCPStream$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./server
	$(GO) test -run '^$$' -fuzz '^FuzzRecord$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./server
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeAnswer$$' -fuzztime $(FUZZTIME) $(FUZZFLAGS) ./server/skydns

## bench: every benchmark script, each with its peers measured in the same run; regenerates BENCHMARKS.md
bench: tools
	bench/run.sh

clean:
	rm -rf $(BIN) .cache/run
