package helm_test

import (
	"slices"
	"strings"
	"testing"
)

// TestGRPC: every service's pods and Service expose the gRPC port
// (upstream's grpc://<service>:50051) and the config names it; the
// NetworkPolicy lets in only grpc.clients and, with the gRPC Ingress, the
// Ingress controller; the gRPC Ingress has a host per service and keeps
// the SYSTEM-only methods inside the cluster; grpc.enabled false takes
// all of it away.
func TestGRPC(t *testing.T) {
	out, err := render(t, allServices)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, out)
	if got := m.configMaps["nubes-config"].Data["NUBES_GRPC_ADDR"]; got != ":50051" {
		t.Fatalf("NUBES_GRPC_ADDR = %q", got)
	}
	for name, svc := range m.services {
		if strings.Contains(name, "-plugin-") || name == "nubes-internal-only" {
			continue
		}
		if len(svc.Spec.Ports) != 2 || svc.Spec.Ports[1].Name != "grpc" || svc.Spec.Ports[1].Port != 50051 || svc.Spec.Ports[1].TargetPort.StrVal != "grpc" {
			t.Fatalf("Service %s ports %+v", name, svc.Spec.Ports)
		}
	}
	if _, ok := m.ingresses["nubes-grpc"]; ok {
		t.Fatal("a gRPC Ingress without grpc.ingress.enabled")
	}
	// endpoint/list answers each service's gRPC endpoint: in the cluster.
	if got := grpcURLsOf(t, m); !strings.Contains(got, "identity=grpc://nubes-identity.") || !strings.Contains(got, ".svc:50051") ||
		!strings.Contains(got, "board=grpc://nubes-board.") || strings.Contains(got, "mailer=") {
		t.Fatalf("NUBES_GRPC_SERVICE_URLS = %q", got)
	}
	for name, p := range m.policies {
		if name == "nubes-plugins" { // plugins listen on 50051 too: their callers' rule
			continue
		}
		for _, r := range p.Spec.Ingress {
			if slices.Contains(ports(r.Ports), 50051) {
				t.Fatalf("%s lets %v in on the gRPC port by default", name, r.From)
			}
		}
	}

	out, err = render(t, allServices, `
grpc:
  clients:
    - namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: tools}
  ingress:
    enabled: true
    domain: grpc.example.com
ingress:
  internalPaths:
    - /identity/v2/domain/create
    - /identity/v2/trusted-account/get-secret-data
    - /secret/v1/user-secret/get-data
`)
	if err != nil {
		t.Fatal(err)
	}
	m = decode(t, out)
	ing, ok := m.ingresses["nubes-grpc"]
	if !ok || ing.Annotations["nginx.ingress.kubernetes.io/backend-protocol"] != "GRPC" {
		t.Fatalf("gRPC Ingress %+v", ing)
	}
	hosts := map[string][]string{}
	for _, r := range ing.Spec.Rules {
		for _, p := range r.HTTP.Paths {
			hosts[r.Host] = append(hosts[r.Host], p.Path+" "+p.Backend.Service.Name+":"+p.Backend.Service.Port.Name)
		}
	}
	if got := hosts["identity.grpc.example.com"]; !slices.Contains(got, "/spaceone.api.identity.v2.Domain/create nubes-internal-only:http") ||
		!slices.Contains(got, "/spaceone.api.identity.v2.TrustedAccount/get_secret_data nubes-internal-only:http") ||
		got[len(got)-1] != "/ nubes-identity:grpc" {
		t.Fatalf("identity's gRPC host: %v", got)
	}
	if got := hosts["secret.grpc.example.com"]; !slices.Contains(got, "/spaceone.api.user_secret.v1.UserSecret/get_data nubes-internal-only:http") {
		t.Fatalf("secret's gRPC host: %v", got)
	}
	if got := hosts["board.grpc.example.com"]; !slices.Equal(got, []string{"/ nubes-board:grpc"}) {
		t.Fatalf("board's gRPC host: %v", got)
	}
	// ... and through the gRPC Ingress, its host (no TLS: port 80).
	if got := grpcURLsOf(t, m); !strings.Contains(got, "board=grpc://board.grpc.example.com:80") || !strings.Contains(got, "identity=grpc://identity.grpc.example.com:80") {
		t.Fatalf("NUBES_GRPC_SERVICE_URLS with the gRPC Ingress = %q", got)
	}
	if _, ok := hosts["mailer.grpc.example.com"]; ok {
		t.Fatal("the mailer (no API) has a gRPC host")
	}
	if _, ok := m.services["nubes-internal-only"]; !ok {
		t.Fatal("no Service for the internal paths")
	}
	for _, svc := range []string{"identity", "board", "mailer"} {
		var controller, clients bool
		for _, r := range m.policies["nubes-"+svc].Spec.Ingress {
			if !slices.Equal(ports(r.Ports), []int{50051}) {
				continue
			}
			for _, peer := range r.From {
				if peer.NamespaceSelector != nil && peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "tools" {
					clients = true
				}
				if peer.NamespaceSelector != nil && peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "ingress-nginx" {
					controller = true
				}
			}
		}
		if !clients || controller != (svc != "mailer") {
			t.Fatalf("%s: gRPC from clients %v, from the Ingress controller %v", svc, clients, controller)
		}
	}

	if _, err := render(t, allServices, "grpc:\n  ingress: {enabled: true}\n"); err == nil {
		t.Fatal("a gRPC Ingress without a domain rendered")
	}

	out, err = render(t, allServices, "grpc:\n  enabled: false\n  ingress: {enabled: true, domain: grpc.example.com}\n")
	if err != nil {
		t.Fatal(err)
	}
	m = decode(t, out)
	if got := m.configMaps["nubes-config"].Data["NUBES_GRPC_ADDR"]; got != "" {
		t.Fatalf("NUBES_GRPC_ADDR = %q with grpc.enabled false", got)
	}
	if _, ok := m.ingresses["nubes-grpc"]; ok {
		t.Fatal("a gRPC Ingress with grpc.enabled false")
	}
	if got := grpcURLsOf(t, m); got != "" {
		t.Fatalf("NUBES_GRPC_SERVICE_URLS = %q with grpc.enabled false", got)
	}
	for name, d := range m.deployments {
		if !strings.Contains(name, "-plugin-") && len(d.Spec.Template.Spec.Containers[0].Ports) != 1 {
			t.Fatalf("%s: ports %+v with grpc.enabled false", name, d.Spec.Template.Spec.Containers[0].Ports)
		}
	}
}

// grpcURLsOf is identity's NUBES_GRPC_SERVICE_URLS ("" when unset).
func grpcURLsOf(t *testing.T, m *manifests) string {
	t.Helper()
	d, ok := m.deployments["nubes-identity"]
	if !ok {
		t.Fatal("no identity Deployment")
	}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "NUBES_GRPC_SERVICE_URLS" {
			return e.Value
		}
	}
	return ""
}
