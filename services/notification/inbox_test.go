package notification_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/notification/internal/fanout"
)

// TestInbox: a notification to a user leaves an inbox entry only that
// user reads, marks read and deletes (upstream's get, list, stat,
// set-read, delete); set-read naming another's entry marks nothing.
func TestInbox(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	const nb = "/notification/v1/notification/"
	for _, u := range []string{"ulla", "mia"} {
		e.system.Call(nb+"create", M{"resource_type": "identity.User", "resource_id": u, "topic": "inventory.Job",
			"message": M{"title": "job failed for " + u}, "notification_type": "ERROR", "domain_id": "domain-a"}).OK(nil)
	}
	var l struct {
		Results []struct {
			NotificationID string `json:"notification_id"`
			Topic          string `json:"topic"`
			IsRead         bool   `json:"is_read"`
			UserID         string `json:"user_id"`
			Message        M      `json:"message"`
		} `json:"results"`
		TotalCount int `json:"total_count"`
	}
	e.userA.Call(nb+"list", M{}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].UserID != "ulla" || l.Results[0].IsRead || l.Results[0].Message["title"] != "job failed for ulla" {
		t.Fatalf("ulla's inbox %+v", l)
	}
	mine := l.Results[0].NotificationID
	other := e.anon.For(auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.User})
	other.Call(nb+"list", M{}).OK(&l)
	theirs := l.Results[0].NotificationID

	e.userA.Call(nb+"set-read", M{"notifications": []string{mine, theirs}}).Fails(404, errs.NotFoundCode)
	e.userA.Call(nb+"list", M{"is_read": true}).OK(&l)
	if l.TotalCount != 0 {
		t.Fatal("a refused set-read marked something")
	}
	e.userA.Call(nb+"set-read", M{}).Fails(400, errs.RequiredParameter)
	e.userA.Call(nb+"set-read", M{"notifications": []string{mine}}).OK(nil)
	e.userA.Call(nb+"list", M{"is_read": true}).OK(&l)
	if l.TotalCount != 1 {
		t.Fatalf("read %+v", l)
	}
	id := M{"notification_id": mine}
	testkit.Tenancy{
		Handler: e.handler, Coll: e.db.Collection("notification_inbox"), ID: mine, Domain: "domain-a",
		Get:  testkit.Req{Path: nb + "get", Body: id},
		List: testkit.Req{Path: nb + "list", Body: id},
		Stat: &testkit.Req{Path: nb + "stat", Body: M{"query": M{"filter": []any{M{"k": "notification_id", "v": mine, "o": "eq"}},
			"aggregate": []any{M{"count": M{"name": "n"}}}}}},
		Changes: []testkit.Req{{Path: nb + "set-read", Body: M{"notifications": []string{mine}}}, {Path: nb + "delete", Body: id}},
		Insider: auth.Principal{DomainID: "domain-a", UserID: "ulla", Role: auth.User},
	}.Run(t)
	e.userA.Call(nb+"delete", id).OK(nil)
	e.userA.Call(nb+"get", id).Fails(404, errs.NotFoundCode)
	if n := e.count(t, "notification_inbox"); n != 1 {
		t.Fatalf("%d entries after ulla's delete", n)
	}
}

// TestInboxPurged: an inbox entry goes after upstream's 60 days, not
// before (the purge's clock is moved).
func TestInboxPurged(t *testing.T) {
	t.Parallel()
	clk := testkit.StoppedClock(time.Time{})
	clk.Set(time.Now())
	e := setupWith(t, options{bus: true, now: clk.Now, purge: true})
	const nb = "/notification/v1/notification/"
	e.system.Call(nb+"create", M{"resource_type": "identity.User", "resource_id": "ulla", "topic": "inventory.Job",
		"message": M{"title": "job failed"}, "domain_id": "domain-a"}).OK(nil)
	count := func() int {
		var l struct {
			TotalCount int `json:"total_count"`
		}
		e.userA.Call(nb+"list", M{}).OK(&l)
		return l.TotalCount
	}
	clk.Set(time.Now().Add(59 * 24 * time.Hour))
	// A marker only a purge on the clock just set removes (2 days past the
	// keep): once it is gone, that purge would have taken the entry too.
	marker := bson.D{{Key: "_id", Value: "purge-marker"}, {Key: "user_id", Value: "nobody"}, {Key: "domain_id", Value: "domain-z"},
		{Key: "created_at", Value: clk.Now().Add(-fanout.InboxKeep - 2*24*time.Hour)}}
	inbox := e.db.Collection("notification_inbox")
	if _, err := inbox.InsertOne(context.Background(), marker); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, waitBound, "a purge on the clock set", func() bool {
		n, err := inbox.CountDocuments(context.Background(), bson.D{{Key: "_id", Value: "purge-marker"}})
		return err == nil && n == 0
	})
	if n := count(); n != 1 {
		t.Fatalf("%d entries after 59 days", n)
	}
	clk.Set(time.Now().Add(61 * 24 * time.Hour))
	testkit.Eventually(t, waitBound, "an entry 61 days old purged", func() bool { return count() == 0 })
}
