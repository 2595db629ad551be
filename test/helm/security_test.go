package helm_test

import (
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// allServices enables every service, NATS users and two plugins.
const allServices = `
nats:
  auth: {enabled: true}
secrets:
  natsPasswords: {identity: pw-identity}
services:
  identity: {enabled: true}
  inventory: {enabled: true}
  monitoring: {enabled: true}
  cost-analysis: {enabled: true}
  repository: {enabled: true}
  board: {enabled: true}
  secret: {enabled: true}
  notification: {enabled: true}
  dashboard: {enabled: true}
  mailer: {enabled: true}
plugins:
  - pluginId: plugin-aws-ec2
    image: docker.io/cloudforet/plugin-aws-ec2:1.2.3
  - pluginId: plugin-mail
    image: registry.example.com/mail:1.0.0
    port: 6000
    tls: true
`

// peerComponents returns the components a podSelector peer of the
// release picks, or nil when the peer is not such a selector.
func peerComponents(p networkingv1.NetworkPolicyPeer) []string {
	if p.PodSelector == nil || p.NamespaceSelector != nil || p.IPBlock != nil {
		return nil
	}
	if c, ok := p.PodSelector.MatchLabels["app.kubernetes.io/component"]; ok {
		return []string{c}
	}
	for _, e := range p.PodSelector.MatchExpressions {
		if e.Key == "app.kubernetes.io/component" {
			return e.Values
		}
	}
	return nil
}

func ports(ps []networkingv1.NetworkPolicyPort) []int {
	var out []int
	for _, p := range ps {
		out = append(out, p.Port.IntValue())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestNetworkPolicy: a default-deny policy selects every pod of the
// release, and each service's policy allows exactly its flows.
func TestNetworkPolicy(t *testing.T) {
	out, err := render(t, allServices)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, out)
	deny, ok := m.policies["nubes-default-deny"]
	if !ok {
		t.Fatalf("no default-deny NetworkPolicy: %v", slices.Collect(maps.Keys(m.policies)))
	}
	if len(deny.Spec.Ingress) != 0 || len(deny.Spec.Egress) != 0 ||
		!slices.Contains(deny.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !slices.Contains(deny.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Fatalf("default-deny allows something: %+v", deny.Spec)
	}
	// It selects every pod the release runs, plugins included.
	for name, d := range m.deployments {
		for k, v := range deny.Spec.PodSelector.MatchLabels {
			if d.Spec.Template.Labels[k] != v {
				t.Fatalf("default-deny does not select %s's pods (%s=%s)", name, k, v)
			}
		}
	}

	// What each service may reach among the release's pods, and who may
	// reach it.
	type flow struct{ in, out []string }
	want := map[string]flow{
		"identity":      {in: []string{"board", "cost-analysis", "dashboard", "inventory", "mailer", "monitoring", "notification", "repository", "secret"}, out: []string{"board", "cost-analysis", "dashboard", "inventory", "mailer", "monitoring", "notification", "plugin", "repository", "secret"}},
		"inventory":     {in: []string{"identity"}, out: []string{"identity", "plugin", "repository"}},
		"cost-analysis": {in: []string{"identity"}, out: []string{"identity", "plugin", "repository"}},
		"monitoring":    {in: []string{"identity"}, out: []string{"identity", "plugin", "repository"}},
		"notification":  {in: []string{"identity"}, out: []string{"identity", "plugin", "repository"}},
		"repository":    {in: []string{"cost-analysis", "identity", "inventory", "monitoring", "notification", "secret"}, out: []string{"identity"}},
		"secret":        {in: []string{"identity"}, out: []string{"identity", "repository"}},
		"board":         {in: []string{"identity"}, out: []string{"identity"}},
		"dashboard":     {in: []string{"identity"}, out: []string{"identity"}},
		"mailer":        {in: []string{"identity"}, out: []string{"identity"}},
	}
	for svc, w := range want {
		p, ok := m.policies["nubes-"+svc]
		if !ok {
			t.Fatalf("no NetworkPolicy for %s", svc)
		}
		if p.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] != svc {
			t.Fatalf("%s: policy selects %v", svc, p.Spec.PodSelector.MatchLabels)
		}
		var in, outTo []string
		ingressController := false
		for _, r := range p.Spec.Ingress {
			for _, peer := range r.From {
				if c := peerComponents(peer); c != nil {
					in = append(in, c...)
					if !slices.Equal(ports(r.Ports), []int{8080}) {
						t.Fatalf("%s: callers allowed on %v", svc, ports(r.Ports))
					}
				} else if peer.NamespaceSelector != nil {
					ingressController = true
				}
			}
		}
		slices.Sort(in)
		if !slices.Equal(in, w.in) {
			t.Fatalf("%s: reachable from %v, want %v", svc, in, w.in)
		}
		if routed := svc != "mailer"; ingressController != routed {
			t.Fatalf("%s: the Ingress controller may reach it: %v, want %v", svc, ingressController, routed)
		}
		var dns, mongo, nats, unbounded bool
		for _, r := range p.Spec.Egress {
			ps := ports(r.Ports)
			if len(ps) == 0 {
				t.Fatalf("%s: an egress rule without ports: %+v", svc, r)
			}
			switch {
			case slices.Equal(ps, []int{53}):
				dns = len(r.To) > 0
			case slices.Equal(ps, []int{27017}):
				mongo = true
			case slices.Equal(ps, []int{4222}):
				nats = true
			}
			for _, peer := range r.To {
				outTo = append(outTo, peerComponents(peer)...)
			}
			if len(r.To) == 0 && !slices.Contains([]int{27017, 4222}, ps[0]) && svc != "mailer" && svc != "repository" {
				unbounded = true
			}
		}
		slices.Sort(outTo)
		outTo = slices.Compact(outTo)
		if !slices.Equal(outTo, w.out) {
			t.Fatalf("%s: may reach %v, want %v", svc, outTo, w.out)
		}
		usesNATS := slices.Contains([]string{"identity", "inventory", "cost-analysis", "monitoring", "notification", "mailer", "secret", "dashboard", "config"}, svc)
		if !dns || !mongo || nats != usesNATS || unbounded {
			t.Fatalf("%s: egress DNS %v MongoDB %v NATS %v (want %v), to anywhere %v: %+v", svc, dns, mongo, nats, usesNATS, unbounded, p.Spec.Egress)
		}
	}
	pl, ok := m.policies["nubes-plugins"]
	if !ok {
		t.Fatal("no NetworkPolicy for the plugins")
	}
	var from []string
	for _, r := range pl.Spec.Ingress {
		if !slices.Equal(ports(r.Ports), []int{6000, 50051}) {
			t.Fatalf("plugins reachable on %v", ports(r.Ports))
		}
		for _, peer := range r.From {
			from = append(from, peerComponents(peer)...)
		}
	}
	slices.Sort(from)
	if want := []string{"cost-analysis", "identity", "inventory", "monitoring", "notification"}; !slices.Equal(from, want) {
		t.Fatalf("plugins reachable from %v, want %v", from, want)
	}

	// Disabled: no policy at all.
	out, err = render(t, "networkPolicy: {enabled: false}\n")
	if err != nil {
		t.Fatal(err)
	}
	if m := decode(t, out); len(m.policies) != 0 {
		t.Fatalf("policies rendered while disabled: %v", slices.Collect(maps.Keys(m.policies)))
	}
}

// TestPluginPodsRestricted: plugin pods run as restricted as the services.
func TestPluginPodsRestricted(t *testing.T) {
	out, err := render(t, allServices)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, out)
	n := 0
	for name, d := range m.deployments {
		if !strings.Contains(name, "-plugin-") {
			continue
		}
		n++
		pod := d.Spec.Template.Spec
		psc := pod.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 ||
			psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Fatalf("%s: pod security context %+v", name, psc)
		}
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
			t.Fatalf("%s: mounts a service account token", name)
		}
		c := pod.Containers[0]
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
			(sc.Privileged != nil && *sc.Privileged) {
			t.Fatalf("%s: container security context %+v", name, sc)
		}
		if !mountPaths(c)["/tmp"] {
			t.Fatalf("%s: no writable /tmp", name)
		}
	}
	if n != 2 {
		t.Fatalf("%d plugin Deployments, want 2", n)
	}
	// A root uid, or the old free-form securityContext, is refused.
	for _, v := range []string{
		"plugins:\n  - {pluginId: p, image: docker.io/x/p:1, runAsUser: 0}\n",
		"plugins:\n  - {pluginId: p, image: docker.io/x/p:1, securityContext: {runAsUser: 0}}\n",
		"plugins:\n  - {pluginId: p, image: x/p:1}\n", // no registry
	} {
		if _, err := render(t, v); err == nil {
			t.Fatalf("accepted:\n%s", v)
		}
	}
}

