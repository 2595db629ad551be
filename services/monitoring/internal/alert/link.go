package alert

import (
	"context"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/alertlink"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/store"
)

// The acknowledge link (pkg/alertlink) on upstream's path. A GET changes
// nothing: it answers a page whose button POSTs to the same URL, because
// mail scanners and link previews fetch links, and a fetched link must not
// acknowledge an alert for nobody. The POST (or update-state with the
// token as access_key) acknowledges a TRIGGERED alert once: the link's
// nonce is spent by inserting it (the only write FerretDB makes
// atomically), so a second use, even at the same time, is refused.

// LinkPath is the route of the link (echo syntax).
const LinkPath = alertlink.PathPrefix + ":domain_id/alert/:alert_id/:access_key/:state"

// LinkURL is a new acknowledge link of the alert, "" when links are off
// (no keys).
func (as *Alerts) LinkURL(a *Alert) (string, error) {
	if as.cfg.Keys == nil {
		return "", nil
	}
	return alertlink.URL(as.cfg.Keys, as.cfg.BaseURL, a.DomainID, a.AlertID, alertlink.Acknowledged, as.cfg.LinkTTL, as.clock.Now())
}

// Raw are the link's routes.
func (as *Alerts) Raw() []server.Raw {
	return []server.Raw{
		{Method: http.MethodGet, Path: LinkPath, Handle: as.linkPage},
		{Method: http.MethodPost, Path: LinkPath, Handle: as.linkUse},
	}
}

var alertIDPattern = regexp.MustCompile(`^alert-[0-9a-f]{12}$`)

// verify opens a link's token for the alert (domainID "" takes the
// alert's own) without spending it. A link names its domain, so its
// token, sealed, is checked before the store is read: a stranger's
// guess costs no read. Only the API's update-state, which names no
// domain, reads the alert first.
func (as *Alerts) verify(ctx context.Context, domainID, alertID, state, token string) (*Alert, alertlink.Claim, error) {
	if as.cfg.Keys == nil || !alertIDPattern.MatchString(alertID) || state != alertlink.Acknowledged {
		return nil, alertlink.Claim{}, errs.NotFound("alert_id", alertID)
	}
	open := func(domainID string) (alertlink.Claim, error) {
		c, err := alertlink.Open(as.cfg.Keys, domainID, alertID, state, token, as.clock.Now())
		switch {
		case errors.Is(err, alertlink.ErrExpired):
			return c, errs.New(errs.PermissionDenied, "The link has expired.")
		case err != nil:
			return c, errs.New(errs.PermissionDenied, "The link is not valid.")
		}
		return c, nil
	}
	var c alertlink.Claim
	if domainID != "" {
		var err error
		if c, err = open(domainID); err != nil {
			return nil, c, err
		}
	}
	a, err := as.Live(ctx, alertID)
	if err != nil {
		return nil, alertlink.Claim{}, err
	}
	if domainID == "" {
		if c, err = open(a.DomainID); err != nil {
			return nil, c, err
		}
	} else if domainID != a.DomainID {
		return nil, c, errs.New(errs.PermissionDenied, "The link is not valid.")
	}
	return a, c, nil
}

type spent struct {
	ID        string    `bson:"_id"`
	ExpiresAt time.Time `bson:"expires_at"`
}

func spentID(nonce string) string { return "alert-link#" + nonce }

// acknowledge uses a link: verify, spend, and move a TRIGGERED alert to
// ACKNOWLEDGED (any other state is left as it is, as upstream).
func (as *Alerts) acknowledge(ctx context.Context, domainID, alertID, state, token, responder string) (*Alert, error) {
	a, c, err := as.verify(ctx, domainID, alertID, state, token)
	if err != nil {
		return nil, err
	}
	if _, err := as.claims.InsertOne(ctx, spent{ID: spentID(c.Nonce), ExpiresAt: c.Expires}); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, errs.New(errs.PermissionDenied, "The link has been used already.")
		}
		return nil, store.Wrap(err)
	}
	if responder == "" {
		responder = "link"
	}
	now := as.clock.Now()
	ch, err := as.Change(ctx, a.ID, func(a *Alert) error {
		if a.State == Triggered {
			MoveTo(a, Acknowledged, responder, now)
		}
		return nil
	})
	if err != nil {
		// Not acknowledged: the link may be tried again.
		_, _ = as.claims.DeleteOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: spentID(c.Nonce)}})
		return nil, err
	}
	return ch.After, nil
}

