package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/devinfra"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	"github.com/nubes-io/nubes/services/monitoring"
	"github.com/nubes-io/nubes/services/notification"
)

// monitoringScript is how many distinct parse answers the fake plugin
// holds: each ingest call takes the next, so every call stores a new
// event (past the end, the last answer repeats and calls become
// duplicates, which the table says).
const monitoringScript = 60000

// measureMonitoring measures the monitoring service on its own server,
// events per second from the webhook ingest URL to an alert (no token;
// body read, access key checked, Event.parse through a fake gRPC plugin,
// the event stored, applied to its alert under its key's lease and
// queued for JetStream through the outbox; the answer comes once the
// alert is stored), and note create beside it, each at -concurrency
// callers for -duration:
//
//	ingest new alert   every event a new key: a new alert, numbered under the domain's lease
//	ingest to notification  the same events, from the first ingest to the last notification
//	                   the protocol plugin received (escalation's first step, the outbox,
//	                   the notification service's fan-out and dispatcher, a project channel)
//	ingest open alert  every event the same key in another body: the open alert counts it
//	note create        a note on one of the alerts the first phase opened
//
// There is no raw side: the figures are ops/s, p50 and p99; read the
// ingest figures against note create's.
//
// -ops selects both by the name "monitoring"; nil when -ops names other
// operations only.
func (b *bench) measureMonitoring(ctx context.Context, db *mongo.Database) ([]result, error) {
	if len(b.cfg.ops) > 0 && !slices.Contains(b.cfg.ops, "monitoring") {
		return nil, nil
	}
	log := slog.New(slog.DiscardHandler)
	if b.cfg.verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	fp, err := fakeplugin.New(fakeplugin.Options{})
	if err != nil {
		return nil, err
	}
	defer fp.Stop()
	replies := make([]fakeplugin.Reply, monitoringScript)
	for i := range replies {
		replies[i] = fakeplugin.Reply{Result: map[string]any{"results": []any{map[string]any{
			"event_key": fmt.Sprintf("bench-%d", i), "event_type": "ALERT", "title": "bench", "severity": "INFO"}}}}
	}
	const parseMethod = "spaceone.api.monitoring.plugin.Event/parse"
	fp.Script(parseMethod, replies...)
	// The protocol plugin of the project's channel: it records each
	// dispatch and answers at once.
	pp, err := fakeplugin.New(fakeplugin.Options{})
	if err != nil {
		return nil, err
	}
	defer pp.Stop()
	plugins, err := plugin.New(map[string]string{"plugin-bench-webhook": fp.Endpoint, "plugin-bench-protocol": pp.Endpoint}, plugin.Options{Log: log})
	if err != nil {
		return nil, err
	}
	defer plugins.Close()
	dir, err := os.MkdirTemp("", "nubes-bench-nats-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	nats, err := devinfra.StartNATS(dir, "127.0.0.1", 0)
	if err != nil {
		return nil, err
	}
	defer nats.Stop()
	bus, err := events.Connect(ctx, nats.URL, "bench-monitoring", log)
	if err != nil {
		return nil, err
	}
	defer bus.Close()

	cfg := monitoring.DefaultConfig()
	cfg.IngestRate, cfg.WorkspaceRate = 0, 0 // the bench measures the path, not the limits
	// The escalation's passes would compete with the ingest for the
	// alerts' leases at random moments: not measured here.
	cfg.EscalationTick = time.Hour
	identityURL, stopIdentity, err := fakeIdentity()
	if err != nil {
		return nil, err
	}
	defer stopIdentity()
	svc, err := monitoring.Build(ctx, app.Deps{DB: db, Log: log, Plugins: plugins, Events: bus,
		Services: call.NewServices(map[string]string{"identity": identityURL}, "bench-service-token", nil)}, cfg)
	if err != nil {
		return nil, err
	}
	noti, err := notification.Build(ctx, app.Deps{DB: db, Log: log, Plugins: plugins, Events: bus, Services: call.NewServices(nil, "", nil)},
		notification.Config{Keys: benchKeys, Dispatch: notification.DefaultDispatch()})
	if err != nil {
		return nil, err
	}
	if err := seedAlertChannel(ctx, db); err != nil {
		return nil, err
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	defer stopWorkers()
	for _, w := range append(svc.Workers, noti.Workers...) {
		go func() { _ = w(wctx) }()
	}
	signer, err := auth.GenerateSigner()
	if err != nil {
		return nil, err
	}
	verifier, err := auth.NewVerifier(auth.JWKSOf(signer))
	if err != nil {
		return nil, err
	}
	token, err := signer.Issue(auth.Principal{DomainID: benchDomain, UserID: "bench-admin", Role: auth.DomainAdmin}, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	srv, err := server.New(server.Options{Name: monitoring.Name, Auth: verifier, Logger: log, Raw: svc.Raw}, svc.Routes...)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	base := "http://" + ln.Addr().String()

	// A webhook as monitoring stores it (creating one needs identity and
	// the repository, which the bench does not run).
	id, key := "webhook-00000000bec4", "0123456789abcdef0123456789abcdef"
	if _, err := db.Collection("monitoring_webhooks").InsertOne(ctx, bson.D{
		{Key: "_id", Value: id}, {Key: "webhook_id", Value: id}, {Key: "name", Value: "bench"}, {Key: "state", Value: "ENABLED"},
		{Key: "access_key", Value: key}, {Key: "webhook_url", Value: ""}, {Key: "capability", Value: bson.D{}},
		{Key: "plugin_info", Value: bson.D{{Key: "plugin_id", Value: "plugin-bench-webhook"}, {Key: "version", Value: ""},
			{Key: "options", Value: bson.D{}}, {Key: "metadata", Value: bson.D{}}, {Key: "upgrade_mode", Value: "AUTO"}}},
		{Key: "tags", Value: bson.D{}}, {Key: "domain_id", Value: benchDomain}, {Key: "workspace_id", Value: "workspace-bench"},
		{Key: "project_id", Value: "project-bench"}, {Key: "created_at", Value: time.Now().UTC()},
	}); err != nil {
		return nil, err
	}
	post := func(ctx context.Context, path, bearer string, body []byte) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := b.http.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d %s", path, resp.StatusCode, truncate(data, 160))
		}
		return nil
	}
	ingestPath := "/monitoring/v1/webhook/" + id + "/" + key + "/events"
	// Bodies differ call by call: the same body again would be the
	// sender's retry, a duplicate.
	var seq atomic.Int64
	body := func() []byte { return fmt.Appendf(nil, `{"alert": "cpu", "n": %d}`, seq.Add(1)) }
	var alertIDs []string
	ops := []struct {
		name   string
		before func() error
		fn     func(context.Context, *rand.Rand) error
	}{
		{"ingest new alert", nil, func(ctx context.Context, r *rand.Rand) error { return post(ctx, ingestPath, "", body()) }},
		{"ingest open alert", func() error {
			fp.Script(parseMethod, fakeplugin.Reply{Result: map[string]any{"results": []any{map[string]any{
				"event_key": "bench-open", "event_type": "ALERT", "title": "bench", "severity": "CRITICAL"}}}})
			return post(ctx, ingestPath, "", body()) // opens it
		}, func(ctx context.Context, r *rand.Rand) error { return post(ctx, ingestPath, "", body()) }},
		{"note create", func() error {
			cur, err := db.Collection("monitoring_alerts").Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetLimit(1000))
			if err != nil {
				return err
			}
			var docs []struct {
				ID string `bson:"_id"`
			}
			if err := cur.All(ctx, &docs); err != nil {
				return err
			}
			for _, d := range docs {
				alertIDs = append(alertIDs, d.ID)
			}
			if len(alertIDs) == 0 {
				return errors.New("monitoring: no alert to write notes on")
			}
			return nil
		}, func(ctx context.Context, r *rand.Rand) error {
			return post(ctx, "/monitoring/v1/note/create", token, fmt.Appendf(nil, `{"alert_id": %q, "note": "looking into it"}`, alertIDs[r.IntN(len(alertIDs))]))
		}},
	}
	progress("monitoring: %s per operation, concurrency %d", b.cfg.duration, b.cfg.concurrency)
	var out []result
	for _, o := range ops {
		b.settle()
		if o.before != nil {
			if err := o.before(); err != nil {
				return nil, err
			}
		}
		progress("monitoring: %s", o.name)
		// -cpuprofile: the phase, and for the first the wait for its
		// notifications (the whole pipeline runs in this process).
		stopProfile, err := b.startProfile("monitoring-"+strings.ReplaceAll(o.name, " ", "-"), "nubes")
		if err != nil {
			return nil, err
		}
		start := time.Now()
		p := b.run(ctx, b.cfg.concurrency, o.fn)
		out = append(out, result{op: operation{name: "monitoring " + o.name}, nubes: p})
		if ctx.Err() != nil {
			stopProfile()
			return nil, errors.Join(ctx.Err(), errors.New("monitoring bench interrupted"))
		}
		if len(out) == 1 {
			// Every alert the phase opened is notified once (the default
			// policy's one message): events per second from the first
			// ingest to the last dispatch the plugin received.
			progress("monitoring: waiting for the notifications of %d alerts", len(p.lat))
			e2e, err := waitDispatches(ctx, pp, len(p.lat), p.cut+p.errors, start, b.cfg.duration)
			if err != nil {
				stopProfile()
				return nil, err
			}
			out = append(out, result{op: operation{name: "monitoring ingest to notification"}, nubes: e2e})
		}
		stopProfile()
	}
	// Every answered event is stored and applied: one alert per new key,
	// numbered 1..n, and the open alert counted every event of its key.
	// A call cut at the phase's hard stop, or answered with an error
	// after the store took it, may have stored its event: it counts
	// towards the bound, not the exact number.
	newAlerts, opened := int64(len(out[0].nubes.lat)), int64(len(out[2].nubes.lat))
	unsure, unsureOpen := int64(out[0].nubes.cut+out[0].nubes.errors), int64(out[2].nubes.cut+out[2].nubes.errors)
	alerts, err := db.Collection("monitoring_alerts").CountDocuments(ctx, bson.D{})
	if err != nil {
		return nil, err
	}
	if want := min(newAlerts, monitoringScript) + 1; alerts < want || alerts > want+unsure {
		return nil, fmt.Errorf("monitoring: %d alerts stored, want %d (up to %d more of calls cut or failed)", alerts, want, unsure)
	}
	var open struct {
		EventCount int64 `bson:"event_count"`
	}
	if err := db.Collection("monitoring_alerts").FindOne(ctx, bson.D{{Key: "event_key", Value: "bench-open"}}).Decode(&open); err != nil {
		return nil, err
	}
	if open.EventCount < opened+1 || open.EventCount > opened+1+unsureOpen {
		return nil, fmt.Errorf("monitoring: the open alert counted %d events, %d were answered (%d cut or failed)", open.EventCount, opened+1, unsureOpen)
	}
	return out, nil
}