// TestNATSUsers: each service that uses NATS connects as its own user
// with its own password file, and the authorization the chart renders
// gives each only its subjects.
func TestNATSUsers(t *testing.T) {
	out, err := render(t, allServices)
	if err != nil {
		t.Fatal(err)
	}
	m := decode(t, out)
	conf := m.configMaps["nubes-nats-authorization"].Data["users.conf"]
	if conf == "" {
		t.Fatal("no NATS authorization rendered")
	}
	if strings.Contains(conf, "pw-identity") {
		t.Fatal("a NATS password is in the ConfigMap")
	}
	users := parseUsers(t, conf)
	want := []string{"nubes-cost-analysis", "nubes-dashboard", "nubes-identity", "nubes-inventory", "nubes-mailer", "nubes-monitoring",
		"nubes-notification", "nubes-secret"}
	if got := slices.Sorted(maps.Keys(users)); !slices.Equal(got, want) {
		t.Fatalf("NATS users %v, want %v", got, want)
	}
	s := m.secrets["nubes-secrets"].StringData
	if s["nats-password-identity"] != "pw-identity" || len(s["nats-password-mailer"]) < 32 {
		t.Fatalf("NATS passwords: identity's from the values, the others generated: %v", slices.Collect(maps.Keys(s)))
	}
	for user, u := range users {
		svc := strings.TrimPrefix(user, "nubes-")
		if u.password != "$NUBES_NATS_PASSWORD_"+strings.ToUpper(strings.ReplaceAll(svc, "-", "_")) {
			t.Fatalf("%s: password %q is not its variable", user, u.password)
		}
		if !slices.Equal(u.subscribe, []string{"_INBOX." + user + ".>"}) {
			t.Fatalf("%s: may subscribe to %v; only its own inbox", user, u.subscribe)
		}
		for _, p := range u.publish {
			if strings.ContainsAny(p, "*") || p == ">" || strings.HasPrefix(p, "$JS.API.STREAM.DELETE") || strings.HasPrefix(p, "$JS.API.STREAM.PURGE") {
				t.Fatalf("%s: may publish on %s", user, p)
			}
		}
		d := m.deployments["nubes-"+svc].Spec.Template.Spec.Containers[0]
		env := map[string]string{}
		for _, e := range d.Env {
			env[e.Name] = e.Value
		}
		if env["NUBES_NATS_USER"] != user || env["NUBES_NATS_PASSWORD_FILE"] != "/etc/nubes/secrets/nats-password-"+svc {
			t.Fatalf("%s: NATS user %q, password file %q", svc, env["NUBES_NATS_USER"], env["NUBES_NATS_PASSWORD_FILE"])
		}
	}
	// The subjects of one service are not another's.
	owns := map[string]string{
		"nubes.job.identity": "nubes-identity", "nubes.inventory.task": "nubes-inventory",
		"nubes.job.cost-analysis": "nubes-cost-analysis", "nubes.monitoring.event": "nubes-monitoring",
		"nubes.notification.dead": "nubes-notification", "nubes.mail.dead": "nubes-mailer",
		"$JS.API.CONSUMER.MSG.NEXT.NUBES_MAIL.mailer": "nubes-mailer", "$KV.mail_sent.>": "nubes-mailer",
		"$JS.API.CONSUMER.MSG.NEXT.NUBES_JOBS.identity-sync":                "nubes-identity",
		"$JS.API.CONSUMER.MSG.NEXT.NUBES_JOBS.cost-analysis":                "nubes-cost-analysis",
		"$JS.API.CONSUMER.MSG.NEXT.NUBES_INVENTORY_TASKS.inventory":         "nubes-inventory",
		"$JS.API.CONSUMER.MSG.NEXT.NUBES_NOTIFICATION.notification":         "nubes-notification",
		"$JS.API.CONSUMER.MSG.NEXT.NUBES_NOTIFICATION.notification-request": "nubes-notification",
		"nubes.notification.dispatch":                                       "nubes-notification",
		"nubes.deleted":                                                     "nubes-identity",
		"$JS.API.CONSUMER.MSG.NEXT.NUBES_DELETED.secret-deleted":            "nubes-secret",
		"$JS.API.CONSUMER.MSG.NEXT.NUBES_DELETED.notification-deleted":      "nubes-notification",
	}
	for subject, owner := range owns {
		for user, u := range users {
			if has := slices.Contains(u.publish, subject); has != (user == owner) {
				t.Fatalf("%s may publish on %s: %v (owner %s)", user, subject, has, owner)
			}
		}
	}
	// Subjects of several producers: mail (identity; notification for
	// e-mail channels) and notification requests (every service that
	// notifies), no one else.
	for subject, owners := range map[string][]string{
		"nubes.mail.send":            {"nubes-identity", "nubes-notification"},
		"nubes.notification.request": {"nubes-cost-analysis", "nubes-inventory", "nubes-monitoring"},
	} {
		for user, u := range users {
			if has := slices.Contains(u.publish, subject); has != slices.Contains(owners, user) {
				t.Fatalf("%s may publish on %s: %v (owners %v)", user, subject, has, owners)
			}
		}
	}
	// Streams: a user creates and updates only those its service
	// publishes into (pkg/events.OwnedStreams), reads every stream's
	// info, and only the mailer deletes single messages (of the mail
	// stream, each mail it sent).
	ownedStreams := map[string][]string{
		"nubes-identity":      {"NUBES_DELETED", "NUBES_JOBS", "NUBES_MAIL"},
		"nubes-inventory":     {"NUBES_INVENTORY_TASKS", "NUBES_NOTIFICATION"},
		"nubes-cost-analysis": {"NUBES_JOBS", "NUBES_NOTIFICATION"},
		"nubes-monitoring":    {"NUBES_MONITORING", "NUBES_NOTIFICATION"},
		"nubes-notification":  {"NUBES_MAIL", "NUBES_NOTIFICATION", "NUBES_NOTIFICATION_DEAD"},
		"nubes-mailer":        {"NUBES_MAIL_DEAD"},
	}
	for user, u := range users {
		var created, updated, infos, deletes []string
		for _, p := range u.publish {
			switch {
			case strings.HasPrefix(p, "$JS.API.STREAM.CREATE.") && !strings.HasPrefix(p, "$JS.API.STREAM.CREATE.KV_"):
				created = append(created, strings.TrimPrefix(p, "$JS.API.STREAM.CREATE."))
			case strings.HasPrefix(p, "$JS.API.STREAM.UPDATE.") && !strings.HasPrefix(p, "$JS.API.STREAM.UPDATE.KV_"):
				updated = append(updated, strings.TrimPrefix(p, "$JS.API.STREAM.UPDATE."))
			case strings.HasPrefix(p, "$JS.API.STREAM.INFO.") && !strings.HasPrefix(p, "$JS.API.STREAM.INFO.KV_"):
				infos = append(infos, strings.TrimPrefix(p, "$JS.API.STREAM.INFO."))
			case strings.HasPrefix(p, "$JS.API.STREAM.MSG.DELETE."):
				deletes = append(deletes, strings.TrimPrefix(p, "$JS.API.STREAM.MSG.DELETE."))
			}
		}
		slices.Sort(created)
		slices.Sort(updated)
		if !slices.Equal(created, ownedStreams[user]) || !slices.Equal(updated, ownedStreams[user]) {
			t.Fatalf("%s may create %v and update %v; it owns %v", user, created, updated, ownedStreams[user])
		}
		if len(infos) != 8 {
			t.Fatalf("%s may read the info of %v; every stream's", user, infos)
		}
		if want := map[string][]string{"nubes-mailer": {"NUBES_MAIL"}}[user]; !slices.Equal(deletes, want) {
			t.Fatalf("%s may delete messages of %v, want %v", user, deletes, want)
		}
	}
	// Services that do not use NATS get neither NATS URL nor user.
	for _, svc := range []string{"board", "repository"} {
		for _, e := range m.deployments["nubes-"+svc].Spec.Template.Spec.Containers[0].Env {
			if strings.HasPrefix(e.Name, "NUBES_NATS_") {
				t.Fatalf("%s: %s set although it does not use NATS", svc, e.Name)
			}
		}
	}
}

