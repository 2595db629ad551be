package datasourcerule

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/core"
)

// The order of a data source's rules of one type is one list on the data
// source's document (rule_order.<type>, counted by rule_order_version).
// MongoDB changes one document atomically, so a create's $push, a
// delete's $pull and a change_order's compare-and-set of the list never
// interleave, and no lease is needed. Each rule's stored order follows
// the list: whoever changes the list settles the rules after its own
// writes, each rule's write conditional on the list version it was
// computed from (order_version), so an older settle's numbers never land
// over a newer one's. The engine reads the list itself (Of).

// orderOf is what a settle reads of the data source.
type orderOf struct {
	RuleOrder        map[string][]string `bson:"rule_order"`
	RuleOrderVersion int64               `bson:"rule_order_version"`
}

func orderField(ruleType string) string { return "rule_order." + ruleType }

// live selects the data source unless its deregister has begun.
func live(dataSourceID string) bson.D {
	return bson.D{{Key: "_id", Value: dataSourceID}, {Key: tenancy.MarkField, Value: bson.D{{Key: "$ne", Value: true}}}}
}

// listChange applies update to the data source's list (one atomic
// findOneAndUpdate that also counts the change) and returns the list's
// new version; 404 when the data source is gone or being deregistered.
// With no update it only counts: each writer counts once more after its
// rule's insert or delete, so the settle at the newest version, which
// reads the rules after that count, sees every rule write before it.
func (rs *Rules) listChange(ctx context.Context, dataSourceID string, update bson.D) (int64, error) {
	if _, err := rs.ensureList(ctx, dataSourceID); err != nil {
		return 0, err
	}
	update = append(update, bson.E{Key: "$inc", Value: bson.D{{Key: "rule_order_version", Value: int64(1)}}})
	var after orderOf
	err := rs.sources.FindOneAndUpdate(ctx, live(dataSourceID), update, options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&after)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0, errs.NotFound("data_source_id", dataSourceID)
	}
	return after.RuleOrderVersion, store.Wrap(err)
}

// ensureList gives a data source stored before the lists its lists, from
// its rules' stored orders: each list is set only where it is missing,
// so racing callers agree, and the version counts from 1 once it is. It
// returns the lists as it read them, read again when it set one.
func (rs *Rules) ensureList(ctx context.Context, dataSourceID string) (*orderOf, error) {
	cur, set, err := rs.ensureOnce(ctx, dataSourceID)
	if err != nil || !set {
		return cur, err
	}
	cur, _, err = rs.ensureOnce(ctx, dataSourceID)
	return cur, err
}

func (rs *Rules) ensureOnce(ctx context.Context, dataSourceID string) (cur *orderOf, set bool, err error) {
	cur = &orderOf{}
	if err := rs.sources.FindOne(ctx, bson.D{{Key: "_id", Value: dataSourceID}}).Decode(cur); errors.Is(err, mongo.ErrNoDocuments) {
		return nil, false, errs.NotFound("data_source_id", dataSourceID)
	} else if err != nil {
		return nil, false, store.Wrap(err)
	}
	for _, typ := range []string{core.Custom, core.Managed} {
		if _, ok := cur.RuleOrder[typ]; ok {
			continue
		}
		rules, err := rs.ofType(ctx, dataSourceID, typ)
		if err != nil {
			return nil, false, err
		}
		slices.SortStableFunc(rules, func(a, b Rule) int {
			return cmp.Or(cmp.Compare(a.Order, b.Order), a.CreatedAt.Compare(b.CreatedAt.Time), cmp.Compare(a.ID, b.ID))
		})
		ids := make([]string, 0, len(rules))
		for _, r := range rules {
			ids = append(ids, r.ID)
		}
		_, err = rs.sources.UpdateOne(ctx, bson.D{{Key: "_id", Value: dataSourceID}, {Key: orderField(typ), Value: bson.D{{Key: "$exists", Value: false}}}},
			bson.D{{Key: "$set", Value: bson.D{{Key: orderField(typ), Value: ids}}}, {Key: "$inc", Value: bson.D{{Key: "rule_order_version", Value: int64(1)}}}})
		if err != nil {
			return nil, false, store.Wrap(err)
		}
		set = true
	}
	return cur, set, nil
}

