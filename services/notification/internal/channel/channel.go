// Package channel holds what project and user channels share: the checks
// of a channel's protocol, data, schedule and subscriptions, the sealing
// of a SECRET protocol's data, and the operations that read or change a
// channel the same way for both kinds (Ops). The kinds' own operations
// are in projectchannel and userchannel.
package channel

import (
	"context"
	"errors"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/jsonschema"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/notification/internal/core"
)

// Schemas of the built-in protocol's channel data (it has no plugin to
// declare one): a project channel names the users it reaches, a user
// channel the address its e-mail goes to (through the mailer).
var (
	builtinProject = mustCompile(map[string]any{"type": "object", "required": []any{"users"}, "additionalProperties": false,
		"properties": map[string]any{"users": map[string]any{"type": "array", "minItems": 1, "maxItems": 100,
			"items": map[string]any{"type": "string", "minLength": 1, "maxLength": 255}}}})
	builtinUser = mustCompile(map[string]any{"type": "object", "required": []any{"email"}, "additionalProperties": false,
		"properties": map[string]any{"email": map[string]any{"type": "string", "pattern": `^[^@\s]+@[^@\s]+\.[^@\s]+$`, "maxLength": 320}}})
)

func mustCompile(s map[string]any) *jsonschema.Schema {
	c, err := jsonschema.Compile(s)
	if err != nil {
		panic(err)
	}
	return c
}

// Schedule checks is_scheduled with schedule: without is_scheduled the
// schedule is null (upstream drops it); with it, a valid one is needed.
func Schedule(isScheduled bool, s *core.Schedule) (*core.Schedule, error) {
	if !isScheduled {
		return nil, nil
	}
	if s == nil {
		return nil, errs.Required("schedule")
	}
	if err := s.Check(); err != nil {
		return nil, errs.Invalid("schedule", err.Error())
	}
	out := *s
	out.DayOfWeek = slices.Compact(slices.Clone(s.DayOfWeek))
	return &out, nil
}

// Subscriptions: without is_subscribe the list is empty (upstream).
func Subscriptions(isSubscribe bool, topics []string) ([]string, error) {
	if !isSubscribe {
		return []string{}, nil
	}
	for _, t := range topics {
		if t == "" || len(t) > 255 {
			return nil, errs.Invalid("subscriptions", "a topic is 1 to 255 characters")
		}
	}
	return wire.List(slices.Compact(slices.Sorted(slices.Values(topics)))), nil
}

