// Package collectrun is one collect run of an inventory sub-task: it
// calls the plugin's Collector.collect and writes what the plugin streams
// as the upstream core does (plugin-protocols.md 3): match rules, create
// or update of cloud services, cloud service types and regions,
// ERROR_PLUGIN, ERROR_MATCH_RULE, a broken stream ERROR_COLLECTOR_PLUGIN.
//
// A cloud service is found by its match keys, records of
// core.KeysCollection keyed by _id (one read however large the
// inventory), and remembers the run that created it, so a run again after
// a crash still counts it as created. The run returns its counts and what
// it wrote; storing them, and what follows, is package worker's.
//
// It serves no operation, takes no lease, reads no job or task record and
// never logs secret data.
package collectrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

// Codes recorded in job task errors.
const (
	ErrCollectorPlugin = "ERROR_COLLECTOR_PLUGIN"
	ErrPlugin          = "ERROR_PLUGIN"
	ErrMatchRule       = "ERROR_MATCH_RULE"
)

// Config tunes a run.
type Config struct {
	// Batch is how many streamed resources are matched and written
	// together.
	Batch int
	// MaxErrors is how many errors one run keeps (the rest are counted,
	// not kept).
	MaxErrors int
}

// Runner runs collects on the inventory's collections.
type Runner struct {
	services *mongo.Collection
	types    *mongo.Collection
	regions  *mongo.Collection
	keys     *mongo.Collection
	plugins  *plugin.Client
	cfg      Config
}

// New builds a runner on db; cfg's values must be set (worker's
// defaults).
func New(db *mongo.Database, plugins *plugin.Client, cfg Config) *Runner {
	return &Runner{services: db.Collection(core.CloudServicesCollection), types: db.Collection(core.CloudServiceTypesCollection),
		regions: db.Collection(core.RegionsCollection), keys: db.Collection(core.KeysCollection), plugins: plugins, cfg: cfg}
}

// Outcome is what one run counted and wrote.
type Outcome struct {
	Created int32
	Updated int32
	Failure int32
	Failed  bool
	Errors  []core.ErrorInfo
	// Seen are the cloud services the run wrote (garbage collection
	// keeps them).
	Seen []string
}

// Run runs Collector.collect for one sub-task (run is its record id) and
// writes what the plugin streams, in batches. A store failure is returned
// (the message is tried again); a broken stream is the sub-task's
// failure: its counts become {failure_count: 1} with
// ERROR_COLLECTOR_PLUGIN, as upstream.
func (w *Runner) Run(ctx context.Context, job *core.Job, task *core.JobTask, c *core.Collector, taskOptions, secret map[string]any,
	run string, again func(error) bool) (Outcome, error) {
	rec := Outcome{Errors: []core.ErrorInfo{}}
	h := &handler{w: w, job: job, task: task, collector: c, rec: &rec, run: run, seen: map[string]bool{}, keyOf: map[string]string{},
		mine: map[string][]string{}}
	var pending []map[string]any
	var storeErr error
	req := plugin.CollectRequest{Options: c.PluginInfo.Options, SecretData: secret, Filter: map[string]any{}, TaskOptions: taskOptions}
	err := core.CollectorPlugin(w.plugins, c).Collect(ctx, req, func(r plugin.M) error {
		pending = append(pending, r)
		if len(pending) < w.cfg.Batch {
			return nil
		}
		if err := h.flush(ctx, pending); err != nil {
			storeErr = err
			return err
		}
		pending = pending[:0]
		return nil
	})
	if storeErr != nil {
		return rec, storeErr
	}
	if ctx.Err() != nil {
		return rec, ctx.Err()
	}
	// What arrived before a break is kept, as upstream writes each
	// resource as it comes.
	if len(pending) > 0 {
		if err := h.flush(ctx, pending); err != nil {
			return rec, err
		}
	}
	if err != nil && again != nil && again(err) {
		// A plugin that cannot answer now (plugin.Retryable) gets the
		// sub-task again while the caller's tries remain; what was
		// written is written again then.
		return rec, err
	}
	if err != nil {
		rec.Created, rec.Updated, rec.Failure, rec.Failed = 0, 0, 1, true
		h.addError(core.TaskError(ErrCollectorPlugin, err))
	}
	rec.Seen = make([]string, 0, len(h.seen))
	for id := range h.seen {
		rec.Seen = append(rec.Seen, id)
	}
	return rec, nil
}

