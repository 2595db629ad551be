package helm_test

import (
	"strings"
	"testing"
)

// TestPlugins: each plugin of the values runs as its own Deployment and
// Service, and every service's NUBES_PLUGIN_ENDPOINTS names them (and the
// external pluginEndpoints).
func TestPlugins(t *testing.T) {
	out, err := render(t, `
services:
  board: {enabled: true}
  repository: {enabled: true}
plugins:
  - pluginId: plugin-aws-ec2
    image: docker.io/cloudforet/plugin-aws-ec2:1.2.3
  - pluginId: Plugin-Mail
    version: 1.0.0
    image: registry.example.com/mail:1.0.0
    port: 6000
    tls: true
    replicas: 2
    env: {LOG_LEVEL: debug}
pluginEndpoints:
  plugin-far: grpc://plugins.example.com:443
`)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, out)
	for name, want := range map[string]struct {
		image    string
		port     int32
		replicas int32
	}{
		"nubes-plugin-plugin-aws-ec2":    {"docker.io/cloudforet/plugin-aws-ec2:1.2.3", 50051, 1},
		"nubes-plugin-plugin-mail-1-0-0": {"registry.example.com/mail:1.0.0", 6000, 2},
	} {
		d, ok := m.deployments[name]
		svc, hasSvc := m.services[name]
		if !ok || !hasSvc {
			t.Fatalf("plugin %s: Deployment %v, Service %v", name, ok, hasSvc)
		}
		c := d.Spec.Template.Spec.Containers[0]
		if c.Image != want.image || c.Ports[0].ContainerPort != want.port || *d.Spec.Replicas != want.replicas {
			t.Fatalf("plugin %s: image %s port %d replicas %d", name, c.Image, c.Ports[0].ContainerPort, *d.Spec.Replicas)
		}
		if svc.Spec.Ports[0].Port != want.port || svc.Spec.Ports[0].TargetPort.StrVal != "grpc" {
			t.Fatalf("plugin %s: Service ports %+v", name, svc.Spec.Ports)
		}
		for k, v := range d.Spec.Selector.MatchLabels {
			if svc.Spec.Selector[k] != v || d.Spec.Template.Labels[k] != v {
				t.Fatalf("plugin %s: the Service does not select the Deployment's pods", name)
			}
		}
		if len(svc.Spec.Selector) != len(d.Spec.Selector.MatchLabels) {
			t.Fatalf("plugin %s: selectors differ", name)
		}
		if c.ReadinessProbe == nil || c.ReadinessProbe.TCPSocket == nil {
			t.Fatalf("plugin %s: no readiness probe", name)
		}
	}
	// The two plugin selectors must not overlap each other or a service's.
	a := m.deployments["nubes-plugin-plugin-aws-ec2"].Spec.Selector.MatchLabels
	b := m.deployments["nubes-plugin-plugin-mail-1-0-0"].Spec.Selector.MatchLabels
	if a["nubes.io/plugin"] == b["nubes.io/plugin"] {
		t.Fatal("two plugins share a selector")
	}
	want := "plugin-aws-ec2=grpc://nubes-plugin-plugin-aws-ec2.nubes.svc:50051," +
		"Plugin-Mail@1.0.0=grpc+ssl://nubes-plugin-plugin-mail-1-0-0.nubes.svc:6000," +
		"plugin-far=grpc://plugins.example.com:443"
	for _, svc := range []string{"nubes-board", "nubes-repository"} {
		var got string
		for _, e := range m.deployments[svc].Spec.Template.Spec.Containers[0].Env {
			if e.Name == "NUBES_PLUGIN_ENDPOINTS" {
				got = e.Value
			}
		}
		if got != want {
			t.Fatalf("%s: NUBES_PLUGIN_ENDPOINTS = %q, want %q", svc, got, want)
		}
	}

	// No plugins: no plugin objects and no variable.
	out, err = render(t, "services:\n  repository: {enabled: true}\n")
	if err != nil {
		t.Fatal(err)
	}
	m = decode(t, out)
	for name := range m.deployments {
		if strings.Contains(name, "plugin") {
			t.Fatalf("plugin Deployment %s without plugins", name)
		}
	}
	for _, e := range m.deployments["nubes-repository"].Spec.Template.Spec.Containers[0].Env {
		if e.Name == "NUBES_PLUGIN_ENDPOINTS" {
			t.Fatalf("NUBES_PLUGIN_ENDPOINTS = %q without plugins", e.Value)
		}
	}
}

func TestRefusedPlugins(t *testing.T) {
	for name, values := range map[string]string{
		"plugin without image":        "plugins:\n  - {pluginId: p}\n",
		"plugin without pluginId":     "plugins:\n  - {image: x/p:1}\n",
		"pluginId with an underscore": "plugins:\n  - {pluginId: p_1, image: x/p:1}\n",
		"misspelt plugin setting":     "plugins:\n  - {pluginId: p, image: x/p:1, replica: 2}\n",
		"port out of range":           "plugins:\n  - {pluginId: p, image: x/p:1, port: 70000}\n",
		"the same plugin twice":       "plugins:\n  - {pluginId: p, image: x/p:1}\n  - {pluginId: p, image: x/p:2}\n",
		"endpoint not gRPC":           "pluginEndpoints:\n  p: http://host:80\n",
		"endpoint key not a plugin":   "pluginEndpoints:\n  'p q': grpc://host:80\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := render(t, values); err == nil {
				t.Fatalf("helm template accepted:\n%s", values)
			}
		})
	}
}
