# arbiter: controlled A/B experiments on LLM serving engines.
GO      ?= go
BIN     := bin
DB      ?= arbiter.db
# VERSION is stored with every experiment and printed by arbiter version.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS := -X github.com/arbiterlab/arbiter/internal/version.version=$(VERSION)

.PHONY: all build image demo demo-docker test lint bench calibrate kernels model fuzz docs clean

all: build

## build: the arbiter CLI and the refserve reference engine, into bin/
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/arbiter ./cmd/arbiter
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/refserve ./cmd/refserve

## image: the refserve image FROM scratch, built on the Docker daemon ($DOCKER_HOST, else
## the local socket) through the Engine API: a static refserve and nothing else, no registry
IMAGE ?= arbiter/refserve:latest
image: build
	CGO_ENABLED=0 $(GO) build -tags arbiter_static -o $(BIN)/refserve-static ./cmd/refserve
	$(BIN)/arbiter image build --binary $(BIN)/refserve-static --tag $(IMAGE)

## demo-docker: the same A/B with every arm a container of that image
demo-docker: image
	$(BIN)/arbiter run examples/quickstart-docker.yaml --db $(DB)

## demo: the decisive BF16_INDEX_K A/B on local refserve processes, into ./arbiter.db
demo: build
	$(BIN)/arbiter run examples/quickstart-launches.yaml --db $(DB)

## test: the whole test suite under the race detector, but for the statistics'
## own tests: numeric and on one goroutine, they run without it (four times faster), while
## the tests of the packages that call them concurrently run it under the detector. Most
## parallel tests wait on engines, daemons and Slurm rather than compute: four at once in
## a package keep two cores busy (-p, the packages at once, stays at the cores' count)
test:
	$(GO) test -race -parallel 4 -timeout 20m $$($(GO) list ./... | grep -v '/stats$$')
	$(GO) test -timeout 20m ./stats

## docs: the command reference at the end of docs/commands.md, from the command tree (a test
## fails while it is stale)
docs:
	$(GO) test ./cmd/arbiter -run '^TestCommandReferenceIsCurrent$$' -update-docs

## lint: gofmt, go vet, staticcheck, and deadcode with the tests as roots (no function that
## neither the commands nor the tests reach); the last two installed from the module proxy
## into $(BIN)/lint
STATICCHECK_VERSION ?= v0.8.2
DEADCODE_VERSION ?= v0.52.0
lint:
	test -x $(BIN)/lint/staticcheck || GOBIN=$(CURDIR)/$(BIN)/lint $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	test -x $(BIN)/lint/deadcode || GOBIN=$(CURDIR)/$(BIN)/lint $(GO) install golang.org/x/tools/cmd/deadcode@$(DEADCODE_VERSION)
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "$$out"; echo "gofmt: the files above are not formatted"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/lint/staticcheck ./...
	@out=$$($(BIN)/lint/deadcode -test ./...); if [ -n "$$out" ]; then echo "$$out"; echo "deadcode: the functions above are reached by nothing"; exit 1; fi

## bench: every benchmark (speed and memory targets live here), and the driver and the
## whole arbiter run against their peer, vegeta, in the module of its own under bench/ (the
## whole run in two iterations, one in each order; its CPU profile goes to $TMPDIR)
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	cd bench && $(GO) test -run '^$$' -bench 'DriverVsVegeta' -benchmem .
	cd bench && $(GO) test -run '^$$' -bench 'FullPathVsVegeta' -benchtime 2x -benchmem .

## calibrate: simulate the verdict's claims under nulls whose launches differ (every cell of
## launches per arm, intra-launch correlation, base rate and speed CV; 2,000 verdicts each)
## and bisections under the same launches (2,000 each), and write the tables to
## docs/calibration/launches.md and docs/calibration/bisect.md
calibrate:
	mkdir -p docs/calibration
	$(GO) test -count=1 -timeout 60m -run '^TestLaunchFamilyCalibration$$' -v ./verdict -calibrate $(CURDIR)/docs/calibration/launches.md
	$(GO) test -count=1 -timeout 60m -run '^TestBisectCalibration$$' -v ./bisect -calibrate $(CURDIR)/docs/calibration/bisect.md