// handler writes the resources of one run of a sub-task.
type handler struct {
	w         *Runner
	job       *core.Job
	task      *core.JobTask
	collector *core.Collector
	rec       *Outcome
	// run is the sub-task (its record id): what it creates is marked
	// with it, so a run again after a crash counts it as created.
	run string
	// seen are the cloud services written in this run: met again, they
	// count as updated.
	seen map[string]bool
	// keyOf are the match keys known in this run (key -> cloud service).
	keyOf map[string]string
	// mine are the cloud services this task created, with their keys.
	mine    map[string][]string
	dropped int // errors not kept (MaxErrors)
}

func (h *handler) addError(e core.ErrorInfo) {
	if len(h.rec.Errors) >= h.w.cfg.MaxErrors {
		h.dropped++
		return
	}
	h.rec.Errors = append(h.rec.Errors, e)
}

// fail counts one failed resource.
func (h *handler) fail(code, msg string, additional map[string]any) {
	h.rec.Failure++
	h.addError(core.ErrorInfo{ErrorCode: code, Message: msg, Additional: wire.Object(additional)})
}

// additional is the error's additional: the resource as the plugin sent
// it, with its type (the console shows resource_type,
// cloud_service_group, cloud_service_type and resource_id).
func additional(res map[string]any, rt string) map[string]any {
	out := map[string]any{"resource_type": rt}
	for _, k := range []string{"cloud_service_group", "cloud_service_type", "provider", "name", "region_code", "account"} {
		if v, ok := res[k]; ok {
			out[k] = v
		}
	}
	if ref, ok := res["reference"].(map[string]any); ok {
		if id, ok := ref["resource_id"]; ok {
			out["resource_id"] = id
		}
	}
	return out
}

var knownTypes = []string{core.TypeCloudService, core.TypeCloudServiceType, core.TypeRegion, core.TypeErrorResource}

// flush handles a batch of streamed ResourceInfo messages.
func (h *handler) flush(ctx context.Context, batch []map[string]any) error {
	var items []*item
	for _, ri := range batch {
		rt, _ := ri["resource_type"].(string)
		state, _ := ri["state"].(string)
		res, _ := ri["resource"].(map[string]any)
		if res == nil {
			res = map[string]any{}
		}
		rules, _ := ri["match_rules"].(map[string]any)
		switch {
		case rt == core.TypeNamespace || rt == core.TypeMetric:
			continue // Nubes keeps no metrics or namespaces; upstream does not count them either
		case !slices.Contains(knownTypes, rt):
			h.fail(errs.Unknown, fmt.Sprintf("failed to upsert %s: unknown resource type", rt), additional(res, rt))
		case state == "FAILURE" || rt == core.TypeErrorResource:
			msg, _ := ri["message"].(string)
			if msg == "" {
				msg = "Unknown error."
			}
			h.fail(ErrPlugin, msg, additional(res, rt))
		case len(rules) == 0:
			h.fail(ErrMatchRule, "Match rule is not defined.", additional(res, rt))
		case rt == core.TypeCloudServiceType:
			if err := h.upsertType(ctx, res); err != nil {
				if !core.Permanent(err) {
					return err
				}
				h.failWith(err, res, rt)
			}
		case rt == core.TypeRegion:
			if err := h.upsertRegion(ctx, res); err != nil {
				if !core.Permanent(err) {
					return err
				}
				h.failWith(err, res, rt)
			}
		default:
			it, err := h.prepare(res, rules)
			if err != nil {
				h.failWith(err, res, rt)
				continue
			}
			items = append(items, it)
		}
	}
	if len(items) == 0 {
		return nil
	}
	return h.writeServices(ctx, items)
}

