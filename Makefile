# etcd-pilot. `make demo` runs the main job, `make test` runs every test; both build what
# they need (Kubernetes, etcd and Helm binaries from Go modules) into bin/ on first use.

SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The operator's link flags. The Dockerfile builds with the same (test/packaging checks it).
OPERATOR_LDFLAGS := -s -w -X github.com/etcd-pilot/etcd-pilot/internal/cli.Version=$(VERSION)
LDFLAGS := $(OPERATOR_LDFLAGS) -X github.com/etcd-pilot/etcd-pilot/internal/localcli.Version=$(VERSION)
# The operator's image, for docker-build and install-manifest.
IMG ?= etcd-pilot:$(VERSION)
# docker or podman (the first found).
CONTAINER_TOOL ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)
CONTROLLER_TOOLS_VERSION := v0.23.0
CONTROLLER_GEN := bin/tools/controller-gen-$(CONTROLLER_TOOLS_VERSION)/controller-gen
# The unit and envtest suites run with the race detector: the operator's passes run calls
# concurrently, and a race there ends the process (it did, in ObserveEndpoints).
GO_TEST_FLAGS ?= -count=1 -race -timeout 30m
# The end-to-end suite takes about 32 minutes on 2 cores; the limit leaves room for a slow
# machine without letting a hung test eat the CI run.
E2E_TEST_FLAGS ?= -count=1 -timeout 55m
# The real-node lane: its first run builds the kubelet, kube-proxy, containerd and CoreDNS.
LANE_TEST_FLAGS ?= -count=1 -v -timeout 40m

.DEFAULT_GOAL := help

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  %-16s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Main

.PHONY: demo
demo: build ## Run the main job: local Kubernetes, the operator, a 3-member etcd cluster serving, upgraded to 3.7.3, backed up and restored into a new cluster (KEEP=1 keeps it).
	hack/demo.sh

.PHONY: test
test: tools ## Run every test (unit, golden, Helm parity, envtest against a real kube-apiserver).
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" HELM="$$(hack/build-helm.sh)" go test $(GO_TEST_FLAGS) $$(go list ./... | grep -v -e /test/e2e -e /test/lane)
	@# The alert rules and dashboards, against Prometheus's own libraries: a module of its own.
	cd test/promrules && go test $(GO_TEST_FLAGS) ./...
	@# The end-to-end suite runs alone: on 2 cores, sharing them with the other suites starves
	@# etcd's heartbeats and causes elections that have nothing to do with the operator.
	go test $(E2E_TEST_FLAGS) ./test/e2e
	@# The real-node lane (root only; it says why it skips elsewhere): real kubelets, containerd,
	@# runc, CNI, kube-proxy and CoreDNS; hack/build-node.sh builds and installs them first.
	go test $(LANE_TEST_FLAGS) ./test/lane

SOAK_DURATION ?= 30m
SOAK_SEED ?= 0
# Setup, the settling after the last fault and the checks take minutes beyond the duration.
SOAK_TIMEOUT ?= 90m

.PHONY: soak
soak: build ## On the local cluster: the chaos soak for SOAK_DURATION (default 30m; SOAK_SEED replays a run's faults): 3 clusters, clients checked for linearizability, faults at random, invariants read from etcd.
	flock /tmp/etcd-pilot-e2e.lock go test ./test/e2e -count=1 -run '^TestChaosSoak$$' -v -timeout $(SOAK_TIMEOUT) -soak.duration $(SOAK_DURATION) -soak.seed $(SOAK_SEED)

FUZZTIME ?= 30s
# Every fuzz target and its package. Their seed corpora (f.Add and testdata/fuzz/) run in
# `make test` as plain tests.
FUZZ_TARGETS := \
	./test/fuzz:FuzzDesiredFromJSON ./test/fuzz:FuzzDesiredAdmissible \
	./internal/values:FuzzComputeChartValues ./internal/postrender:FuzzApply \
	./internal/chartcontract:FuzzCheck ./internal/plan:FuzzIntentJSON \
	./internal/plan/membership:FuzzDecideRecords

.PHONY: fuzz
fuzz: ## Fuzz each target for FUZZTIME (default 30s); a crash is kept under the package's testdata/fuzz/ and fails the run.
	for t in $(FUZZ_TARGETS); do \
		echo "== $${t%%:*} $${t##*:}"; \
		go test "$${t%%:*}" -run '^$$' -fuzz "^$${t##*:}$$" -fuzztime $(FUZZTIME) -parallel 1; \
	done

.PHONY: bench
bench: tools ## Run the benchmarks (render cold and warm, steady-state reconcile).
	KUBEBUILDER_ASSETS="$$(hack/envtest-assets.sh)" go test -run '^$$' -bench . -benchmem ./...

##@ Build

.PHONY: build
build: ## Build bin/etcd-pilot (the operator) and bin/etcd-pilot-local (the local cluster).
	CGO_ENABLED=0 go build -trimpath -ldflags "$(OPERATOR_LDFLAGS)" -o bin/etcd-pilot .
	CGO_ENABLED=0 go build -trimpath -ldflags "$(LDFLAGS)" -o bin/etcd-pilot-local ./cmd/etcd-pilot-local

