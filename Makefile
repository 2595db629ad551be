# Nubes: one Makefile for the whole workspace (see README.md).
SHELL := /bin/bash
GO    ?= go
PKGS  := $(shell $(GO) list -m -f "{{.Path}}/...")

.PHONY: run test test-short bench bench-sqlite lint fmt images helm e2e

## run: the whole suite on 127.0.0.1:8080 with embedded FerretDB and NATS (data in .data/)
run:
	$(GO) run ./deploy/devstack

## test: lint, then every module's tests with the race detector (FerretDB and NATS as processes outside the race build, one of each per run: pkg/devinfra/testinfra)
# TEST_P: test binaries at once; with the store and the broker in the
# run's own processes a binary mostly waits on them, so 4 on 2 cores.
TEST_P ?= 4
# TEST_PARALLEL: a binary's t.Parallel tests at once (go test's default is
# GOMAXPROCS, 2 here); most of them wait on the store, the broker or a
# cache's lifetime rather than on a core.
TEST_PARALLEL ?= 8
# -trimpath: the race build's objects carry no checkout path, so a fresh
# clone reuses the build cache of another one.
test: lint
	$(GO) test -race -trimpath -count=1 -timeout 20m -p $(TEST_P) -parallel $(TEST_PARALLEL) $(PKGS)

## test-short: the same tests without the race detector (faster while editing)
test-short:
	$(GO) test -count=1 $(PKGS)

## bench: board through HTTP beside the raw driver, on FerretDB over a throwaway PostgreSQL (installed from Debian's packages when missing; FerretDB runs equality filters there), at 10,000 and 100,000 posts; last line is JSON
BENCH_FLAGS  ?= -duration 20s -store-timeout 60s
BENCH_PG_DIR ?= /tmp/nubes-bench-pg
bench:
	@url=$$(scripts/postgres.sh start $(BENCH_PG_DIR)) && \
	$(GO) run ./test/bench -postgresql "$$url" $(BENCH_FLAGS); rc=$$?; \
	scripts/postgres.sh stop $(BENCH_PG_DIR); rm -rf $(BENCH_PG_DIR); exit $$rc

## bench-sqlite: create and get on the embedded FerretDB over SQLite at 1,000 and 100,000 posts (lookups by _id use the index devinfra adds; any other filter decodes every document there, so list and stat are left to make bench)
BENCH_SQLITE_FLAGS ?= -duration 10s -posts 1000,100000 -ops create,get
bench-sqlite:
	$(GO) run ./test/bench $(BENCH_SQLITE_FLAGS)

## lint: gofmt and go vet must be clean
lint:
	@unformatted=$$(gofmt -l pkg services deploy test 2>/dev/null); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)

fmt:
	gofmt -w pkg services deploy test

## The services that get an image, a chart entry and an e2e container. A new
## service joins here, in helm/nubes/values.yaml (services.<name>.enabled)
## and in test/e2e/stack_test.go (services).
SERVICES     ?= board identity mailer dashboard secret repository monitoring cost-analysis notification inventory config
BASE_IMAGE   ?= gcr.io/distroless/static:nonroot
IMAGE_PREFIX ?= nubes/
IMAGE_TAG    ?= dev
E2E_TAG      ?= e2e
HELM_VERSION ?= v4.3.1
HELM         := .tools/helm-$(HELM_VERSION)/helm

## images: static binaries (CGO off) copied onto BASE_IMAGE, one image $(IMAGE_PREFIX)<service>:$(IMAGE_TAG) each; BASE_IMAGE=scratch where nothing can be pulled
images:
	BASE_IMAGE=$(BASE_IMAGE) IMAGE_PREFIX=$(IMAGE_PREFIX) IMAGE_TAG=$(IMAGE_TAG) scripts/images.sh $(SERVICES)

## helm: helm lint, render with default and production values, decode every manifest strictly (test/helm)
helm: $(HELM)
	$(HELM) lint --strict helm/nubes
	$(HELM) lint --strict helm/nubes -f helm/nubes/values-production.yaml
	$(HELM) template nubes helm/nubes >/dev/null
	$(HELM) template nubes helm/nubes -f helm/nubes/values-production.yaml >/dev/null
	cd test/helm && HELM=$(abspath $(HELM)) GOWORK=off $(GO) test -count=1 ./...

# helm from the Go module proxy, once per version (.tools/ is not committed).
$(HELM):
	GOBIN=$(abspath $(dir $(HELM))) GOWORK=off CGO_ENABLED=0 $(GO) install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)

## e2e: images FROM scratch ($(IMAGE_PREFIX)<name>:$(E2E_TAG)), then the testcontainers suite (needs a Docker engine, no registry)
e2e:
	BASE_IMAGE=scratch IMAGE_PREFIX=$(IMAGE_PREFIX) IMAGE_TAG=$(E2E_TAG) scripts/images.sh --e2e $(SERVICES)
	cd test/e2e && GOWORK=off $(GO) vet ./...
	cd test/e2e && NUBES_E2E=1 NUBES_E2E_IMAGE_PREFIX=$(IMAGE_PREFIX) NUBES_E2E_IMAGE_TAG=$(E2E_TAG) \
		TESTCONTAINERS_RYUK_DISABLED=$${TESTCONTAINERS_RYUK_DISABLED:-true} \
		TESTCONTAINERS_HOST_OVERRIDE=$${TESTCONTAINERS_HOST_OVERRIDE:-localhost} \
		GOWORK=off $(GO) test -count=1 -timeout 14m -v ./...