// dispatchMethod is the protocol plugin's Notification.dispatch.
const dispatchMethod = string(plugin.NotificationDispatch)

// waitDispatches waits until the protocol plugin received n dispatches
// (bounded by 10 durations, then 2 minutes of no progress) and returns
// the phase from start to the last of them: its ops/s are events per
// second from the webhook to the notification; latencies are not kept
// (a dispatch is not tied to its event).
//
// extra alerts may have been stored by calls cut or failed: up to that
// many more dispatches are theirs.
func waitDispatches(ctx context.Context, pp *fakeplugin.Server, n, extra int, start time.Time, d time.Duration) (phase, error) {
	deadline := time.Now().Add(max(10*d, 2*time.Minute))
	last, seen := time.Now(), 0
	for {
		got := len(pp.Calls(dispatchMethod))
		if got > seen {
			seen, last = got, time.Now()
		}
		if got >= n {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) || time.Since(last) > 2*time.Minute {
			return phase{}, fmt.Errorf("monitoring: %d of %d alerts notified", got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := len(pp.Calls(dispatchMethod)); got > n+extra {
		return phase{}, fmt.Errorf("monitoring: %d dispatches for %d alerts (and %d calls cut or failed)", got, n, extra)
	}
	return phase{lat: make([]time.Duration, n), elapsed: last.Sub(start)}, nil
}

// seedAlertChannel stores what the bench project's alerts are notified
// through: a protocol on the fake plugin and one project channel of the
// bench project taking every level (creating them through the API needs
// identity and the repository, which the bench does not run).
func seedAlertChannel(ctx context.Context, db *mongo.Database) error {
	const protocolID, channelID = "protocol-00000000bec4", "project-ch-00000000bec4"
	now := time.Now().UTC()
	if _, err := db.Collection(protocolsCollection).InsertOne(ctx, protocolDoc{ID: protocolID, ProtocolID: protocolID, Name: "bench alerts",
		State: "ENABLED", ProtocolType: "EXTERNAL", ResourceType: "identity.Project", Capability: map[string]any{},
		PluginInfo: map[string]any{"plugin_id": "plugin-bench-protocol", "version": "1.0", "options": map[string]any{},
			"metadata": map[string]any{"data_type": "PLAIN_TEXT"}, "upgrade_mode": "AUTO"},
		Tags: map[string]any{}, DomainID: benchDomain, CreatedAt: now}); err != nil && !mongo.IsDuplicateKeyError(err) {
		return err
	}
	_, err := db.Collection("notification_project_channels").InsertOne(ctx, bson.D{
		{Key: "_id", Value: channelID}, {Key: "project_channel_id", Value: channelID}, {Key: "name", Value: "bench"}, {Key: "state", Value: "ENABLED"},
		{Key: "data", Value: bson.D{{Key: "webhook_url", Value: "https://hooks.example.com/bench"}}}, {Key: "is_subscribe", Value: false},
		{Key: "subscriptions", Value: bson.A{}}, {Key: "notification_level", Value: "LV1"}, {Key: "is_scheduled", Value: false},
		{Key: "tags", Value: bson.D{}}, {Key: "protocol_id", Value: protocolID}, {Key: "project_id", Value: "project-bench"},
		{Key: "workspace_id", Value: "workspace-bench"}, {Key: "domain_id", Value: benchDomain}, {Key: "created_at", Value: now}})
	if mongo.IsDuplicateKeyError(err) {
		return nil
	}
	return err
}

func printMonitoringTable(w io.Writer, rs []result) {
	fmt.Fprintf(w, "\nmonitoring (own server, fake gRPC plugins, JetStream outbox, the notification service beside it): ingest ops/s are events/s from the webhook to a stored alert; ingest to notification from the first event to the last dispatch the protocol plugin received\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tops/s\tp50 ms\tp99 ms\terrors\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%.2f\t%d\t\n", r.op.name, r.nubes.opsPerSec(), r.nubes.percentile(.5), r.nubes.percentile(.99), r.nubes.errors)
		if r.nubes.firstErr != "" {
			fmt.Fprintf(tw, "  first error: %s\t\t\t\t\t\n", r.nubes.firstErr)
		}
	}
	_ = tw.Flush()
}
