package app

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/grpcapi"
	"github.com/nubes-io/nubes/pkg/server"
)

// TestServeGRPC: the gRPC server runs beside the HTTP one under Serve and
// stops with it; Serve returns once both are down.
func TestServeGRPC(t *testing.T) {
	signer, _ := auth.GenerateSigner()
	v, err := auth.NewVerifier(auth.JWKSOf(signer))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Name: "t", Logger: slog.New(slog.DiscardHandler), Auth: v},
		api.Op[struct{}, api.Empty]{Path: "/svc/v1/thing/ping", Access: auth.Public(),
			Handle: func(context.Context, *auth.Principal, *struct{}) (*api.Empty, error) { return &api.Empty{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	g, err := grpcapi.New(srv, grpcapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	gln, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, srv, ln, GRPC(g, gln)) }()

	conn, err := grpc.NewClient(gln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if r, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: "spaceone.api.svc.v1.Thing"}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v %v", r, err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return")
	}
	if _, err := http.Get("http://" + ln.Addr().String() + "/healthz"); err == nil {
		t.Error("HTTP still serves after Serve returned")
	}
	if c, err := net.DialTimeout("tcp", gln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("gRPC still listens after Serve returned")
	}
}
