// Package ingest serves a webhook's public ingest URL,
// POST /monitoring/v1/webhook/<webhook_id>/<access_key>/events, the most
// exposed endpoint of the suite: no token, the access key compared in
// constant time, a bounded body read within a deadline, a rate limit per
// webhook, the plugin's Event.parse within a deadline, and a body kept
// for retry when the plugin cannot answer. Every refusal is a 4xx with
// nothing stored; a plugin that fails or hangs is a 502 or 504; never a
// 500.
//
// It holds no rule of the webhook resource itself (package webhook).
package ingest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/batch"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/ratelimit"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/monitoring/internal/alert"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
	"github.com/nubes-io/nubes/services/monitoring/internal/event"
)

// Path is the ingest route (echo syntax).
const Path = "/monitoring/v1/webhook/:webhook_id/:access_key/events"

// MaxBody is the largest body accepted (1 MiB).
const MaxBody = 1 << 20

// MaxEvents bounds the events one body may yield.
const MaxEvents = 1000

// Config tunes the ingest.
type Config struct {
	Rate  float64 // events per second per webhook (per replica); <= 0: unlimited
	Burst int     // bucket size
	// WorkspaceRate and WorkspaceBurst bound a workspace's webhooks
	// together (events per second per replica), so that one workspace's
	// many webhooks cannot take the store from the others.
	WorkspaceRate  float64
	WorkspaceBurst int
	// Failures bound the refused calls of each source address (a wrong
	// key, an unknown webhook): past its burst a source is refused (429)
	// before its key is looked at. Shared with the alert links.
	Failures *ratelimit.Buckets
	// Keys make access keys that prove themselves (core.CheckKey); nil:
	// every key is checked against the store.
	Keys          *seal.Keyring
	ParseTimeout  time.Duration // Event.parse deadline
	ReadTimeout   time.Duration // body read deadline
	RetryInterval time.Duration // retry worker period
	MaxAttempts   int           // tries of a kept body before it becomes an error event
	MaxKept       int           // bodies kept per webhook; one past it is dropped (503); <= 0: 1000
	// Opened is told of each alert an event opened (the escalation's
	// first step); nil: nobody.
	Opened alert.Opener
	// Clock stamps the events stored (created_at, which the dedupe window
	// of alerting reads) and is the rate limits' time.
	Clock core.Clock
	// Live, when set, checks that the webhook's project or workspace is
	// still live (identity: core.Projects.Live) once the key matched: a
	// deleted one's URL is 404 before the deletion's cascade arrives.
	Live func(ctx context.Context, wh *core.Webhook) error
}

// Ingest serves the ingest URL and retries kept bodies.
type Ingest struct {
	webhooks *mongo.Collection
	pending  *mongo.Collection
	events   *event.Store
	alerting *event.Alerting
	counters *core.Counters
	plugins  *plugin.Client
	limit    *ratelimit.Buckets // per webhook
	spaces   *ratelimit.Buckets // per workspace
	group    *batch.Group[*event.Event, event.Outcome]
	cfg      Config
	log      *slog.Logger
}

// New builds the ingest.
func New(ctx context.Context, db *mongo.Database, evs *event.Store, alerting *event.Alerting, counters *core.Counters, plugins *plugin.Client,
	cfg Config, log *slog.Logger) (*Ingest, error) {
	in := &Ingest{webhooks: db.Collection(core.WebhooksCollection), pending: db.Collection(core.PendingCollection), events: evs, alerting: alerting,
		counters: counters, plugins: plugins, limit: ratelimit.New(cfg.Rate, cfg.Burst), spaces: ratelimit.New(cfg.WorkspaceRate, cfg.WorkspaceBurst),
		cfg: cfg, log: log}
	in.group = &batch.Group[*event.Event, event.Outcome]{Run: in.takeMany, Max: maxBatch}
	if in.cfg.Failures == nil {
		in.cfg.Failures = ratelimit.New(0, 0)
	}
	return in, in.ensurePending(ctx)
}

// Raw is the route of the ingest URL.
func (in *Ingest) Raw() server.Raw {
	return server.Raw{Method: http.MethodPost, Path: Path, Handle: in.handle}
}

var webhookIDPattern = regexp.MustCompile(`^webhook-[0-9a-f]{12}$`)