func (h *handler) failWith(err error, res map[string]any, rt string) {
	e := core.TaskError("", err)
	e.Additional = additional(res, rt)
	h.rec.Failure++
	h.addError(e)
}

// item is a cloud service to write.
type item struct {
	res    map[string]any
	keys   []string // one per match order with a value, in order
	target string
	create bool
}

// prepare decodes a cloud service and computes its match keys.
func (h *handler) prepare(res map[string]any, rules map[string]any) (*item, error) {
	if err := decodeJSONFields(res); err != nil {
		return nil, err
	}
	for _, k := range []string{"provider", "cloud_service_group", "cloud_service_type"} {
		if s, _ := res[k].(string); s == "" {
			return nil, errs.Required("resource." + k)
		}
	}
	for _, k := range []string{"data", "metadata", "reference", "tags"} {
		if err := core.CheckKeys("resource."+k, res[k]); err != nil {
			return nil, err
		}
	}
	orders, err := parseRules(rules)
	if err != nil {
		return nil, err
	}
	it := &item{res: res}
	for _, paths := range orders {
		if k := h.matchKey(res, paths); k != "" {
			it.keys = append(it.keys, k)
		}
	}
	if len(it.keys) == 0 {
		return nil, errs.New(ErrMatchRule, "No path of the match rules has a value.")
	}
	return it, nil
}

// decodeJSONFields turns json_data and json_metadata (JSON strings some
// plugins send) into data and metadata.
func decodeJSONFields(res map[string]any) error {
	for src, dst := range map[string]string{"json_data": "data", "json_metadata": "metadata"} {
		raw, ok := res[src]
		if !ok {
			continue
		}
		delete(res, src)
		s, _ := raw.(string)
		if s == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			return errs.Invalid("resource."+src, "not a JSON object")
		}
		res[dst] = m
	}
	return nil
}

// parseRules reads match_rules {"1": [paths], "2": [...]}: orders tried
// ascending.
func parseRules(rules map[string]any) ([][]string, error) {
	type order struct {
		n     int
		paths []string
	}
	var orders []order
	for k, v := range rules {
		n, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil {
			return nil, errs.New(ErrMatchRule, "Match rule order %q is not a number.", k)
		}
		list, _ := v.([]any)
		var paths []string
		for _, p := range list {
			if s, ok := p.(string); ok && s != "" {
				paths = append(paths, s)
			}
		}
		orders = append(orders, order{n, paths})
	}
	sort.Slice(orders, func(i, j int) bool { return orders[i].n < orders[j].n })
	out := make([][]string, len(orders))
	for i, o := range orders {
		out[i] = o.paths
	}
	return out, nil
}

// matchKey is the key of one match order: the resource's type, domain
// and workspace and each path with a truthy value (upstream queries
// `path eq value` for those, skipping falsy ones), "" when none has one.
// Keyed by _id, a match is one read however large the inventory.
func (h *handler) matchKey(res map[string]any, paths []string) string {
	var pairs []string
	for _, p := range paths {
		v := lookup(res, p)
		if !truthy(v) {
			continue
		}
		b, _ := json.Marshal(v)
		pairs = append(pairs, p+"="+string(b))
	}
	if len(pairs) == 0 {
		return ""
	}
	sort.Strings(pairs)
	parts := append([]string{h.task.DomainID, h.task.WorkspaceID, core.TypeCloudService}, pairs...)
	return core.HashKey("cs", parts...)
}

// lookup reads a dotted path of a resource.
func lookup(v any, path string) any {
	for _, seg := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[seg]
	}
	return v
}

// truthy is Python's truth of a JSON value.
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case string:
		return x != ""
	case bool:
		return x
	case float64:
		return x != 0
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}

