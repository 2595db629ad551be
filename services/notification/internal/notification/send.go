// Upstream's notification operations for
// services: create (notify a project, a user or the domain through their
// channels, as a NotificationRequest does) and push (one message through
// one protocol, no channels, no inbox).

package notification

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/notification/internal/fanout"
)

type (
	createRequest struct {
		ResourceType      string         `json:"resource_type" v:"required,enum=identity.Project|identity.User|identity.Domain"`
		ResourceID        string         `json:"resource_id" v:"required,max=255"`
		Topic             string         `json:"topic" v:"required,max=255"`
		Message           map[string]any `json:"message" v:"required"`
		NotificationType  string         `json:"notification_type" v:"enum=INFO|ERROR|SUCCESS|WARNING"`
		NotificationLevel string         `json:"notification_level" v:"enum=ALL|LV1|LV2|LV3|LV4|LV5|LV6|LV7|LV8|LV9|LV10"`
		// DomainID: the domain a service acts in (upstream's x_domain_id);
		// default the token's.
		DomainID string `json:"domain_id" v:"max=64"`
	}
	pushRequest struct {
		ProtocolID        string         `json:"protocol_id" v:"required,max=64"`
		Data              map[string]any `json:"data" v:"required"`
		Message           map[string]any `json:"message" v:"required"`
		NotificationType  string         `json:"notification_type" v:"enum=INFO|ERROR|SUCCESS|WARNING"`
		NotificationLevel string         `json:"notification_level" v:"enum=ALL|LV1|LV2|LV3|LV4|LV5|LV6|LV7|LV8|LV9|LV10"`
		Topic             string         `json:"topic" v:"max=255"`
		DomainID          string         `json:"domain_id" v:"max=64"`
	}
)

// API serves create and push.
type API struct {
	Fanout *fanout.Fanout
	Bus    *events.Bus
}

// Routes are the operations: for services only (SYSTEM tokens), as
// upstream's system calls.
func (a API) Routes() []api.Route {
	const base = "/notification/v1/notification/"
	return []api.Route{
		api.Op[createRequest, api.Empty]{Path: base + "create", Access: auth.Service(), Summary: "Notify a project's channels, a user (channels and inbox) or the domain's admins, as a notification request does.", Handle: a.create},
		api.Op[pushRequest, api.Empty]{Path: base + "push", Access: auth.Service(), Summary: "Dispatch one message through one protocol with the given channel data (no channels, no inbox).", Handle: a.push},
	}
}

// message reads upstream's message Struct strictly: an unknown member is
// 400, title is required.
func message(m map[string]any) (events.NotificationMessage, error) {
	var out events.NotificationMessage
	raw, err := json.Marshal(m)
	if err != nil {
		return out, errs.Invalid("message", err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return out, errs.Invalid("message", strings.TrimPrefix(err.Error(), "json: "))
	}
	if strings.TrimSpace(out.Title) == "" {
		return out, errs.Required("message.title")
	}
	return out, nil
}

func domain(p *auth.Principal, domainID string) string {
	if domainID != "" {
		return domainID // Access lets only services in
	}
	return p.DomainID
}

func (a API) create(ctx context.Context, p *auth.Principal, r *createRequest) (*api.Empty, error) {
	msg, err := message(r.Message)
	if err != nil {
		return nil, err
	}
	req := events.NotificationRequest{ID: wire.NewID("noti-req"), DomainID: domain(p, r.DomainID), Topic: r.Topic,
		NotificationType: r.NotificationType, Level: r.NotificationLevel, Message: msg}
	switch r.ResourceType {
	case "identity.Project":
		req.ProjectID = r.ResourceID
	case "identity.User":
		req.UserIDs = []string{r.ResourceID}
	default: // identity.Domain: its admins (docs/decisions.md)
		req.DomainAdmins = true
	}
	return &api.Empty{}, a.Fanout.Handle(ctx, req)
}

func (a API) push(ctx context.Context, p *auth.Principal, r *pushRequest) (*api.Empty, error) {
	msg, err := message(r.Message)
	if err != nil {
		return nil, err
	}
	m, err := fanout.Message(msg)
	if err != nil {
		return nil, errs.Invalid("message", err.Error())
	}
	typ := r.NotificationType
	if typ == "" {
		typ = events.NotifyInfo
	}
	d := events.NotificationDispatch{ID: wire.NewID("noti-push"), DomainID: domain(p, r.DomainID), ProtocolID: r.ProtocolID,
		NotificationType: typ, Message: m, ChannelData: r.Data}
	if a.Bus == nil {
		return nil, errs.Down("The event bus", errNoBus{})
	}
	if err := a.Bus.Publish(ctx, events.NotificationDispatchSubject, d.ID, d); err != nil {
		return nil, errs.Down("The event bus", err)
	}
	return &api.Empty{}, nil
}

type errNoBus struct{}

func (errNoBus) Error() string { return "no event bus" }
