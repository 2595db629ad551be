// Package e2e is the container end-to-end suite of Nubes: every service
// image (built FROM scratch by `make e2e`, nothing is pulled), FerretDB and
// NATS built from their Go modules (deploy/ferretdb, deploy/nats), and the
// suite's SMTP sink and plugin server (./fixture), started with
// testcontainers-go on one Docker network and driven through the public
// API as a client would.
//
// The tests run only when NUBES_E2E=1, as `make e2e` sets it. The module is
// not in go.work: testcontainers' dependencies (Docker client,
// OpenTelemetry, gRPC) would raise versions shared with the services in
// the workspace, and an ambiguous genproto import breaks their build. Run
// it with GOWORK=off (the Makefile does).
//
// The services the suite runs are the list in stack_test.go; tests that
// need a service not in that list skip with "needs <name> service"
// (pending_test.go). Ryuk is off (its image cannot be pulled), so a run
// killed half-way leaves its containers behind:
//
//	docker rm -f $(docker ps -aq --filter label=io.nubes.e2e=1)
//	docker network prune --filter label=io.nubes.e2e=1
package e2e
