package notification_test

import (
	"context"
	"net/http"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
)

const (
	usageColl     = "notification_protocol_usage"
	protocolsColl = "notification_protocols"
)

// TestProtocolDeleteMarkedFirst: a protocol a channel uses is refused
// (upstream) and left as it was; once the channel is gone, a delete whose
// child delete (the usage counters) fails answers 503 and leaves the
// protocol marked: out of get, list and stat, refusing update, enable
// and new channels, out of another domain's reach. A channel that slipped
// in before the mark makes the retry refuse too, the protocol staying
// marked; once it is gone a retry deletes the counters and the protocol
// (404 from then on); the other protocol is untouched.
func TestProtocolDeleteMarkedFirst(t *testing.T) {
	// Not t.Parallel: store.FailChildDeletes fails its collection's child
	// deletes in every test of the binary; serial tests run before the others.
	e := setup(t)
	ctx := context.Background()
	plain := e.protocolWith(t, "hooks", "PLAIN_TEXT")
	other := e.protocolWith(t, "other hooks", "PLAIN_TEXT")
	for _, id := range []string{plain, other} {
		if _, err := e.db.Collection(usageColl).InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "sent", Value: 3}}); err != nil {
			t.Fatal(err)
		}
	}
	id := M{"protocol_id": plain}
	channel := M{"protocol_id": plain, "name": "ops", "data": M{"webhook_url": webhookJSON}, "project_id": "project-1"}
	var c ProjectChannel
	e.ownerA1.Call(pcBase+"create", channel).OK(&c)

	e.adminA.Call(base+"delete", id).Fails(http.StatusBadRequest, errs.ExistResource)
	if _, marked := e.raw(t, protocolsColl, plain)[tenancy.MarkField]; marked {
		t.Fatal("a refused delete marked the protocol")
	}
	e.adminA.Call(base+"get", id).OK(nil)
	e.ownerA1.Call(pcBase+"delete", M{"project_channel_id": c.ProjectChannelID}).OK(nil)

	restore := store.FailChildDeletes(usageColl)
	e.adminA.Call(base+"delete", id).Fails(http.StatusServiceUnavailable, errs.Unavailable)
	restore()
	if e.countWhere(t, usageColl, bson.D{{Key: "_id", Value: plain}}) != 1 || e.raw(t, protocolsColl, plain)[tenancy.MarkField] != true {
		t.Fatal("the failed delete did not stop after its mark")
	}
	e.adminA.Call(base+"get", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.adminA.Call(base+"update", M{"protocol_id": plain, "name": "x"}).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.adminA.Call(base+"enable", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.ownerA1.Call(pcBase+"create", channel).Fails(http.StatusNotFound, errs.NotFoundCode)
	var l struct {
		Results []struct {
			ProtocolID string `json:"protocol_id"`
		} `json:"results"`
		TotalCount int `json:"total_count"`
	}
	e.adminA.Call(base+"list", M{"protocol_type": "EXTERNAL"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].ProtocolID != other {
		t.Fatalf("list shows %+v", l)
	}
	st := e.adminA.Call(base+"stat", M{"query": M{"aggregate": []any{M{"count": M{"name": "n"}}}}}).OK(nil).JSON()
	if res, _ := st["results"].([]any); len(res) != 1 || res[0].(map[string]any)["n"] != 2.0 {
		t.Fatalf("stat counts %v, want 2 (the other and the built-in one)", st)
	}
	e.adminB.Call(base+"delete", id).Fails(http.StatusNotFound, errs.NotFoundCode)

	// A channel created from a read of the protocol before the mark.
	late := bson.D{{Key: "_id", Value: "project-channel-late"}, {Key: "domain_id", Value: "domain-a"}, {Key: "protocol_id", Value: plain}}
	if _, err := e.db.Collection(pcColl).InsertOne(ctx, late); err != nil {
		t.Fatal(err)
	}
	e.adminA.Call(base+"delete", id).Fails(http.StatusBadRequest, errs.ExistResource)
	if e.raw(t, protocolsColl, plain)[tenancy.MarkField] != true || e.countWhere(t, usageColl, bson.D{{Key: "_id", Value: plain}}) != 1 {
		t.Fatal("a refused retry unmarked the protocol or went on")
	}
	if _, err := e.db.Collection(pcColl).DeleteOne(ctx, bson.D{{Key: "_id", Value: "project-channel-late"}}); err != nil {
		t.Fatal(err)
	}

	e.adminA.Call(base+"delete", id).OK(nil)
	if e.countWhere(t, usageColl, bson.D{{Key: "_id", Value: plain}}) != 0 || e.countWhere(t, protocolsColl, bson.D{{Key: "_id", Value: plain}}) != 0 {
		t.Fatal("the retry left the counters or the protocol")
	}
	e.adminA.Call(base+"delete", id).Fails(http.StatusNotFound, errs.NotFoundCode)
	e.adminA.Call(base+"get", M{"protocol_id": other}).OK(nil)
	if e.countWhere(t, usageColl, bson.D{{Key: "_id", Value: other}}) != 1 {
		t.Fatal("the other protocol's counters went")
	}
}