// Protocol loads a protocol of the domain: another domain's or an unknown
// one is 404; a DISABLED one is 400 ERROR_PROTOCOL_DISABLED when enabled
// is asked (a new channel needs an ENABLED protocol, upstream).
func Protocol(ctx context.Context, protocols *mongo.Collection, domainID, id string, enabled bool) (*core.Protocol, error) {
	var pr core.Protocol
	raw, err := protocols.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if err == nil {
		err = bson.Unmarshal(raw, &pr)
	}
	// One whose delete has begun takes no channel (store.Teardown).
	if errors.Is(err, mongo.ErrNoDocuments) || err == nil && (pr.DomainID != domainID || tenancy.IsMarked(raw)) {
		return nil, errs.NotFound("protocol_id", id)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if enabled && pr.State != core.Enabled {
		return nil, errs.New(errs.ProtocolDisabled, "The protocol is disabled. (protocol_id = %s)", id)
	}
	return &pr, nil
}

// Data checks a channel's data against its protocol's schema (or the
// built-in protocol's, for a user channel when user) and returns what the
// channel stores: the data itself for a PLAIN_TEXT protocol, or {} and the
// data sealed to the channel for a SECRET one.
func Data(pr *core.Protocol, data map[string]any, user bool, keys *seal.Keyring, channelID, domainID string) (map[string]any, *seal.Sealed, error) {
	if data == nil {
		return nil, nil, errs.Required("data")
	}
	var schema *jsonschema.Schema
	switch {
	case pr.ProtocolType == core.Internal && user:
		schema = builtinUser
	case pr.ProtocolType == core.Internal:
		schema = builtinProject
	case core.DataSchema(pr) != nil:
		var err error
		if schema, err = jsonschema.Compile(core.DataSchema(pr)); err != nil {
			// The plugin's own schema is broken: its settings, not the
			// client's data.
			return nil, nil, errs.New(errs.WrongPluginSettings, "The protocol's data schema is not valid. (protocol_id = %s)", pr.ProtocolID)
		}
	}
	if schema != nil {
		if err := schema.ValidateAt("data", data); err != nil {
			return nil, nil, err
		}
	}
	if core.DataType(pr) != "SECRET" {
		return data, nil, nil
	}
	s, err := keys.SealJSON(data, core.ChannelAD(channelID, domainID))
	if err != nil {
		return nil, nil, err
	}
	return map[string]any{}, &s, nil
}

// Users are the user ids a built-in protocol's project channel names
// (data.users), each once, in order.
func Users(data map[string]any) []string {
	var out []string
	add := func(v any) {
		if s, ok := v.(string); ok && s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	switch l := data["users"].(type) {
	case []any:
		for _, v := range l {
			add(v)
		}
	case bson.A:
		for _, v := range l {
			add(v)
		}
	case []string:
		for _, v := range l {
			add(v)
		}
	}
	return out
}

// Ops are the operations both kinds of channel answer alike.
type Ops[T any] struct {
	C        *mongo.Collection
	Resource query.Resource
	Key      string // project_channel_id | user_channel_id
}

// Set changes fields of a channel the caller may change.
func (o Ops[T]) Set(ctx context.Context, p *auth.Principal, id string, set bson.D) (*T, error) {
	if _, err := store.GetToChange[T](ctx, o.C, o.Resource, p, o.Key, id); err != nil {
		return nil, err
	}
	if len(set) == 0 {
		return store.GetFor[T](ctx, o.C, o.Resource, p, o.Key, id)
	}
	// _id alone is the filter FerretDB pushes down; the tenancy was
	// checked above and never changes.
	return store.SetByID[T](ctx, o.C, o.Key, id, set)
}

// Delete removes a channel, its sealed data with it.
func (o Ops[T]) Delete(ctx context.Context, p *auth.Principal, id string) (*api.Empty, error) {
	if _, err := store.GetToChange[T](ctx, o.C, o.Resource, p, o.Key, id); err != nil {
		return nil, err
	}
	res, err := o.C.DeleteOne(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound(o.Key, id)
	}
	return &api.Empty{}, nil
}

// Get reads a channel the caller reaches.
func (o Ops[T]) Get(ctx context.Context, p *auth.Principal, id string) (*T, error) {
	return store.GetFor[T](ctx, o.C, o.Resource, p, o.Key, id)
}

// List lists the channels the caller reaches.
func (o Ops[T]) List(ctx context.Context, p *auth.Principal, q *query.Query) (*api.List[T], error) {
	return store.SearchFor[T](ctx, o.C, q, o.Resource, p)
}

// Stat runs a statistics query over the channels the caller reaches.
func (o Ops[T]) Stat(ctx context.Context, p *auth.Principal, q *stat.Query) (*map[string]any, error) {
	res, err := stat.RunFor(ctx, o.C, p, o.Resource, q)
	return &res, err
}

// State returns the set of an enable or disable.
func State(state string) bson.D { return bson.D{{Key: "state", Value: state}} }

// ScheduleSet is the set of set_schedule.
func ScheduleSet(isScheduled bool, s *core.Schedule) (bson.D, error) {
	sch, err := Schedule(isScheduled, s)
	if err != nil {
		return nil, err
	}
	return bson.D{{Key: "is_scheduled", Value: isScheduled}, {Key: "schedule", Value: sch}}, nil
}

// SubscriptionSet is the set of set_subscription.
func SubscriptionSet(isSubscribe bool, topics []string) (bson.D, error) {
	subs, err := Subscriptions(isSubscribe, topics)
	if err != nil {
		return nil, err
	}
	return bson.D{{Key: "is_subscribe", Value: isSubscribe}, {Key: "subscriptions", Value: subs}}, nil
}
