package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testNotificationPlugin is the plugin id the notification container maps
// to the test plugin at noti-plugin (NUBES_PLUGIN_ENDPOINTS in
// stack_test.go).
const testNotificationPlugin = "plugin-test-notification"

// What pkg/events declares for notification events (the suite's module
// does not build NATS's client: the event is published over NATS's text
// protocol, see publishJetStream).
const (
	notificationSubject  = "nubes.notification.dispatch"
	dispatchMethod       = "spaceone.api.notification.plugin.Notification/dispatch"
	protocolInitMethod   = "spaceone.api.notification.plugin.Protocol/init"
	notificationProtocol = "/notification/v1/protocol/"
)

// TestNotificationDispatch drives a protocol end to end: the test plugin's
// image in a registry container, registered in the repository as a
// notification.Protocol plugin; a protocol created on it in the
// notification container (Protocol.init over gRPC, the newest version,
// secret data sealed); a notification event published on JetStream as a
// producer does reaches the plugin's Notification.dispatch with the
// secret data unsealed; the same event again is not dispatched twice;
// once the protocol is disabled an event dispatches nothing.
func TestNotificationDispatch(t *testing.T) {
	needs(t, "notification", "repository")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	startRegistry(ctx, t, "noti-registry", "1.0.0", "1.1.0")

	script, _ := json.Marshal(map[string]any{
		protocolInitMethod: []any{map[string]any{"result": map[string]any{"metadata": map[string]any{
			"data_type": "SECRET", "data": map[string]any{"schema": map[string]any{"type": "object"}}}}}},
	})
	// The notification container dials grpc://noti-plugin:50051 when it
	// first calls the plugin, so the plugin may start after it.
	control := startTestPlugin(ctx, t, "noti-plugin", string(script))
	natsURL, err := endpoint(ctx, st.nats, "4222/tcp")
	if err != nil {
		t.Fatal(err)
	}

	admin := rootAdmin(t, identityAt(t))
	admin.with(direct(st.first(t, "repository").url)).call("/repository/v1/plugin/register", map[string]any{
		"name": "Test notification", "plugin_id": testNotificationPlugin, "image": "nubes/test-plugin",
		"resource_type": "notification.Protocol", "registry_type": "PRIVATE_REGISTRY", "registry_url": "http://noti-registry:5000",
		"capability": map[string]any{"supported_schema": []any{"email_smtp"}}}).OK(nil)

	noti := admin.with(direct(st.first(t, "notification").url))
	type protocol struct {
		ProtocolID   string         `json:"protocol_id"`
		State        string         `json:"state"`
		ProtocolType string         `json:"protocol_type"`
		Capability   map[string]any `json:"capability"`
		DomainID     string         `json:"domain_id"`
		PluginInfo   struct {
			Version  string         `json:"version"`
			SecretID string         `json:"secret_id"`
			Metadata map[string]any `json:"metadata"`
		} `json:"plugin_info"`
		Usage struct {
			Sent, Failed, Skipped int
		} `json:"usage"`
	}
	var p protocol
	res := noti.call(notificationProtocol+"create", map[string]any{"name": "E2E mail", "plugin_info": map[string]any{
		"plugin_id": testNotificationPlugin, "options": map[string]any{"smtp_host": "smtp"},
		"secret_data": map[string]any{"smtp_password": "e2e-hunter2"}, "schema": "email_smtp"}}).OK(&p)
	if p.State != "ENABLED" || p.ProtocolType != "EXTERNAL" || p.PluginInfo.Version != "1.1.0" || p.PluginInfo.SecretID == "" ||
		p.PluginInfo.Metadata["data_type"] != "SECRET" || !reflect.DeepEqual(p.Capability, map[string]any{"supported_schema": []any{"email_smtp"}}) {
		t.Fatalf("protocol = %s", res.body)
	}
	if strings.Contains(string(res.body), "e2e-hunter2") {
		t.Fatalf("secret data in the response: %s", res.body)
	}
	if inits := pluginCalls(t, control, protocolInitMethod); len(inits) != 1 || !reflect.DeepEqual(inits[0].Request["options"], map[string]any{"smtp_host": "smtp"}) {
		t.Fatalf("init calls = %+v", inits)
	}

	usage := func(want func(protocol) bool) protocol {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			noti.call(notificationProtocol+"get", map[string]any{"protocol_id": p.ProtocolID}).OK(&p)
			if want(p) {
				return p
			}
			if time.Now().After(deadline) {
				t.Fatalf("usage = %+v", p.Usage)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	event := func(id string) map[string]any {
		return map[string]any{"id": id, "domain_id": p.DomainID, "protocol_id": p.ProtocolID, "notification_type": "ERROR",
			"message": map[string]any{"title": "Disk full", "description": "db-1"}, "channel_data": map[string]any{"email": "ops@example.com"}}
	}

	first := "e2e-" + randHex(6)
	publishJetStream(t, natsURL, notificationSubject, first, event(first))
	usage(func(p protocol) bool { return p.Usage.Sent == 1 })
	calls := pluginCalls(t, control, dispatchMethod)
	want := map[string]any{"options": map[string]any{"smtp_host": "smtp"}, "secret_data": map[string]any{"smtp_password": "e2e-hunter2"},
		"notification_type": "ERROR", "message": map[string]any{"title": "Disk full", "description": "db-1"},
		"channel_data": map[string]any{"email": "ops@example.com"}}
	if len(calls) != 1 || !reflect.DeepEqual(calls[0].Request, want) {
		t.Fatalf("dispatch calls = %+v", calls)
	}

	// The same event published again (another message id, so the stream
	// keeps it) is not dispatched twice; a new one is.
	publishJetStream(t, natsURL, notificationSubject, first+"-again", event(first))
	second := "e2e-" + randHex(6)
	publishJetStream(t, natsURL, notificationSubject, second, event(second))
	usage(func(p protocol) bool { return p.Usage.Sent == 2 })
	if n := len(pluginCalls(t, control, dispatchMethod)); n != 2 {
		t.Fatalf("%d dispatch calls for two distinct events", n)
	}

	// Disabled: the event is recorded as skipped and nothing is dispatched.
	noti.call(notificationProtocol+"disable", map[string]any{"protocol_id": p.ProtocolID}).OK(nil)
	third := "e2e-" + randHex(6)
	publishJetStream(t, natsURL, notificationSubject, third, event(third))
	got := usage(func(p protocol) bool { return p.Usage.Skipped == 1 })
	if got.Usage.Sent != 2 || got.Usage.Failed != 0 {
		t.Fatalf("usage after disable = %+v", got.Usage)
	}
	if n := len(pluginCalls(t, control, dispatchMethod)); n != 2 {
		t.Fatalf("a disabled protocol dispatched: %d calls", n)
	}
}

// pluginCall is one request the test plugin received (its /calls).
type pluginCall struct {
	Method  string         `json:"method"`
	Request map[string]any `json:"request"`
}

func pluginCalls(t *testing.T, control, method string) []pluginCall {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status, body, err := get(ctx, control+"/calls?method="+url.QueryEscape(method))
	if err != nil || status != http.StatusOK {
		t.Fatalf("plugin calls: %d %v %s", status, err, body)
	}
	var calls []pluginCall
	if err := json.Unmarshal(body, &calls); err != nil {
		t.Fatalf("plugin calls %s: %v", body, err)
	}
	return calls
}

// publishJetStream publishes payload on subject with the Nats-Msg-Id
// msgID over NATS's text protocol (CONNECT, SUB, HPUB with a reply inbox)
// and waits for JetStream's acknowledgement, as a producer's js.Publish
// does.
func publishJetStream(t *testing.T, natsURL, subject, msgID string, payload any) {
	t.Helper()
	u, err := url.Parse(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	inbox := "_INBOX.e2e." + randHex(8)
	headers := "NATS/1.0\r\nNats-Msg-Id: " + msgID + "\r\n\r\n"
	r := bufio.NewReader(conn)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("nats: %q %v", line, err)
	}
	fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true,\"no_responders\":true,\"protocol\":1,\"name\":\"e2e\"}\r\n")
	fmt.Fprintf(conn, "SUB %s 1\r\n", inbox)
	fmt.Fprintf(conn, "HPUB %s %s %d %d\r\n%s%s\r\n", subject, inbox, len(headers), len(headers)+len(body), headers, body)
	fmt.Fprintf(conn, "PING\r\n")
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("nats: no acknowledgement: %v", err)
		}
		line = strings.TrimRight(line, "\r\n")
		f := strings.Fields(line)
		switch {
		case len(f) == 0, f[0] == "+OK", f[0] == "PONG", f[0] == "INFO":
		case f[0] == "PING":
			fmt.Fprintf(conn, "PONG\r\n")
		case f[0] == "-ERR":
			t.Fatalf("nats: %s", line)
		case f[0] == "MSG" && len(f) == 4, f[0] == "HMSG" && len(f) == 5:
			n, _ := strconv.Atoi(f[len(f)-1])
			msg := make([]byte, n+2)
			if _, err := io.ReadFull(r, msg); err != nil {
				t.Fatal(err)
			}
			msg = msg[:n]
			if f[0] == "HMSG" { // a status only (503: no stream takes the subject)
				t.Fatalf("nats: publish not acknowledged: %q", msg)
			}
			var ack struct {
				Stream string `json:"stream"`
				Error  *struct {
					Description string `json:"description"`
				} `json:"error"`
			}
			if err := json.Unmarshal(msg, &ack); err != nil || ack.Error != nil || ack.Stream == "" {
				t.Fatalf("nats: acknowledgement %s", msg)
			}
			return
		default:
			t.Fatalf("nats: unexpected %q", line)
		}
	}
}
