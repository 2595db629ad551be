package server

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/wire"
)

type benchGetReq struct {
	RecordID string `json:"record_id" v:"required,max=64"`
}

type benchRecord struct {
	RecordID  string         `json:"record_id"`
	Name      string         `json:"name"`
	Tags      map[string]any `json:"tags"`
	DomainID  string         `json:"domain_id"`
	CreatedAt wire.Time      `json:"created_at"`
}

// BenchmarkServeGet is what the kit costs a get with the store taken
// away: routing, the token, strict decoding and validation, the answer
// in JSON, logging context and metrics, all in one goroutine.
func BenchmarkServeGet(b *testing.B) {
	signer, err := auth.GenerateSigner()
	if err != nil {
		b.Fatal(err)
	}
	verifier, err := auth.NewVerifier(auth.JWKSOf(signer))
	if err != nil {
		b.Fatal(err)
	}
	token, err := signer.Issue(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	rec := benchRecord{Name: "a record", Tags: map[string]any{"env": "bench"}, DomainID: "domain-a", CreatedAt: wire.T(time.Now())}
	op := api.Op[benchGetReq, benchRecord]{Path: "/bench/v1/record/get", Access: auth.Roles(auth.DomainAdmin),
		Handle: func(_ context.Context, _ *auth.Principal, r *benchGetReq) (*benchRecord, error) {
			out := rec
			out.RecordID = r.RecordID
			return &out, nil
		}}
	srv, err := New(Options{Name: "bench", Auth: verifier, Logger: slog.New(slog.DiscardHandler)}, op)
	if err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/bench/v1/record/get", strings.NewReader(`{"record_id": "record-0123456789ab"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("%d %s", w.Code, w.Body)
		}
	}
}