.PHONY: docker-build
docker-build: ## Build the operator's image IMG (default etcd-pilot:$(VERSION)) from the Dockerfile with docker or podman (CONTAINER_TOOL).
	@if [ -z "$(CONTAINER_TOOL)" ]; then \
	  echo "make docker-build needs docker or podman, and neither is installed (set CONTAINER_TOOL to another builder)."; \
	  echo "The image is the Dockerfile's: the static binary of 'make build' on a distroless base, run as user 65532."; exit 1; fi
	@if [ "$$(basename "$(CONTAINER_TOOL)")" = docker ] && ! "$(CONTAINER_TOOL)" info >/dev/null 2>&1; then \
	  echo "make docker-build: $(CONTAINER_TOOL) is installed but no Docker engine answers ('docker info' fails): start one, or use CONTAINER_TOOL=podman."; exit 1; fi
	"$(CONTAINER_TOOL)" build --build-arg VERSION=$(VERSION) -t $(IMG) .

.PHONY: install-manifest
install-manifest: ## Write dist/install.yaml (config/default) and dist/install-namespaced.yaml (config/namespaced) for VERSION, with the operator's image IMG.
	go run ./hack/installmanifest -kubectl "$$(hack/build-kube.sh kubectl)/kubectl" -image "$(IMG)" -version "$(VERSION)" -o dist

.PHONY: tools
tools: ## Build the test binaries from Go modules into bin/ (cached).
	hack/envtest-assets.sh >/dev/null
	hack/build-kube.sh >/dev/null
	hack/build-etcd.sh 3.5.35 >/dev/null
	hack/build-etcd.sh 3.6.15 >/dev/null
	hack/build-etcd.sh 3.7.3 >/dev/null
	hack/build-helm.sh >/dev/null
	hack/build-minio.sh >/dev/null
	hack/build-certmanager.sh >/dev/null

.PHONY: envtest-assets
envtest-assets: ## Build kube-apiserver and etcd for envtest; prints KUBEBUILDER_ASSETS.
	@hack/envtest-assets.sh

$(CONTROLLER_GEN):
	GOBIN=$(CURDIR)/$(dir $(CONTROLLER_GEN)) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate the CRD and RBAC from markers (and their copies in the operator chart).
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	@# CEL sees only declared fields: declare the keys spec.chart.values may not set, with their rules.
	go run ./hack/chartvalues config/crd/bases/etcdpilot.io_etcdclusters.yaml
	$(CONTROLLER_GEN) rbac:roleName=etcd-pilot-manager paths=./controllers/... output:rbac:artifacts:config=config/rbac
	@# Namespaced mode: the same rules as a Role, minus the cluster-scoped ones.
	go run ./hack/namespacedrbac config/rbac/role.yaml config/namespaced internal/manager/zz_permissions.go
	@# The operator's chart carries copies of the CRDs and of the roles' rules (a test checks them).
	rm -f charts/etcd-pilot/crds/*.yaml
	cp config/crd/bases/*.yaml charts/etcd-pilot/crds/
	cp config/rbac/role.yaml config/rbac/editor_role.yaml config/rbac/viewer_role.yaml config/rbac/metrics_reader_role.yaml charts/etcd-pilot/files/rbac/
	cp config/namespaced/role.yaml charts/etcd-pilot/files/rbac/namespaced_role.yaml
	cp config/namespaced/cluster_role.yaml charts/etcd-pilot/files/rbac/namespaced_cluster_role.yaml

.PHONY: verify
verify: generate manifests lint ## Regenerate and fail if anything generated differs from what is committed.
	@if [ -n "$$(git status --porcelain -- api config charts/etcd-pilot/crds charts/etcd-pilot/files/rbac)" ]; then \
	  echo "generated files are out of date; run 'make generate manifests' and commit:"; \
	  git status --porcelain -- api config charts/etcd-pilot/crds charts/etcd-pilot/files/rbac; git diff --stat -- api config charts/etcd-pilot/crds charts/etcd-pilot/files/rbac; exit 1; fi

.PHONY: lint
lint: ## go vet and gofmt.
	go vet ./...
	@bad=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$bad" ]; then echo "gofmt would change: $$bad"; exit 1; fi

.PHONY: bench-scale
bench-scale: build ## On the local cluster: 1000 EtcdClusters that cannot be scheduled, in 1 and in 50 namespaces: operator memory, time until all are applied, steady-state requests per cluster.
	flock /tmp/etcd-pilot-e2e.lock go test ./test/e2e -count=1 -run '^$$' -bench 'BenchmarkThousandClusters' -benchtime 1x -timeout 60m -v

.PHONY: bench-ten
bench-ten: build ## On the local cluster: 10 real 3-member clusters at once: time to all Available and a rolling upgrade of all of them (per cluster, read from etcd), operator CPU and memory.
	flock /tmp/etcd-pilot-e2e.lock go test ./test/e2e -count=1 -run '^$$' -bench 'BenchmarkTenClusters' -benchtime 1x -timeout 40m -v

.PHONY: bench-e2e
# The benchmarks of one cluster at a time; bench-scale and bench-ten run the others.
BENCH_E2E := BenchmarkTimeToAvailable|BenchmarkMembershipStep|BenchmarkUpgrade|BenchmarkTLSTimeToAvailable|BenchmarkCARotation|BenchmarkPeerTLSSwitch|BenchmarkRestoreTimeToAvailable

bench-e2e: build ## On the local cluster: its start time, time to Available for 3, 5, 7 members, one scale-out step, one replacement, one upgrade, and the TLS and restore timings (with their timelines).
	flock /tmp/etcd-pilot-e2e.lock go test ./test/e2e -count=1 -run '^$$' -bench '^($(BENCH_E2E))$$' -benchtime 1x -timeout 40m -v