// writeServices matches a batch of cloud services and writes them: one
// read of the keys, one of the documents to update, then one write of
// new keys and one of the documents.
//
// The key of an item with one match key is not read first: it is
// inserted as new, and the keys' unique _id refuses it if another run
// or an earlier collect holds it (yield then turns the item into an
// update of the holder's resource). A first collect so writes its keys
// without a read; an item with several keys is still read, since which
// of them leads to a resource decides its target.
func (h *handler) writeServices(ctx context.Context, items []*item) error {
	var need, direct []string
	for _, it := range items {
		for _, k := range it.keys {
			if _, ok := h.keyOf[k]; !ok {
				if len(it.keys) == 1 {
					direct = append(direct, k)
				} else {
					need = append(need, k)
				}
			}
		}
	}
	looked, err := h.lookKeys(ctx, need)
	if err != nil {
		return err
	}
	need = append(need, direct...)
	var fetch []string
	for _, it := range items {
		for _, k := range it.keys {
			if t, ok := h.keyOf[k]; ok {
				it.target = t
				break
			}
			if t, ok := looked[k]; ok {
				it.target = t
				break
			}
		}
		if it.target == "" {
			it.target, it.create = wire.NewID("cloud-svc"), true
		} else if _, ok := h.mine[it.target]; !ok {
			fetch = append(fetch, it.target)
		}
		for _, k := range it.keys {
			if _, ok := h.keyOf[k]; !ok {
				h.keyOf[k] = it.target
			}
		}
		if it.create {
			h.mine[it.target] = nil
		}
	}
	existing, err := h.existing(ctx, fetch)
	if err != nil {
		return err
	}
	// Keys first: a crash after them leaves keys whose document is
	// missing, which the next run creates under the same id; a document
	// without its keys would be created twice.
	var newKeys []any
	now := wire.T(wire.Now())
	for _, k := range need {
		if _, ok := looked[k]; !ok && h.keyOf[k] != "" {
			newKeys = append(newKeys, core.Key{ID: k, Target: h.keyOf[k], At: now.Time})
			looked[k] = h.keyOf[k]
		}
	}
	if len(newKeys) > 0 {
		_, err := h.w.keys.InsertMany(ctx, newKeys, options.InsertMany().SetOrdered(false))
		if err != nil && !store.OnlyDuplicates(err) {
			return store.Wrap(err)
		}
		if err != nil {
			// Another run took some of these keys first (the same resource
			// reported at once through two secrets of one workspace): the
			// resource is that run's, and this one updates it.
			if err := h.yield(ctx, newKeys, duplicateIndexes(err), items, existing); err != nil {
				return err
			}
		}
	}
	models := make([]mongo.WriteModel, 0, len(items))
	outcome := make([]bool, 0, len(items)) // true: created
	for _, it := range items {
		ex, found := existing[it.target]
		switch {
		case it.create || (!found && !h.seenTarget(it.target)):
			// New, or keyed to a document that is gone: created anew.
			doc := h.newDoc(it, now)
			models = append(models, mongo.NewInsertOneModel().SetDocument(doc))
			h.mine[it.target] = doc.MatchKeys
			outcome = append(outcome, !h.seen[it.target])
		default:
			old := ex.MatchKeys
			createdHere := ex.CreatedBy == h.run
			if keys, ok := h.mine[it.target]; ok {
				old, createdHere = keys, true
			}
			keys := union(old, h.ownKeys(it))
			h.mine[it.target] = keys
			if !createdHere {
				delete(h.mine, it.target)
			}
			models = append(models, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: it.target}}).
				SetUpdate(bson.D{{Key: "$set", Value: h.updateFields(it, keys, now)}}))
			outcome = append(outcome, createdHere && !h.seen[it.target])
		}
		h.seen[it.target] = true
	}
	done := len(models)
	_, err = h.w.services.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(true))
	if err != nil {
		if errs.Is(store.Wrap(err), errs.Unavailable) {
			return store.Wrap(err)
		}
		// An ordered write stops at its first refused document; those
		// before it are written.
		done = 0
		var bwe mongo.BulkWriteException
		if errors.As(err, &bwe) && len(bwe.WriteErrors) > 0 {
			done = bwe.WriteErrors[0].Index
		}
	}
	for _, created := range outcome[:done] {
		if created {
			h.rec.Created++
		} else {
			h.rec.Updated++
		}
	}
	if done < len(models) {
		return h.writeOneByOne(ctx, items[done:], models[done:], outcome[done:])
	}
	return nil
}