func (rs *Rules) ofType(ctx context.Context, dataSourceID, ruleType string) ([]Rule, error) {
	cur, err := rs.c.Find(ctx, bson.D{{Key: "data_source_id", Value: dataSourceID}, {Key: "rule_type", Value: ruleType}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	var out []Rule
	return out, store.Wrap(cur.All(ctx, &out))
}

// ordered returns the data source's rules of a type in the list's order,
// Order set from it, with the list's version. A listed id without a
// rule (a create that failed, a delete half-way) takes no number. A
// MANAGED rule the list does not name and that was stored for an older
// list (OrderVersion below the version read: a replace that lost to a
// newer one) is not a rule of the data source any more and is returned
// in stale for the settle to delete; one stored for a newer list than
// this read is left to that list's settle.
func (rs *Rules) ordered(ctx context.Context, dataSourceID, ruleType string) (rules, stale []Rule, version int64, err error) {
	cur, err := rs.ensureList(ctx, dataSourceID)
	if err != nil {
		return nil, nil, 0, err
	}
	all, err := rs.ofType(ctx, dataSourceID, ruleType)
	if err != nil {
		return nil, nil, 0, err
	}
	byID := make(map[string]Rule, len(all))
	for _, r := range all {
		byID[r.ID] = r
	}
	for _, id := range cur.RuleOrder[ruleType] {
		r, ok := byID[id]
		if !ok {
			continue
		}
		delete(byID, id)
		r.Order = len(rules) + 1
		rules = append(rules, r)
	}
	for _, r := range all {
		if _, left := byID[r.ID]; left && r.OrderVersion < cur.RuleOrderVersion {
			stale = append(stale, r)
		}
	}
	return rules, stale, cur.RuleOrderVersion, nil
}

// settle writes every rule's order from the list as it stands now, in one
// round trip, each write only over an order computed from an older list;
// it deletes the MANAGED rules the list no longer names. It returns the
// rules in order.
func (rs *Rules) settle(ctx context.Context, dataSourceID, ruleType string) ([]Rule, error) {
	rules, stale, v, err := rs.ordered(ctx, dataSourceID, ruleType)
	if err != nil {
		return nil, err
	}
	var models []mongo.WriteModel
	for _, r := range rules {
		older := bson.A{bson.D{{Key: "order_version", Value: bson.D{{Key: "$lt", Value: v}}}},
			bson.D{{Key: "order_version", Value: bson.D{{Key: "$exists", Value: false}}}}}
		models = append(models, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: r.ID}, {Key: "$or", Value: older}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "order", Value: r.Order}, {Key: "order_version", Value: v}}}}))
	}
	for _, r := range stale {
		if r.RuleType == core.Managed {
			models = append(models, mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: r.ID}}))
		}
	}
	if len(models) > 0 {
		if _, err := rs.c.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false)); err != nil {
			return nil, store.Wrap(err)
		}
	}
	return rules, nil
}

// moveInList puts id at position order (1-based) of its type's list, a
// compare-and-set on the list's version, retried while others change it.
// The list is first pruned of ids without a rule, so order counts rules.
func (rs *Rules) moveInList(ctx context.Context, dataSourceID, ruleType, id string, order int) error {
	for try := 0; ; try++ {
		if err := store.Pause(ctx, try); err != nil {
			return err
		}
		rules, _, v, err := rs.ordered(ctx, dataSourceID, ruleType)
		if err != nil {
			return err
		}
		at := slices.IndexFunc(rules, func(r Rule) bool { return r.ID == id })
		if at < 0 { // deleted meanwhile
			return errs.NotFound("data_source_rule_id", id)
		}
		if order > len(rules) {
			return errs.Invalid("order", "greater than the number of rules ("+strconv.Itoa(len(rules))+")")
		}
		ids := make([]string, 0, len(rules))
		for _, r := range rules {
			ids = append(ids, r.ID)
		}
		ids = slices.Delete(ids, at, at+1)
		ids = slices.Insert(ids, order-1, id)
		res, err := rs.sources.UpdateOne(ctx, append(live(dataSourceID), bson.E{Key: "rule_order_version", Value: v}),
			bson.D{{Key: "$set", Value: bson.D{{Key: orderField(ruleType), Value: ids}}},
				{Key: "$inc", Value: bson.D{{Key: "rule_order_version", Value: int64(1)}}}})
		if err != nil {
			return store.Wrap(err)
		}
		if res.MatchedCount == 1 {
			return nil
		}
		if try >= 50 {
			return errs.Down("the rule order of "+dataSourceID, store.ErrConflict)
		}
	}
}