// Response is the answer to an accepted body.
type Response struct {
	Results []event.Outcome `json:"results"`
	// Error is set when the plugin could not parse the body: the error
	// event stored for it is in Results.
	Error string `json:"error,omitempty"`
}

func (in *Ingest) handle(w http.ResponseWriter, r *http.Request) error {
	err := in.serve(w, r)
	if err == nil {
		return nil
	}
	if _, ok := errs.As(err); !ok {
		// Never a 500 on the public URL: what is not a client's fault here
		// is the store.
		return errs.Down("The store", err)
	}
	return err
}

func (in *Ingest) serve(w http.ResponseWriter, r *http.Request) error {
	var wh *core.Webhook
	now := in.cfg.Clock.Now()
	err := in.cfg.Failures.Guard(w, auth.SourceFromContext(r.Context()), now, func() (err error) {
		if wh, err = in.webhook(r.Context(), r.PathValue("webhook_id"), r.PathValue("access_key")); err != nil {
			return err
		}
		// Its project deleted: the URL refuses at once, before the
		// cascade deletes the webhook.
		if in.cfg.Live != nil {
			if err := in.cfg.Live(r.Context(), wh); err != nil {
				if errs.Is(err, errs.NotFoundCode) {
					return errs.NotFound("webhook_id", wh.WebhookID)
				}
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if wh.State != core.Enabled {
		return errs.New(errs.WebhookStateDisabled, "The webhook is disabled. (webhook_id = %s)", wh.WebhookID)
	}
	if ok, wait := in.limit.Allow(wh.WebhookID, now); !ok {
		return ratelimit.Refuse(w, wait, "Too many requests for this webhook; retry later.")
	}
	if ok, wait := in.spaces.Allow(spaceKey(wh), now); !ok {
		return ratelimit.Refuse(w, wait, "Too many requests for this workspace's webhooks; retry later.")
	}
	id := wh.WebhookID
	body, data, err := in.readBody(w, r)
	if err != nil {
		in.counters.Add(id, true)
		return err
	}
	// The work goes on if the sender hangs up: what is stored must be
	// complete, and a parse in flight must not be lost.
	ctx := context.WithoutCancel(r.Context())
	res, perr := in.parse(ctx, wh, body, data)
	in.counters.Add(id, perr != nil || res.Error != "")
	if perr != nil {
		return perr
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(res)
}

// webhook returns the webhook id whose access key is key. A key that
// proves itself is checked before the store is read: a stranger's guess
// costs no read. Every refusal looks alike to the caller.
func (in *Ingest) webhook(ctx context.Context, id, key string) (*core.Webhook, error) {
	if !webhookIDPattern.MatchString(id) {
		return nil, errs.NotFound("webhook_id", id)
	}
	denied := errs.New(errs.PermissionDenied, "Permission denied: the access key does not match.")
	if core.CheckKey(in.cfg.Keys, id, key) == core.KeyRefused {
		return nil, denied
	}
	wh, err := store.GetLive[core.Webhook](ctx, in.webhooks, "webhook_id", id)
	if err != nil {
		return nil, err
	}
	// Hashes first: equal lengths, so the comparison time says nothing of
	// the key, not even its length.
	given, want := sha256.Sum256([]byte(key)), sha256.Sum256([]byte(wh.AccessKey))
	if subtle.ConstantTimeCompare(given[:], want[:]) != 1 || wh.AccessKey == "" {
		return nil, denied
	}
	return wh, nil
}

func spaceKey(wh *core.Webhook) string { return wh.DomainID + "/" + wh.WorkspaceID }

// charge pays for n more events of one body (Response): the webhook's
// and its workspace's buckets go into debt, and refuse until it is paid.
func (in *Ingest) charge(wh *core.Webhook, n int) {
	now := in.cfg.Clock.Now()
	in.limit.Charge(wh.WebhookID, n, now)
	in.spaces.Charge(spaceKey(wh), n, now)
}

// readBody reads one JSON object of at most MaxBody bytes within the
// read deadline.
func (in *Ingest) readBody(w http.ResponseWriter, r *http.Request) (string, map[string]any, error) {
	rc := http.NewResponseController(w)
	if in.cfg.ReadTimeout > 0 {
		_ = rc.SetReadDeadline(time.Now().Add(in.cfg.ReadTimeout)) // not supported by test recorders
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		// The rest of the body is not worth waiting for: the connection
		// closes after the answer (and the deadline stays set).
		w.Header().Set("Connection", "close")
		var tooBig *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &tooBig):
			return "", nil, errs.New(errs.RequestTooLarge, "The request body is larger than %d bytes.", MaxBody)
		case errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
			return "", nil, errs.New(errs.RequestTimeout, "The request body did not arrive within %s.", in.cfg.ReadTimeout)
		}
		return "", nil, errs.New(errs.JSONFormat, "The request body could not be read.")
	}
	if in.cfg.ReadTimeout > 0 {
		_ = rc.SetReadDeadline(time.Time{})
	}
	data, err := decodeObject(raw)
	if err != nil {
		return "", nil, err
	}
	return string(raw), data, nil
}

// decodeObject reads exactly one JSON object.
func decodeObject(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errs.New(errs.JSONFormat, "The body is not valid JSON.")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errs.New(errs.JSONFormat, "The body must be one JSON object, with nothing after it.")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errs.New(errs.JSONFormat, "The body must be a JSON object.")
	}
	return m, nil
}

// parse runs Event.parse and stores its events. A plugin that answered
// an error is a parse failure: one error event (as upstream) and an
// answer of 200 that says so. A plugin that cannot be reached or does
// not answer in time keeps the body for the retry worker and answers 502
// or 504.
func (in *Ingest) parse(ctx context.Context, wh *core.Webhook, raw string, data map[string]any) (*Response, error) {
	pctx, cancel := context.WithTimeout(ctx, in.cfg.ParseTimeout)
	results, err := plugin.Webhook{Target: in.plugins.Plugin(wh.PluginInfo.PluginID, wh.PluginInfo.Version)}.
		Parse(pctx, wire.Object(wh.PluginInfo.Options), data)
	cancel()
	now := in.cfg.Clock.Now()
	if err != nil {
		if code, transient := transient(err); transient {
			if kerr := in.keep(ctx, wh, raw, err); kerr != nil {
				return nil, kerr
			}
			return nil, errs.New(code, "The webhook's plugin did not parse the body (%s); it is kept and will be retried.", reason(err))
		}
		e := event.ParseError(wh, event.BodyKey(raw), reason(err), raw, now)
		out, serr := in.take(ctx, e)
		if serr != nil {
			return nil, serr
		}
		return &Response{Results: []event.Outcome{out}, Error: reason(err)}, nil
	}
	if len(results) > MaxEvents {
		e := event.ParseError(wh, event.BodyKey(raw), "the plugin returned more than 1000 events for one body", raw, now)
		out, serr := in.take(ctx, e)
		if serr != nil {
			return nil, serr
		}
		return &Response{Results: []event.Outcome{out}, Error: "too many events"}, nil
	}
	// The token taken for the body paid for one event; the rest are paid
	// after the fact, so a webhook's rate counts events, not requests.
	in.charge(wh, len(results)-1)
	evs, err := in.events.Delivery(ctx, wh, raw, results, now)
	if err != nil {
		return nil, err
	}
	outs, err := in.takeAll(ctx, evs)
	if err != nil {
		return nil, err
	}
	return &Response{Results: append([]event.Outcome{}, outs...)}, nil
}

// transient reports a failure worth another try (plugin.Retryable: the
// plugin unreachable, silent, or answering UNAVAILABLE), with the code
// the sender gets: the body is kept for the retry worker.
func transient(err error) (string, bool) {
	switch {
	case !plugin.Retryable(err):
		return "", false
	case plugin.TimedOut(err):
		return errs.WebhookPluginTimeout, true
	}
	return errs.WebhookPluginUnavailable, true
}

// retries is the kept bodies' policy: MaxAttempts tries, the wait after
// each doubling from RetryInterval up to 64 of them. No jitter: the retry
// worker's sweep every RetryInterval spreads the tries already, and the
// wait is the record's lease, read by the service's clock.
func (in *Ingest) retries() plugin.Policy {
	return plugin.Policy{Attempts: in.cfg.MaxAttempts, Base: in.cfg.RetryInterval, Max: 64 * in.cfg.RetryInterval}
}

func reason(err error) string {
	if e, ok := errs.As(err); ok {
		return e.Message
	}
	return "the plugin failed"
}