type natsUser struct {
	password           string
	publish, subscribe []string
}

var (
	userRe  = regexp.MustCompile(`user:\s*"([^"]+)"\s*\n\s*password:\s*(\S+)\s*\n\s*permissions:\s*\{\s*\n\s*publish:\s*\{allow:\s*(\[[^\]]*\])\}\s*\n\s*subscribe:\s*\{allow:\s*(\[[^\]]*\])\}`)
	quoteRe = regexp.MustCompile(`"([^"]*)"`)
)

// parseUsers reads the users of the rendered authorization block.
func parseUsers(t *testing.T, conf string) map[string]natsUser {
	t.Helper()
	list := func(s string) []string {
		var out []string
		for _, m := range quoteRe.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		return out
	}
	users := map[string]natsUser{}
	for _, m := range userRe.FindAllStringSubmatch(conf, -1) {
		users[m[1]] = natsUser{password: m[2], publish: list(m[3]), subscribe: list(m[4])}
	}
	if len(users) != strings.Count(conf, "user:") {
		t.Fatalf("could not read every user of:\n%s", conf)
	}
	return users
}

// TestEndpointURL: identity's endpoint_url is the Ingress's public URL
// (https with TLS, http without), unless set; none without a host.
func TestEndpointURL(t *testing.T) {
	for values, want := range map[string]string{
		"ingress: {host: api.example.com, tls: [{secretName: t, hosts: [api.example.com]}]}\n":                                             "https://api.example.com",
		"ingress: {host: api.example.com}\n":                                                                                               "http://api.example.com",
		"ingress: {host: api.example.com}\nservices:\n  identity: {enabled: true, env: {NUBES_ENDPOINT_URL: https://other.example.com}}\n": "https://other.example.com",
		"ingress: {host: \"\"}\n": "",
	} {
		out, err := render(t, "services:\n  identity: {enabled: true}\n", values)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, e := range decode(t, out).deployments["nubes-identity"].Spec.Template.Spec.Containers[0].Env {
			if e.Name == "NUBES_ENDPOINT_URL" {
				got = e.Value
			}
		}
		if got != want {
			t.Fatalf("with %s endpoint_url %q, want %q", values, got, want)
		}
	}
}

