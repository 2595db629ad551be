package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/nubes-io/nubes/pkg/testkit/cfctl"
)

// TestGRPCAsCfctl calls the devstack's gRPC address as cfctl does:
// reflection only, JSON in, token in metadata.
func TestGRPCAsCfctl(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	grpcAddr := make(chan string, 1)
	base, stop := startWith(t, Config{DataDir: dir, GRPCAddr: "127.0.0.1:0", GRPCListening: func(a string) { grpcAddr <- a }})
	defer stop()
	addr := <-grpcAddr
	boot, _ := loadBootstrap(t, dir)
	login := func(domainID, user, password string) string {
		status, b := post(t, base+"/identity/token/issue", "", `{"credentials": {"user_id": "`+user+`", "password": "`+password+`"}, "auth_type": "LOCAL", "domain_id": "`+domainID+`"}`)
		if status != http.StatusOK {
			t.Fatalf("login: %d %v", status, b)
		}
		status, b = post(t, base+"/identity/token/grant", "", `{"grant_type": "REFRESH_TOKEN", "token": "`+b["refresh_token"].(string)+`", "scope": "DOMAIN"}`)
		if status != http.StatusOK {
			t.Fatalf("grant: %d %v", status, b)
		}
		return b["access_token"].(string)
	}
	admin := login(boot.DomainID, boot.AdminUserID, boot.AdminPassword)

	// cfctl's first step: the services' gRPC endpoints, from endpoint/list.
	status, eps := post(t, base+"/identity/endpoint/list", "", `{}`)
	if status != http.StatusOK {
		t.Fatalf("endpoint/list: %d %v", status, eps)
	}
	endpoints := map[string]string{}
	for _, e := range eps["results"].([]any) {
		endpoints[e.(map[string]any)["service"].(string)] = e.(map[string]any)["endpoint"].(string)
	}
	for _, name := range []string{"identity", "board", "inventory", "monitoring", "cost-analysis", "notification", "secret", "repository", "dashboard", "config"} {
		if endpoints[name] != "grpc://"+addr {
			t.Errorf("endpoint/list: %s at %q, want grpc://%s", name, endpoints[name], addr)
		}
	}

	c := cfctl.Dial(t, strings.TrimPrefix(endpoints["identity"], "grpc://"))
	services := c.Services()
	for _, want := range []string{"spaceone.api.identity.v2.User", "spaceone.api.identity.v2.Domain", "spaceone.api.board.v1.Post",
		"spaceone.api.inventory.v1.Collector", "spaceone.api.cost_analysis.v1.DataSource", "spaceone.api.identity.v2.APIKey",
		"grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists no %s (%d services)", want, len(services))
		}
	}
	// The same list over gRPC, as cfctl's FetchEndpointsMap asks it.
	c.OK("", "spaceone.api.identity.v2.Endpoint", "list", `{}`, `"endpoint":"grpc://`+addr+`"`, `"service":"board"`)

	user := "spaceone.api.identity.v2.User"
	sd := c.Resolve(user)
	for _, m := range []string{"create", "get", "list", "stat", "update", "delete", "disable_mfa"} {
		if sd.Methods().ByName(protoreflect.Name(m)) == nil {
			t.Errorf("%s has no method %s", user, m)
		}
	}

	// Bad input: the error's code in the details, nothing stored.
	c.Fails(admin, user, "create", `{"password": "Passw0rd-grpc", "auth_type": "LOCAL"}`, codes.InvalidArgument, "ERROR_REQUIRED_PARAMETER: ")
	c.Fails(admin, user, "create", `{"user_id": "g@example.com", "password": "Passw0rd-grpc", "auth_type": "SAML"}`, codes.InvalidArgument, "ERROR_INVALID_PARAMETER: ")
	c.Fails("", user, "list", `{}`, codes.Unauthenticated, "ERROR_")
	c.Fails("not-a-token", user, "list", `{}`, codes.Unauthenticated, "ERROR_")
	c.OK(admin, user, "list", `{"query": {"filter": [{"k": "user_id", "v": "g@example.com", "o": "eq"}]}}`, `"total_count":0`)

	created := c.OK(admin, user, "create", `{"user_id": "g@example.com", "password": "Passw0rd-grpc", "name": "Over gRPC", "auth_type": "LOCAL", "tags": {"team": "a.b", "n": 2}}`,
		`"user_id":"g@example.com"`, `"name":"OvergRPC"`, `"domain_id":"`+boot.DomainID+`"`, `"tags":{`)
	c.Fails(admin, user, "create", `{"user_id": "g@example.com", "password": "Passw0rd-grpc", "auth_type": "LOCAL"}`, codes.AlreadyExists, "ERROR_")
	got := c.OK(admin, user, "get", `{"user_id": "g@example.com"}`, `"user_id":"g@example.com"`, `"state":`)
	if !strings.Contains(got, `"team":"a.b"`) || !strings.Contains(created, `"created_at":"`) {
		t.Errorf("create answered %s, get %s", created, got)
	}
	// The same answer as the HTTP call's.
	_, httpGot := post(t, base+"/identity/v2/user/get", admin, `{"user_id": "g@example.com"}`)
	for _, k := range []string{"user_id", "name", "state", "domain_id", "created_at"} {
		if !strings.Contains(got, fmt.Sprintf("%q:%q", k, httpGot[k])) && !strings.Contains(strings.ReplaceAll(got, " ", ""), fmt.Sprintf("%q:%q", k, httpGot[k])) {
			t.Errorf("gRPC get %s: %s, HTTP %v", k, got, httpGot[k])
		}
	}
	c.OK(admin, user, "list", `{"query": {"filter": [{"key": "user_id", "value": "g@example.com", "operator": "eq"}], "sort": [{"key": "user_id", "desc": true}], "page": {"start": 1, "limit": 10}}}`,
		`"total_count":1`, `"user_id":"g@example.com"`)
	c.OK(admin, user, "stat", `{"query": {"aggregate": [{"group": {"keys": [{"key": "state", "name": "state"}], "fields": [{"name": "n", "operator": "count"}]}}], "filter": [{"k": "user_id", "v": "g@example.com", "o": "eq"}]}}`,
		`"results":[`, `"n":1`)
	c.Fails(admin, user, "get", `{"user_id": "nobody@example.com"}`, codes.NotFound, "ERROR_NOT_FOUND: ")

	// One operation of each other service.
	for _, op := range []struct{ service, method, body, want string }{
		{"spaceone.api.identity.v2.Domain", "get_auth_info", `{"name": "` + boot.DomainName + `"}`, `"domain_id":"` + boot.DomainID + `"`},
		{"spaceone.api.board.v1.Board", "list", `{}`, `"total_count":0`},
		{"spaceone.api.dashboard.v1.ProjectDashboard", "list", `{"domain_id": "` + boot.DomainID + `"}`, `"total_count":0`},
		{"spaceone.api.user_secret.v1.UserSecret", "list", `{}`, `"total_count":0`},
		{"spaceone.api.repository.v1.Repository", "list", `{}`, `"total_count":`},
		{"spaceone.api.monitoring.v1.EscalationPolicy", "list", `{}`, `"total_count":`},
		{"spaceone.api.notification.v1.Protocol", "list", `{}`, `"total_count":`},
		{"spaceone.api.cost_analysis.v1.DataSource", "list", `{}`, `"total_count":0`},
		{"spaceone.api.inventory.v1.Collector", "list", `{}`, `"total_count":0`},
	} {
		c.OK(admin, op.service, op.method, op.body, op.want)
	}

	// Another domain: the first's user is NOT_FOUND, to read and to change.
	c.OK(boot.SystemToken, "spaceone.api.identity.v2.Domain", "create", `{"name": "elsewhere", "admin": {"user_id": "boss", "password": "Boss-Passw0rd1", "email": "boss@example.com"}}`, `"domain_id":"`)
	_, other := post(t, base+"/identity/domain/get-auth-info", "", `{"name": "elsewhere"}`)
	boss := login(other["domain_id"].(string), "boss", "Boss-Passw0rd1")
	c.Fails(boss, user, "get", `{"user_id": "g@example.com"}`, codes.NotFound, "ERROR_NOT_FOUND: ")
	c.Fails(boss, user, "update", `{"user_id": "g@example.com", "name": "Taken"}`, codes.NotFound, "ERROR_NOT_FOUND: ")
	c.Fails(boss, user, "delete", `{"user_id": "g@example.com"}`, codes.NotFound, "ERROR_NOT_FOUND: ")
	c.OK(boss, user, "list", `{"query": {"filter": [{"k": "user_id", "v": "g@example.com", "o": "eq"}]}}`, `"total_count":0`)
	c.OK(admin, user, "get", `{"user_id": "g@example.com"}`, `"user_id":"g@example.com"`, `"name":"OvergRPC"`)
	c.OK(admin, user, "delete", `{"user_id": "g@example.com"}`)
	c.Fails(admin, user, "get", `{"user_id": "g@example.com"}`, codes.NotFound, "ERROR_NOT_FOUND: ")

	// Every operation of the spec is a method, named as upstream names it,
	// and answers: an empty request is refused or served, never
	// unimplemented, never a failure to fit the answer in its message.
	internal := 0
	upstreamName := map[string][2]string{}
	for _, r := range readUpstream(t) {
		upstreamName[r.path] = [2]string{r.service, r.method}
	}
	for _, path := range listedOperations(t) {
		service, method := upstreamName[path][0], upstreamName[path][1]
		if !slices.Contains(services, service) {
			t.Errorf("%s: no service %s", path, service)
			continue
		}
		if c.Resolve(service).Methods().ByName(protoreflect.Name(method)) == nil {
			t.Errorf("%s: %s has no method %s", path, service, method)
			continue
		}
		if _, st := c.Call(boot.SystemToken, service, method, `{}`); st != nil {
			if st.Code() == codes.Unimplemented && strings.HasPrefix(st.Message(), "ERROR_UNSUPPORTED_API") || st.Code() == codes.Unknown ||
				!strings.HasPrefix(st.Message(), "ERROR_") {
				t.Errorf("%s: %v %s", path, st.Code(), st.Message())
			}
			if st.Code() == codes.Internal {
				internal++
				t.Logf("%s: %v %s", path, st.Code(), st.Message())
			}
		}
	}
	if internal > 0 {
		t.Errorf("%d operations failed inside", internal)
	}

	// Conformance with upstream's protos: every operation of the spec,
	// its service, method and request fields (grpc_conformance_test.go).
	checkUpstreamConformance(t, c, services)
	if list := sd.Methods().ByName("list").Output(); list.Fields().ByName("results") == nil || list.Fields().ByName("total_count").Kind() != protoreflect.Int32Kind {
		t.Errorf("list answers %s", list.FullName())
	}
	if stat := sd.Methods().ByName("stat").Output(); stat.FullName() != "google.protobuf.Struct" {
		t.Errorf("stat answers %s", stat.FullName())
	}

	// Reflection v1 and health answer too.
	v1, err := reflectionpb.NewServerReflectionClient(c.Conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := v1.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: user}}); err != nil {
		t.Fatal(err)
	}
	if r, err := v1.Recv(); err != nil || len(r.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Errorf("reflection v1: %v %v", r, err)
	}
	_ = v1.CloseSend()
	if _, err := v1.Recv(); err != io.EOF {
		t.Errorf("reflection v1 after close: %v", err)
	}
	for _, svc := range []string{"", user} {
		h, err := healthpb.NewHealthClient(c.Conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, h, err)
		}
	}
}
