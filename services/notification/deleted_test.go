package notification_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/notification"
	"github.com/nubes-io/nubes/services/notification/internal/core"
)

// A user's deletion, published while the service is down, is done when
// it comes back: the user's channels and inbox go, the user leaves every
// project channel's users; another user's records stay. A project's
// deletion takes its channels. Delivered again, nothing more changes
// (issue 38).
func TestDeletedUserEndsItsNotifications(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	builtin := e.builtin(t, e.adminA)
	// Each user's e-mail channel to the address identity verified for it.
	other := e.anon.For(auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.User})
	for c, addr := range map[*testkit.Client]string{e.userA: "ulla@example.com", other: "mia@a.example.com"} {
		c.Call(ucBase+"create", M{"protocol_id": builtin, "name": "mine", "data": M{"email": addr}}).OK(nil)
	}
	const nb = "/notification/v1/notification/"
	for _, u := range []string{"ulla", "mia"} {
		e.system.Call(nb+"create", M{"resource_type": "identity.User", "resource_id": u, "topic": "inventory.Job",
			"message": M{"title": "for " + u}, "notification_type": "ERROR", "domain_id": "domain-a"}).OK(nil)
	}
	var ch struct {
		ProjectChannelID string `json:"project_channel_id"`
		Data             M      `json:"data"`
	}
	e.ownerA1.Call(pcBase+"create", M{"protocol_id": builtin, "name": "team", "data": M{"users": []string{"ulla", "olga"}}, "project_id": "project-1"}).OK(&ch)
	e.ownerA1.Call(pcBase+"create", M{"protocol_id": builtin, "name": "doomed", "data": M{"users": []string{"olga"}}, "project_id": "project-2"}).OK(nil)
	ulla := bson.D{{Key: "domain_id", Value: "domain-a"}, {Key: "user_id", Value: "ulla"}}
	for _, coll := range []string{core.UserChannelsCollection, core.InboxCollection} {
		if e.countWhere(t, coll, ulla) != 1 {
			t.Fatalf("ulla has no record in %s before the delete", coll)
		}
	}

	// The replica stops (SIGTERM); identity deletes ulla and project-2.
	e.stopWorkers()
	select {
	case <-e.workersStopped:
	case <-time.After(time.Minute):
		t.Fatal("the workers did not stop")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	publish := func(d events.Deleted) {
		if err := e.bus.Publish(ctx, events.DeletedSubject, d.ID, d); err != nil {
			t.Fatal(err)
		}
	}
	user := events.Deleted{ID: events.DeletedID(events.DeletedUser, "domain-a", "ulla", "t0"), Kind: events.DeletedUser, DomainID: "domain-a", UserID: "ulla"}
	project := events.Deleted{ID: events.DeletedID(events.DeletedProject, "domain-a", "project-2", "t0"), Kind: events.DeletedProject, DomainID: "domain-a",
		WorkspaceID: "workspace-1", ProjectID: "project-2"}
	publish(user)
	publish(project)
	if e.countWhere(t, core.UserChannelsCollection, ulla) != 1 {
		t.Fatal("a stopped replica deleted")
	}

	// A replica comes back.
	svc, err := notification.Build(context.Background(), e.deps, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.RunWorkers(t, svc.Workers)
	done := func() bool {
		return e.countWhere(t, core.UserChannelsCollection, ulla) == 0 && e.countWhere(t, core.InboxCollection, ulla) == 0 &&
			e.countWhere(t, core.ProjectChannelsCollection, bson.D{{Key: "data.users", Value: "ulla"}}) == 0 &&
			e.countWhere(t, core.ProjectChannelsCollection, bson.D{{Key: "project_id", Value: "project-2"}}) == 0
	}
	testkit.Eventually(t, time.Minute, "the deletions done after the restart", done)
	check := func() {
		t.Helper()
		e.ownerA1.Call(pcBase+"get", M{"project_channel_id": ch.ProjectChannelID}).OK(&ch)
		if got := fmt.Sprint(ch.Data["users"]); got != "[olga]" {
			t.Fatalf("the project channel's users after ulla's delete: %s", got)
		}
		theirs := bson.D{{Key: "domain_id", Value: "domain-a"}, {Key: "user_id", Value: "mia"}}
		if e.countWhere(t, core.UserChannelsCollection, theirs) != 1 || e.countWhere(t, core.InboxCollection, theirs) != 1 {
			t.Fatal("another user's channel or inbox went")
		}
		// ulla created again sees nothing of the old one.
		var l struct {
			TotalCount int `json:"total_count"`
		}
		for _, path := range []string{ucBase + "list", nb + "list"} {
			if e.userA.Call(path, M{}).OK(&l); l.TotalCount != 0 {
				t.Fatalf("%s of the new ulla: %d", path, l.TotalCount)
			}
		}
	}
	check()
	// Again (a retried delete's second event): nothing more goes.
	user.ID = events.DeletedID(events.DeletedUser, "domain-a", "ulla", "t1")
	publish(user)
	testkit.Eventually(t, time.Minute, "the second deletion acked", func() bool { return idle(t, e.bus) })
	check()
}

// idle reports whether notification's deletion consumer has nothing
// pending or unacknowledged.
func idle(t *testing.T, bus *events.Bus) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := bus.JS.Consumer(ctx, events.DeletedStream, events.DeletedConsumer("notification"))
	if err != nil {
		return false
	}
	info, err := cons.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}