// TestProductionRefuses: production values render only with what a
// production deployment needs; each missing piece fails the render.
func TestProductionRefuses(t *testing.T) {
	prod := chart + "/values-production.yaml"
	if _, err := render(t, prod); err != nil {
		t.Fatalf("production values do not render: %v", err)
	}
	for name, values := range map[string]string{
		"no registry":            "image: {registry: \"\"}\n",
		"no Ingress host":        "ingress: {host: \"\"}\n",
		"no TLS":                 "ingress: {tls: []}\n",
		"TLS for another host":   "ingress: {tls: [{secretName: x, hosts: [other.example.com]}]}\n",
		"no Ingress":             "ingress: {enabled: false}\n",
		"no NATS users":          "nats: {auth: {enabled: false}}\n",
		"no NetworkPolicy":       "networkPolicy: {enabled: false}\n",
		"gRPC Ingress, no TLS":   "grpc: {ingress: {enabled: true, domain: grpc.example.com}}\n",
		"MongoDB without a user": "secrets: {existingSecret: \"\", mongoURI: \"mongodb://mongodb:27017/?replicaSet=rs0\"}\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := render(t, prod, values); err == nil {
				t.Fatalf("production rendered with %s", values)
			}
		})
	}
	// The same MongoDB URI with a user and password renders.
	if _, err := render(t, prod, "secrets: {existingSecret: \"\", mongoURI: \"mongodb://nubes:pw@mongodb:27017/?replicaSet=rs0\"}\n"); err != nil {
		t.Fatal(err)
	}
	// The gRPC Ingress with its certificate renders.
	if _, err := render(t, prod, "grpc: {ingress: {enabled: true, domain: grpc.example.com, tls: [{secretName: grpc-tls, hosts: ['*.grpc.example.com']}]}}\n"); err != nil {
		t.Fatal(err)
	}
	// Without production: true the chart has no registry default either.
	if _, err := render(t, "image: {registry: \"\"}\n"); err == nil {
		t.Fatal("rendered without a registry")
	}
}

