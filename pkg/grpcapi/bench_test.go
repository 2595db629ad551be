package grpcapi

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/nubes-io/nubes/pkg/auth"
	"google.golang.org/grpc/metadata"
)

// BenchmarkGet sets one get over gRPC beside the same get over HTTP, on
// the same server and operation, 32 callers, clients in the same process
// reading the answer (no store: what the transports cost). Besides the
// time per op it reports the process's CPU time per op (cpu-us/op:
// server and client together), which a machine shared with other work
// disturbs less than the wall clock.
//
//	go test -run '^$' -bench Get -benchtime 3s ./pkg/grpcapi
func BenchmarkGet(b *testing.B) {
	f := start(b, 0)
	token := f.token(b, auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hs := &http.Server{Handler: f.http.Handler()}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	url := "http://" + ln.Addr().String() + "/svc/v1/thing/get"
	body := `{"thing_id": "t1", "size": 5, "tags": {"a": "b"}}`

	b.Run("http", func(b *testing.B) {
		defer cpuPerOp(b)()
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		b.SetParallelism(16) // 32 callers on 2 cores, as make bench
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode != http.StatusOK {
					b.Fatal(err, resp)
				}
				// Read as a client does, as the gRPC side's answer is.
				var out map[string]any
				err = json.NewDecoder(resp.Body).Decode(&out)
				resp.Body.Close()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("grpc", func(b *testing.B) {
		defer cpuPerOp(b)()
		m := f.method(b, "/spaceone.api.svc.v1.Thing/get")
		ctx := metadata.AppendToOutgoingContext(context.Background(), "token", token)
		b.SetParallelism(16) // 32 callers on 2 cores, as make bench
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				in := dynamicpb.NewMessage(m.In)
				in.Set(m.In.Fields().ByName("thing_id"), protoreflect.ValueOfString("t1"))
				in.Set(m.In.Fields().ByName("size"), protoreflect.ValueOfInt64(5))
				out := dynamicpb.NewMessage(m.Out)
				if err := f.conn.Invoke(ctx, m.FullMethod(), in, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// cpuPerOp reports the process's CPU time (user and system) per op from
// now until the returned function runs.
func cpuPerOp(b *testing.B) func() {
	before := cpuTime()
	return func() {
		b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-us/op")
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