// PurgeSpent deletes the spent links past their expiry (they open no more).
func (as *Alerts) PurgeSpent(ctx context.Context) error {
	_, err := as.claims.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$gt", Value: "alert-link#"}, {Key: "$lt", Value: "alert-link#~"}}},
		{Key: "expires_at", Value: bson.D{{Key: "$lt", Value: as.clock.Now()}}}})
	return store.Wrap(err)
}

func (as *Alerts) updateStateOp(ctx context.Context, _ *auth.Principal, r *updateState) (*Alert, error) {
	state := r.State
	if state == "" {
		state = alertlink.Acknowledged
	}
	return as.acknowledge(ctx, "", r.AlertID, state, r.AccessKey, r.Responder)
}

var page = template.Must(template.New("ack").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><meta name="robots" content="noindex"><title>Acknowledge alert #{{.AlertNumber}}</title></head>
<body><p>Alert #{{.AlertNumber}}: {{.Title}} ({{.State}})</p>
<form method="post"><label>Responder <input name="responder"></label> <button type="submit">Acknowledge</button></form></body></html>
`))

// guard runs a link call under the per-source bound of refusals.
func (as *Alerts) guard(w http.ResponseWriter, r *http.Request, fn func() error) error {
	if as.cfg.Failures == nil {
		return fn()
	}
	return as.cfg.Failures.Guard(w, auth.SourceFromContext(r.Context()), as.clock.Now(), fn)
}

func (as *Alerts) linkPage(w http.ResponseWriter, r *http.Request) error {
	var a *Alert
	err := as.guard(w, r, func() (err error) {
		a, _, err = as.verify(r.Context(), r.PathValue("domain_id"), r.PathValue("alert_id"), r.PathValue("state"), r.PathValue("access_key"))
		return err
	})
	if err != nil {
		return err
	}
	linkHeaders(w, "text/html; charset=utf-8")
	return page.Execute(w, linkAnswerOf(a))
}

// linkAnswer is all a link's page and POST tell its holder, who may be
// anyone the notification was forwarded to: the alert's number, title
// and state.
type linkAnswer struct {
	AlertNumber int64  `json:"alert_number"`
	Title       string `json:"title"`
	State       string `json:"state"`
}

func linkAnswerOf(a *Alert) linkAnswer {
	return linkAnswer{AlertNumber: a.AlertNumber, Title: a.Title, State: a.State}
}

// linkHeaders: nothing caches the answer, and no other site frames the
// page (a framed button is clickjacking).
func linkHeaders(w http.ResponseWriter, contentType string) {
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer")
}

func (as *Alerts) linkUse(w http.ResponseWriter, r *http.Request) error {
	responder := r.URL.Query().Get("responder")
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4096))
	if err != nil {
		return errs.New(errs.RequestTooLarge, "The request body is larger than 4096 bytes.")
	}
	switch ct := r.Header.Get("Content-Type"); {
	case strings.HasPrefix(ct, "application/json") && len(strings.TrimSpace(string(body))) > 0:
		var b struct {
			Responder string `json:"responder"`
		}
		if err := json.Unmarshal(body, &b); err != nil {
			return errs.New(errs.JSONFormat, "The body is not valid JSON.")
		}
		if b.Responder != "" {
			responder = b.Responder
		}
	case strings.HasPrefix(ct, "application/x-www-form-urlencoded"):
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		if err := r.ParseForm(); err == nil && r.PostForm.Get("responder") != "" {
			responder = r.PostForm.Get("responder")
		}
	}
	if len(responder) > 255 {
		return errs.Invalid("responder", "at most 255 characters")
	}
	var a *Alert
	err = as.guard(w, r, func() (err error) {
		a, err = as.acknowledge(r.Context(), r.PathValue("domain_id"), r.PathValue("alert_id"), r.PathValue("state"), r.PathValue("access_key"), responder)
		return err
	})
	if err != nil {
		return err
	}
	linkHeaders(w, "application/json")
	return json.NewEncoder(w).Encode(linkAnswerOf(a))
}
