package collectrun

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/inventory/internal/cloudservicetype"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

// upsertType writes a cloud service type the plugin reported, found by
// its key <provider>.<group>.<name> in the task's workspace (the match
// rule plugins send for types). Not counted, as upstream.
func (h *handler) upsertType(ctx context.Context, res map[string]any) error {
	if err := decodeJSONFields(res); err != nil {
		return err
	}
	f := cloudservicetype.Fields{Name: str(res["name"]), Provider: str(res["provider"]), Group: str(res["group"]),
		ServiceCode: str(res["service_code"]), ResourceType: str(res["resource_type"]), IsPrimary: res["is_primary"] == true,
		IsMajor: res["is_major"] == true, Metadata: obj(res["metadata"]), Tags: tags(res["tags"]), UpdatedBy: h.task.CollectorID}
	if labels, ok := res["labels"].([]any); ok {
		f.Labels = labels
	}
	for k, v := range map[string]string{"name": f.Name, "provider": f.Provider, "group": f.Group} {
		if v == "" {
			return errs.Required("resource." + k)
		}
	}
	if err := core.CheckAllKeys("resource.metadata", f.Metadata, "resource.tags", f.Tags); err != nil {
		return err
	}
	key := cloudservicetype.Key(f.Provider, f.Group, f.Name)
	for range 2 {
		t, err := cloudservicetype.Find(ctx, h.w.types, h.w.keys, h.task.DomainID, h.task.WorkspaceID, key)
		if err != nil {
			return err
		}
		if t == nil {
			_, err := cloudservicetype.Create(ctx, h.w.types, h.w.keys, h.task.DomainID, h.task.WorkspaceID, f)
			if errs.Is(err, errs.SaveUniqueValues) {
				continue // created meanwhile by another run: update it
			}
			return err
		}
		set := bson.D{{Key: "updated_at", Value: wire.T(wire.Now())}, {Key: "updated_by", Value: f.UpdatedBy}}
		add := func(k string, v any) { set = append(set, bson.E{Key: k, Value: v}) }
		for k, v := range map[string]any{"service_code": f.ServiceCode, "resource_type": f.ResourceType} {
			if _, ok := res[k]; ok {
				add(k, v)
			}
		}
		for k, v := range map[string]any{"is_primary": f.IsPrimary, "is_major": f.IsMajor, "metadata": f.Metadata, "tags": f.Tags, "labels": freeform.List(wire.List(f.Labels))} {
			if _, ok := res[k]; ok {
				add(k, v)
			}
		}
		_, err = h.w.types.UpdateOne(ctx, bson.D{{Key: "_id", Value: t.ID}}, bson.D{{Key: "$set", Value: set}})
		return store.Wrap(err)
	}
	return errs.Down("The cloud service type "+key, errors.New("claimed and released repeatedly"))
}

// upsertRegion writes a region the plugin reported, found by provider
// and region_code in the task's workspace. Not counted, as upstream.
func (h *handler) upsertRegion(ctx context.Context, res map[string]any) error {
	code, provider := str(res["region_code"]), str(res["provider"])
	if code == "" {
		return errs.Required("resource.region_code")
	}
	if err := core.CheckKeys("resource.tags", res["tags"]); err != nil {
		return err
	}
	key := core.RegionKeyOf(h.task.DomainID, h.task.WorkspaceID, provider, code)
	now := wire.T(wire.Now())
	var k core.Key
	err := h.w.keys.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&k)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		id := wire.NewID("region")
		if _, err := h.w.keys.InsertOne(ctx, core.Key{ID: key, Target: id, At: time.Now().UTC()}); err != nil {
			if mongo.IsDuplicateKeyError(err) {
				return nil // another run reports the same region at the same time
			}
			return store.Wrap(err)
		}
		r := &core.Region{ID: id, RegionID: id, Name: str(res["name"]), RegionKey: provider + "." + code, RegionCode: code, Provider: provider,
			Tags: tags(res["tags"]), DomainID: h.task.DomainID, WorkspaceID: h.task.WorkspaceID, CreatedAt: now, UpdatedAt: now}
		_, err = h.w.regions.InsertOne(ctx, r)
		return store.Wrap(err)
	case err != nil:
		return store.Wrap(err)
	}
	set := bson.D{{Key: "updated_at", Value: now}}
	if v, ok := res["name"]; ok {
		set = append(set, bson.E{Key: "name", Value: str(v)})
	}
	if v, ok := res["tags"]; ok {
		set = append(set, bson.E{Key: "tags", Value: tags(v)})
	}
	_, err = h.w.regions.UpdateOne(ctx, bson.D{{Key: "_id", Value: k.Target}}, bson.D{{Key: "$set", Value: set}})
	return store.Wrap(err)
}
