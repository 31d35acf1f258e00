# gpuviz — build, run and test the otelcol-gpuviz distribution.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

# go-nvml is cgo; its header marks some entry points deprecated, which is noise here.
export CGO_ENABLED := 1
export CGO_CFLAGS := -O2 -g -Wno-deprecated-declarations

# Targets run one at a time even under -j (or MAKEFLAGS=-j): test needs build
# before unit (and two go generate at once would race), and prometheus and
# chromium would run apt-get at once, which apt's lock refuses. go and ocb
# use every core themselves.
.NOTPARALLEL:

OCB_VERSION := v0.165.0
TOOLS := $(CURDIR)/.tools
OCB := $(TOOLS)/ocb-$(OCB_VERSION)/builder
DIST := _build/otelcol-gpuviz

.PHONY: all build run test lint generate check-generated unit smoke bench accuracy gpu-check hardware-report loadgen prometheus demo e2e clean \
	web web-check chromium screenshots soak

all: build

# ocb, pinned, installed into .tools/ on first use.
$(OCB):
	GOBIN=$(dir $@) go install go.opentelemetry.io/collector/cmd/builder@$(OCB_VERSION)

# Regenerates metadata code and documentation.md from metadata.yaml (mdatagen
# is a Go tool pinned in go.mod).
generate:
	go generate ./...

build: generate $(OCB)
	$(OCB) --config builder-config.yaml

# The main job: build, then run on the quickstart config (real GPUs through
# NVML, or the labelled simulation where there are none). GOMEMLIMIT goes
# with the config's memory_limiter (limit_mib 512): docs/reliability.md.
run: build
	GOMEMLIMIT=$${GOMEMLIMIT:-400MiB} $(DIST) --config examples/quickstart/config.yaml

lint:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './_build/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	go vet ./...

# Generated files must match metadata.yaml: documentation.md is never hand-edited.
GENERATED = find . -path ./_build -prune -o -path ./.tools -prune -o -type f \( -name 'generated_*' -o -name documentation.md \
	-o -path '*/internal/metadata/testdata/*' \) -print0 | sort -z | xargs -0 sha256sum
check-generated:
	@before=$$($(GENERATED)); go generate ./...; after=$$($(GENERATED)); \
	if [ "$$before" != "$$after" ]; then \
		echo "generated files did not match metadata.yaml: they are regenerated now; review and commit them"; \
		diff <(echo "$$before") <(echo "$$after") || true; exit 1; fi

unit:
	go test -race -count=1 ./...

smoke: build
	scripts/smoke-test.sh

# build before unit: the examples' configs are validated by the built
# collector (TestCollectorConfigsValidate skips without it).
test: lint check-generated build unit smoke

bench:
	go test -run '^$$' -bench . -benchmem ./...

# Every batching scenario through the receiver's scraper and the processor
# on a virtual clock, scored against the engines' ground truth; rewrites the
# tables of docs/accuracy.md. SEEDS are the reported ones (tuning used 1-5).
SEEDS ?= 100,101,102,103,104
accuracy:
	go test -tags accuracy -count=1 -run TestAccuracy -timeout 30m ./processor/gpuvizprocessor \
		-args -accuracy.doc=$(CURDIR)/docs/accuracy.md -accuracy.seeds=$(SEEDS)

loadgen:
	go build -o _build/loadgen ./examples/loadgen

# Prometheus from Debian's package (2.42: exemplar storage, promtool).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
prometheus:
	@command -v prometheus >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# Chromium from Debian's package, for the browser test of the view and
# `make screenshots` (driven through the DevTools protocol; no downloaded browser).
chromium:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

# The gpuviz_view page: npm ci from the lockfile (uPlot and esbuild pinned),
# then esbuild into web/dist, which is committed and embedded with go:embed.
WEB := extension/gpuvizviewextension/web
web:
	cd $(WEB) && npm ci --no-audit --no-fund --loglevel=error && node build.mjs

# The committed web/dist must be exactly what web/src builds.
web-check:
	cd $(WEB) && npm ci --no-audit --no-fund --loglevel=error
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; cd $(WEB) && node build.mjs --out "$$tmp/dist" >/dev/null; \
	if ! diff -r dist "$$tmp/dist" >/dev/null; then diff -r dist "$$tmp/dist" | head -20; \
		echo "web/dist is not what web/src builds: run make web and commit web/dist"; exit 1; fi; \
	if ! git diff --quiet HEAD -- dist || [ -n "$$(git ls-files --others --exclude-standard -- dist)" ]; then \
		git status --short -- dist; echo "web/dist differs from what is committed: commit it"; exit 1; fi; \
	echo "web/dist is what web/src builds, and is committed"

# docs/images/view.png and view-requests.png: the view of the collector on the
# simulated steady scenario with the load generator, in headless Chromium at 1600x1000.
screenshots: build loadgen chromium
	go run ./cmd/gpuviz-screenshots --out docs/images

# Jaeger, Prometheus, the collector on simulated GPUs and the load generator
# on loopback; Ctrl-C stops them all. Jaeger is built once into ~/.cache/gpuviz.
demo: build loadgen prometheus
	go run ./cmd/gpuviz-demo --jaeger "$$(scripts/jaeger.sh)"

# The demo stack for a minute, asserted through Jaeger's and Prometheus' APIs
# and scored against the engine's truth; then the same window replayed
# in-process by the accuracy harness must score the same.
E2E_OUT := $(CURDIR)/_build/e2e
e2e: build loadgen prometheus chromium
	rm -rf $(E2E_OUT)
	GPUVIZ_JAEGER="$$(scripts/jaeger.sh)" GPUVIZ_E2E_OUT=$(E2E_OUT) go test -tags e2e -count=1 -v -timeout 20m ./e2e/
	go test -tags accuracy -count=1 -v -run TestInProcessMatchesLive ./processor/gpuvizprocessor -args -accuracy.live=$(E2E_OUT)

# The collector for 12 minutes at 5,000 spans/s with faults cycling on the
# simulated GPUs: RSS slope, goroutines, held spans, nothing lost
# (docs/reliability.md). Outside e2e: too long for every CI run.
soak: build loadgen
	scripts/soak.sh

# On a machine with an NVIDIA GPU and PyTorch: checks the receiver's signals
# against a known workload (see README, "Checking on real hardware").
gpu-check:
	scripts/gpu-check

# On a machine with NVIDIA GPUs: NVML call latency, the sampling clock's and a
# pynvml loop's CPU cost, and gpu-check, into _build/hardware-report/report.md
# (see docs/hardware.md).
hardware-report:
	scripts/hardware-report

clean:
	rm -rf _build