// writeOneByOne writes what an ordered batch did not, one document at a
// time, so one bad resource (too large, a key the store refuses) fails
// alone.
func (h *handler) writeOneByOne(ctx context.Context, items []*item, models []mongo.WriteModel, outcome []bool) error {
	for i, m := range models {
		_, err := h.w.services.BulkWrite(ctx, []mongo.WriteModel{m})
		switch {
		case err == nil && outcome[i]:
			h.rec.Created++
		case err == nil:
			h.rec.Updated++
		case errs.Is(store.Wrap(err), errs.Unavailable):
			return store.Wrap(err)
		case mongo.IsDuplicateKeyError(err):
			h.rec.Updated++ // created meanwhile by another run that reported it too
		default:
			h.fail(errs.Unknown, "failed to upsert inventory.CloudService: the store refused it", additional(items[i].res, core.TypeCloudService))
		}
	}
	return nil
}

func (h *handler) seenTarget(id string) bool { return h.seen[id] }

// ownKeys are the item's keys that lead to its target.
func (h *handler) ownKeys(it *item) []string {
	var out []string
	for _, k := range it.keys {
		if h.keyOf[k] == it.target {
			out = append(out, k)
		}
	}
	return out
}

func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, k := range b {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return wire.List(out)
}

func (h *handler) lookKeys(ctx context.Context, ids []string) (map[string]string, error) {
	keys, err := core.ByIDs[core.Key](ctx, h.w.keys, ids, nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(keys))
	for id, k := range keys {
		out[id] = k.Target
	}
	return out, nil
}

func (h *handler) existing(ctx context.Context, ids []string) (map[string]core.CloudService, error) {
	docs, err := core.ByIDs[core.CloudService](ctx, h.w.services, ids, bson.D{{Key: "created_by_task", Value: 1}, {Key: "match_keys", Value: 1}})
	if err != nil {
		return nil, err
	}
	out := make(map[string]core.CloudService, len(docs))
	for id, d := range docs {
		d.ID = id
		out[id] = *d
	}
	return out, nil
}

func (h *handler) collection(now wire.Time) core.CollectionInfo {
	return core.CollectionInfo{CollectorID: h.task.CollectorID, ServiceAccountID: h.task.ServiceAccountID, SecretID: h.task.SecretID,
		JobID: h.task.JobID, JobTaskID: h.task.ID, LastCollectedAt: now}
}

func (h *handler) newDoc(it *item, now wire.Time) *core.CloudService {
	r := it.res
	d := &core.CloudService{ID: it.target, CloudServiceID: it.target, Name: str(r["name"]), State: core.StateActive,
		Account: str(r["account"]), InstanceType: str(r["instance_type"]), InstanceSize: num(r["instance_size"]),
		IPAddresses: strList(r["ip_addresses"]), CloudServiceType: str(r["cloud_service_type"]),
		CloudServiceGroup: str(r["cloud_service_group"]), Provider: str(r["provider"]), Data: obj(r["data"]),
		Metadata: obj(r["metadata"]), Reference: obj(r["reference"]), Tags: tags(r["tags"]), RegionCode: str(r["region_code"]),
		LaunchedAt: str(r["launched_at"]), CollectionInfo: h.collection(now), ProjectID: h.task.ProjectID,
		WorkspaceID: h.task.WorkspaceID, DomainID: h.task.DomainID, CreatedAt: now, UpdatedAt: now, CreatedBy: h.run,
		MatchKeys: wire.List(h.ownKeys(it))}
	d.RefCloudServiceType, d.RefRegion = h.refs(d.Provider, d.CloudServiceGroup, d.CloudServiceType, d.RegionCode)
	return d
}