## fuzz: a short fuzzing pass over each parser and detector, and over simulated records
## for the verdict's invariants (FUZZTIME each)
FUZZTIME ?= 20s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./arms
	$(GO) test -run '^$$' -fuzz '^FuzzRedactedSource$$' -fuzztime $(FUZZTIME) ./arms
	$(GO) test -run '^$$' -fuzz '^FuzzRedactorEncodedForms$$' -fuzztime $(FUZZTIME) ./arms
	$(GO) test -run '^$$' -fuzz '^FuzzParseBisect$$' -fuzztime $(FUZZTIME) ./arms
	$(GO) test -run '^$$' -fuzz '^FuzzExpandGPUs$$' -fuzztime $(FUZZTIME) ./arms
	$(GO) test -run '^$$' -fuzz '^FuzzServerInfoSettings$$' -fuzztime $(FUZZTIME) ./arms
	$(GO) test -run '^$$' -fuzz '^FuzzGrammarParse$$' -fuzztime $(FUZZTIME) ./arms
	$(GO) test -run '^$$' -fuzz '^FuzzComparePins$$' -fuzztime $(FUZZTIME) ./orchestrator
	$(GO) test -run '^$$' -fuzz '^FuzzVerdictInvariants$$' -fuzztime $(FUZZTIME) ./verdict
	$(GO) test -run '^$$' -fuzz '^FuzzVerdictOfDamagedRecords$$' -fuzztime $(FUZZTIME) ./verdict
	$(GO) test -run '^$$' -fuzz '^FuzzHodgesLehmannMatchesSort$$' -fuzztime $(FUZZTIME) ./stats
	$(GO) test -run '^$$' -fuzz '^FuzzAttest$$' -fuzztime $(FUZZTIME) ./orchestrator
	$(GO) test -run '^$$' -fuzz '^FuzzMetadataString$$' -fuzztime $(FUZZTIME) ./gguf
	$(GO) test -run '^$$' -fuzz '^FuzzTokenizerRoundTrip$$' -fuzztime $(FUZZTIME) ./gguf
	$(GO) test -run '^$$' -fuzz '^FuzzReadSafetensors$$' -fuzztime $(FUZZTIME) ./gguf
	$(GO) test -run '^$$' -fuzz '^FuzzParseToolChoice$$' -fuzztime $(FUZZTIME) ./openai
	$(GO) test -run '^$$' -fuzz '^FuzzSSE$$' -fuzztime $(FUZZTIME) ./workload
	$(GO) test -run '^$$' -fuzz '^FuzzChunkDecoder$$' -fuzztime $(FUZZTIME) ./workload
	$(GO) test -run '^$$' -fuzz '^FuzzTokenTimes$$' -fuzztime $(FUZZTIME) ./store
	$(GO) test -run '^$$' -fuzz '^FuzzTraceReader$$' -fuzztime $(FUZZTIME) ./workload
	$(GO) test -run '^$$' -fuzz '^FuzzMooncakeReader$$' -fuzztime $(FUZZTIME) ./workload
	$(GO) test -run '^$$' -fuzz '^FuzzBurstGPTReader$$' -fuzztime $(FUZZTIME) ./workload
	$(GO) test -run '^$$' -fuzz '^FuzzVerifyReader$$' -fuzztime $(FUZZTIME) ./workload
	$(GO) test -run '^$$' -fuzz '^FuzzRedactRaw$$' -fuzztime $(FUZZTIME) ./workload
	$(GO) test -run '^$$' -fuzz '^FuzzLabelHeaderIsTheMapsJSON$$' -fuzztime $(FUZZTIME) ./workload
	$(GO) test -run '^$$' -fuzz '^FuzzDSMLLeak$$' -fuzztime $(FUZZTIME) ./plugins/detectors
	$(GO) test -run '^$$' -fuzz '^FuzzText$$' -fuzztime $(FUZZTIME) ./internal/inert
	$(GO) test -run '^$$' -fuzz '^FuzzMarkdown$$' -fuzztime $(FUZZTIME) ./internal/inert
	$(GO) test -run '^$$' -fuzz '^FuzzByteSize$$' -fuzztime $(FUZZTIME) ./internal/bytesize
	$(GO) test -run '^$$' -fuzz '^FuzzToolcallSchema$$' -fuzztime $(FUZZTIME) ./plugins/detectors
	$(GO) test -run '^$$' -fuzz '^FuzzParseStatsCount$$' -fuzztime $(FUZZTIME) ./cmd/arbiter
	$(GO) test -run '^$$' -fuzz '^FuzzSafe$$' -fuzztime $(FUZZTIME) ./internal/ui
	$(GO) test -run '^$$' -fuzz '^FuzzFindWord$$' -fuzztime $(FUZZTIME) ./cmd/arbiter-detector-example
	$(GO) test -run '^$$' -fuzz '^FuzzReadCUDASettings$$' -fuzztime $(FUZZTIME) ./cmd/refserve
	$(GO) test -run '^$$' -fuzz '^FuzzToolCallFragments$$' -fuzztime $(FUZZTIME) ./cmd/refserve
	$(GO) test -run '^$$' -fuzz '^FuzzMessageUnmarshal$$' -fuzztime $(FUZZTIME) ./openai
	$(GO) test -run '^$$' -fuzz '^FuzzContainerName$$' -fuzztime $(FUZZTIME) ./orchestrator/runtime
	$(GO) test -run '^$$' -fuzz '^FuzzParseGPUs$$' -fuzztime $(FUZZTIME) ./orchestrator/runtime
	$(GO) test -run '^$$' -fuzz '^FuzzDonnerAdjusted$$' -fuzztime $(FUZZTIME) ./stats
	$(GO) test -run '^$$' -fuzz '^FuzzFirth$$' -fuzztime $(FUZZTIME) ./stats
	$(GO) test -run '^$$' -fuzz '^FuzzFisherExact$$' -fuzztime $(FUZZTIME) ./stats
	$(GO) test -run '^$$' -fuzz '^FuzzIntervals$$' -fuzztime $(FUZZTIME) ./stats
	$(GO) test -run '^$$' -fuzz '^FuzzLosses$$' -fuzztime $(FUZZTIME) ./stats
	$(GO) test -run '^$$' -fuzz '^FuzzMcNemar$$' -fuzztime $(FUZZTIME) ./stats
	$(GO) test -run '^$$' -fuzz '^FuzzNonInferiority$$' -fuzztime $(FUZZTIME) ./stats
	$(GO) test -run '^$$' -fuzz '^FuzzRiskRatio$$' -fuzztime $(FUZZTIME) ./stats
	$(GO) test -run '^$$' -fuzz '^FuzzStratified$$' -fuzztime $(FUZZTIME) ./stats
	$(GO) test -run '^$$' -fuzz '^FuzzQuery$$' -fuzztime $(FUZZTIME) ./store
	$(GO) test -run '^$$' -fuzz '^FuzzRepetition$$' -fuzztime $(FUZZTIME) ./plugins/detectors
	$(GO) test -run '^$$' -fuzz '^FuzzFindLoopMatchesScan$$' -fuzztime $(FUZZTIME) ./plugins/detectors
	$(GO) test -run '^$$' -fuzz '^FuzzFinishAnomaly$$' -fuzztime $(FUZZTIME) ./plugins/detectors
	$(GO) test -run '^$$' -fuzz '^FuzzFirstDivergence$$' -fuzztime $(FUZZTIME) ./plugins/detectors
	$(GO) test -run '^$$' -fuzz '^FuzzValidate$$' -fuzztime $(FUZZTIME) ./openai/toolschema
	$(GO) test -run '^$$' -fuzz '^FuzzChatRequest$$' -fuzztime $(FUZZTIME) ./cmd/refserve
	$(GO) test -run '^$$' -fuzz '^FuzzArgumentsForSchema$$' -fuzztime $(FUZZTIME) ./cmd/refserve
	$(GO) test -run '^$$' -fuzz '^FuzzLineWriter$$' -fuzztime $(FUZZTIME) ./orchestrator/runtime
	$(GO) test -run '^$$' -fuzz '^FuzzParseStat$$' -fuzztime $(FUZZTIME) ./orchestrator/runtime
	$(GO) test -run '^$$' -fuzz '^FuzzMetricSamples$$' -fuzztime $(FUZZTIME) ./orchestrator
	$(GO) test -run '^$$' -fuzz '^FuzzParseSlurmJob$$' -fuzztime $(FUZZTIME) ./orchestrator/runtime

## kernels: the CUDA testbed (needs nvcc; see kernels/)
kernels:
	bash kernels/build.sh

## model: arbiter's tool-calling model, on a GPU machine with torch (toolmodel/README.md):
## the corpus (bin/arbiter, built where Go is), MODEL_MINUTES of training, the GGUF file
MODEL_DIR     ?= build/model
MODEL_MINUTES ?= 6
model:
	$(BIN)/arbiter model corpus --out $(MODEL_DIR)/corpus
	python3 toolmodel/train.py --corpus $(MODEL_DIR)/corpus --out $(MODEL_DIR)/toolcall.safetensors \
		--log $(MODEL_DIR)/train-log.json --minutes $(MODEL_MINUTES)
	$(BIN)/arbiter model gguf --checkpoint $(MODEL_DIR)/toolcall.safetensors --corpus $(MODEL_DIR)/corpus \
		--out $(MODEL_DIR)/toolcall.gguf

clean:
	rm -rf $(BIN)