// TestAdminPasswordInSecret: with identity, the chart's Secret always
// holds the admin password (the value, or a generated one), which the
// identity pod reads as a file.
func TestAdminPasswordInSecret(t *testing.T) {
	for values, want := range map[string]string{
		"services:\n  identity: {enabled: true}\n":                                "",
		"services:\n  identity: {enabled: true}\nsecrets: {adminPassword: s3t}\n": "s3t",
	} {
		out, err := render(t, values)
		if err != nil {
			t.Fatal(err)
		}
		m := decode(t, out)
		got := m.secrets["nubes-secrets"].StringData["admin-password"]
		if (want == "" && len(got) < 24) || (want != "" && got != want) {
			t.Fatalf("admin-password %q, want %q (or a generated one)", got, want)
		}
		id := m.deployments["nubes-identity"].Spec.Template.Spec
		if f := secretFiles(t, "identity", id, id.Containers[0], "nubes-secrets"); f["NUBES_ADMIN_PASSWORD"] != "admin-password" {
			t.Fatalf("identity does not read admin-password: %v", f)
		}
	}
}

// TestNATSUsersGolden: pkg/events runs every service's NATS work under
// the users of pkg/events/testdata/chart-nats-users.conf (a live NATS
// server); this keeps that file equal to what the chart renders. After a
// change to templates/_flows.tpl, render it again (the values below) and
// copy users.conf there.
func TestNATSUsersGolden(t *testing.T) {
	out, err := render(t, `
nats: {auth: {enabled: true}}
services:
  identity: {enabled: true}
  inventory: {enabled: true}
  monitoring: {enabled: true}
  cost-analysis: {enabled: true}
  notification: {enabled: true}
  mailer: {enabled: true}
  secret: {enabled: true}
  dashboard: {enabled: true}
  config: {enabled: true}
`)
	if err != nil {
		t.Fatal(err)
	}
	got := decode(t, out).configMaps["nubes-nats-authorization"].Data["users.conf"]
	want, err := os.ReadFile("../../pkg/events/testdata/chart-nats-users.conf")
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Fatalf("the chart's NATS users differ from pkg/events/testdata/chart-nats-users.conf; rendered:\n%s", got)
	}
}