func (h *handler) refs(provider, group, typ, region string) (string, string) {
	prefix := h.task.DomainID + "." + h.task.WorkspaceID + "." + provider + "."
	ref := prefix + group + "." + typ
	if region == "" {
		return ref, ""
	}
	return ref, prefix + region
}

// updateFields are the fields of an update: those the resource carries,
// and the collection's own.
func (h *handler) updateFields(it *item, keys []string, now wire.Time) bson.D {
	r := it.res
	set := bson.D{{Key: "state", Value: core.StateActive}, {Key: "collection_info", Value: h.collection(now)}, {Key: "updated_at", Value: now},
		{Key: "disconnect_count", Value: 0}, {Key: "gc_task", Value: ""}, {Key: "doomed", Value: false}, {Key: "match_keys", Value: keys}}
	add := func(k string, v any) { set = append(set, bson.E{Key: k, Value: v}) }
	for _, k := range []string{"name", "account", "instance_type", "cloud_service_type", "cloud_service_group", "provider", "region_code", "launched_at"} {
		if v, ok := r[k]; ok {
			add(k, str(v))
		}
	}
	if v, ok := r["instance_size"]; ok {
		add("instance_size", num(v))
	}
	if v, ok := r["ip_addresses"]; ok {
		add("ip_addresses", strList(v))
	}
	for _, k := range []string{"data", "metadata", "reference"} {
		if v, ok := r[k]; ok {
			add(k, obj(v))
		}
	}
	if v, ok := r["tags"]; ok {
		add("tags", tags(v))
	}
	ref, region := h.refs(str(r["provider"]), str(r["cloud_service_group"]), str(r["cloud_service_type"]), str(r["region_code"]))
	add("ref_cloud_service_type", ref)
	if region != "" {
		add("ref_region", region)
	}
	return set
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func num(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case string:
		f, _ := strconv.ParseFloat(x, 64)
		return f
	}
	return 0
}

func strList(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, e := range list {
		if s := str(e); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func obj(v any) freeform.Map {
	m, _ := v.(map[string]any)
	return wire.Object(m)
}

// tags takes a map, or the list of {key, value} newer plugins send.
func tags(v any) freeform.Flat {
	switch x := v.(type) {
	case map[string]any:
		return x
	case []any:
		out := freeform.Flat{}
		for _, e := range x {
			if m, ok := e.(map[string]any); ok {
				if k := str(m["key"]); k != "" {
					out[k] = m["value"]
				}
			}
		}
		return out
	}
	return freeform.Flat{}
}

// yield gives the keys lost to another run (lost indexes newKeys) to
// their holders: an item that was to create a resource under a lost key
// updates the holder's instead.
func (h *handler) yield(ctx context.Context, newKeys []any, lost []int, items []*item, existing map[string]core.CloudService) error {
	var ids []string
	for _, i := range lost {
		if i >= 0 && i < len(newKeys) {
			ids = append(ids, newKeys[i].(core.Key).ID)
		}
	}
	holders, err := h.lookKeys(ctx, ids)
	if err != nil {
		return err
	}
	var fetch []string
	for k, target := range holders {
		mine := h.keyOf[k]
		if target == mine {
			continue
		}
		for _, it := range items {
			if it.target == mine && it.create {
				it.target, it.create = target, false
				delete(h.mine, mine)
				fetch = append(fetch, target)
			}
		}
		for key, t := range h.keyOf {
			if t == mine {
				h.keyOf[key] = target
			}
		}
	}
	more, err := h.existing(ctx, fetch)
	if err != nil {
		return err
	}
	for id, d := range more {
		existing[id] = d
	}
	return nil
}

// duplicateIndexes are the indexes of the documents a bulk insert
// refused as duplicates.
func duplicateIndexes(err error) []int {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) {
		return nil
	}
	var out []int
	for _, we := range bwe.WriteErrors {
		if mongo.IsDuplicateKeyError(we) || we.Code == 11000 {
			out = append(out, we.Index)
		}
	}
	return out
}
