package notification_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// inboxOf lists whose inbox entries are stored, sorted.
func (e *env) inboxOf(t *testing.T) []string {
	t.Helper()
	cur, err := e.db.Collection("notification_inbox").Find(t.Context(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []bson.M
	if err := cur.All(t.Context(), &docs); err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, d := range docs {
		out = append(out, d["user_id"].(string))
	}
	slices.Sort(out)
	return out
}

// waitInbox waits until the inbox holds want (sorted user ids), then
// checks that no more comes.
func (e *env) waitInbox(t *testing.T, want []string) {
	t.Helper()
	testkit.Eventually(t, waitBound, fmt.Sprintf("%d inbox entries", len(want)), func() bool { return len(e.inboxOf(t)) >= len(want) })
	e.settled(t) // no more than want
	if got := e.inboxOf(t); !reflect.DeepEqual(got, want) {
		t.Fatalf("inbox of %v, want %v", got, want)
	}
}

// TestProjectChannelUsers: the built-in protocol's project channel names
// only ENABLED users of the domain who can read the project (identity's
// rule: the domain admin, the workspace's owner, its members in a PUBLIC
// project or listed in a PRIVATE one). Anyone else is 400 naming the id,
// one message whether the id is unknown or only outside, and nothing is
// stored or changed: a member cannot reach another workspace's person
// (the case), a made-up id or another domain's user.
func TestProjectChannelUsers(t *testing.T) {
	t.Parallel()
	e := setup(t)
	builtin := e.builtin(t, e.adminA)
	// mia, a member of workspace-1 whose token reaches project-1.
	member := e.anon.For(auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1", Projects: []string{"project-1"}})
	mk := func(project string, users ...string) M {
		return M{"protocol_id": builtin, "name": "people", "data": M{"users": users}, "project_id": project}
	}
	var ch ProjectChannel
	member.Call(pcBase+"create", mk("project-1", "ulla", "mia", "olga", "alice", "pia")).OK(&ch)
	e.ownerA1.Call(pcBase+"create", mk("project-2", "pia", "olga")).OK(nil)
	before := e.count(t, pcColl)
	for _, c := range []struct {
		name, project, bad string
		users              []string
	}{
		{"another workspace's member", "project-1", "wendy", []string{"ulla", "wendy"}},
		{"a made-up id", "project-1", "ghost", []string{"ghost"}},
		{"another domain's user", "project-1", "bob", []string{"bob"}},
		{"a member not listed in a PRIVATE project", "project-2", "ulla", []string{"pia", "ulla"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := member.Call(pcBase+"create", mk(c.project, c.users...))
			if c.project == "project-2" { // the member mia does not reach it; its owner does
				r = e.ownerA1.Call(pcBase+"create", mk(c.project, c.users...))
			}
			r.Fails(400, errs.InvalidParameter)
			if !strings.Contains(string(r.Body), `\"`+c.bad+`\"`) {
				t.Errorf("400 does not name %s: %s", c.bad, r.Body)
			}
			if n := e.count(t, pcColl); n != before {
				t.Fatalf("stored: %d channels", n)
			}
			if c.project != "project-1" {
				return
			}
			member.Call(pcBase+"update", M{"project_channel_id": ch.ProjectChannelID, "data": M{"users": c.users}}).Fails(400, errs.InvalidParameter)
			var got ProjectChannel
			member.Call(pcBase+"get", M{"project_channel_id": ch.ProjectChannelID}).OK(&got)
			if !reflect.DeepEqual(got.Data["users"], []any{"ulla", "mia", "olga", "alice", "pia"}) {
				t.Fatalf("an update refused changed the users: %v", got.Data)
			}
		})
	}
	// Unknown and outside answer alike.
	ghost := member.Call(pcBase+"create", mk("project-1", "ghost"))
	wendy := member.Call(pcBase+"create", mk("project-1", "wendy"))
	if strings.ReplaceAll(string(ghost.Body), "ghost", "X") != strings.ReplaceAll(string(wendy.Body), "wendy", "X") {
		t.Errorf("unknown and outside differ: %s / %s", ghost.Body, wendy.Body)
	}
	// Another domain's admin and no token reach nothing.
	ownerB := e.anon.For(auth.Principal{DomainID: "domain-b", UserID: "bob", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-b"})
	ownerB.Call(pcBase+"create", mk("project-1", "ulla")).Fails(404, errs.NotFoundCode)
	ownerB.Call(pcBase+"update", M{"project_channel_id": ch.ProjectChannelID, "data": M{"users": []string{"bob"}}}).Fails(404, errs.NotFoundCode)
	e.anon.Call(pcBase+"create", mk("project-1", "ulla")).Fails(401, errs.AuthenticateFailure)
	// A user who gained access is taken.
	e.people.set(func(d *directory) {
		d.bindings["wendy"] = append(d.bindings["wendy"], dirBind{"WORKSPACE_MEMBER", "workspace-1"})
	})
	member.Call(pcBase+"update", M{"project_channel_id": ch.ProjectChannelID, "data": M{"users": []string{"wendy"}}}).OK(nil)
	// Identity down: 503, nothing stored.
	e.identity.Handle("/identity/v2/project/list", func(*auth.Principal, map[string]any) (any, error) {
		return nil, errs.Down("identity's store", fmt.Errorf("test: down"))
	})
	member.Call(pcBase+"create", mk("project-1", "ulla")).Fails(503, errs.Unavailable)
	if n := e.count(t, pcColl); n != before {
		t.Fatalf("stored while identity was down: %d", n)
	}
}

// TestAudienceAtSendTime: the users of a project channel are checked
// again when a notice goes: one who lost the project (binding taken), was
// disabled, or left the domain gets no inbox entry and none of their
// channels is used; a request naming a made-up user stores nothing; an
// e-mail channel whose owner's verified address changed is not mailed.
func TestAudienceAtSendTime(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true})
	builtin := e.builtin(t, e.adminA)
	plain := e.protocolWith(t, "hooks", "PLAIN_TEXT")
	e.plugin.Reset()
	e.ownerA1.Call(pcBase+"create", M{"protocol_id": builtin, "name": "people", "data": M{"users": []string{"ulla", "mia", "olga", "pia"}},
		"project_id": "project-1"}).OK(nil)
	mia := e.anon.For(auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.User})
	mia.Call(ucBase+"create", M{"protocol_id": plain, "name": "hook", "data": M{"webhook_url": "https://hooks.example.com/mia"}}).OK(nil)
	e.userA.Call(ucBase+"create", M{"protocol_id": builtin, "name": "mail", "data": M{"email": "ulla@example.com"}}).OK(nil)

	// mia's binding is taken, olga is disabled, pia leaves the domain;
	// ulla's verified address becomes another.
	e.people.set(func(d *directory) {
		delete(d.bindings, "mia")
		o := d.users["olga"]
		o.state = "DISABLED"
		d.users["olga"] = o
		delete(d.users, "pia")
		delete(d.bindings, "pia")
		u := d.users["ulla"]
		u.email = "ulla@new.example.com"
		d.users["ulla"] = u
	})
	e.request(t, events.NotificationRequest{ID: "alert-send-time-1", DomainID: "domain-a", ProjectID: "project-1", Topic: "monitoring.Alert",
		Message: events.NotificationMessage{Title: "disk full"}})
	e.waitInbox(t, []string{"ulla"})
	if calls := e.plugin.Calls(dispatchMethod); len(calls) != 0 {
		t.Fatalf("mia's channel was used: %v", calls)
	}
	if mails := e.mails(t); len(mails) != 0 {
		t.Fatalf("mailed %+v to an address no longer verified", mails)
	}
	// A made-up user named directly: nothing stored.
	e.system.Call("/notification/v1/notification/create", M{"resource_type": "identity.User", "resource_id": "ghost", "topic": "t",
		"message": M{"title": "x"}, "domain_id": "domain-a"}).OK(nil)
	if got := e.inboxOf(t); !reflect.DeepEqual(got, []string{"ulla"}) {
		t.Fatalf("inbox of %v after a notice to a made-up user", got)
	}
}

// TestRequestBounds: one request reaches at most max users (inbox
// entries) and max channels (deliveries); the rest is left out by id
// order, so a redelivery leaves out the same.
func TestRequestBounds(t *testing.T) {
	t.Parallel()
	e := setupWith(t, options{bus: true, maxUsers: 2, maxChannels: 3})
	plain := e.protocolWith(t, "hooks", "PLAIN_TEXT")
	e.plugin.Reset()
	for i := range 5 {
		e.ownerA1.Call(pcBase+"create", M{"protocol_id": plain, "name": fmt.Sprint("c", i), "data": M{"webhook_url": fmt.Sprint("https://hooks.example.com/", i)},
			"project_id": "project-1"}).OK(nil)
	}
	req := events.NotificationRequest{ID: "bounded-1", DomainID: "domain-a", ProjectID: "project-1", UserIDs: []string{"ulla", "mia", "olga", "alice"},
		Topic: "t", Message: events.NotificationMessage{Title: "x"}}
	e.request(t, req)
	e.dispatched(t, 3)
	e.waitInbox(t, []string{"alice", "mia"})
	e.request(t, req)
	e.dispatched(t, 3)
	e.waitInbox(t, []string{"alice", "mia"})
}

// TestInboxBounded: a user's inbox keeps its newest entries; past the
// bound the oldest go first (the fan-out's clock orders them).
func TestInboxBounded(t *testing.T) {
	t.Parallel()
	clk := testkit.StoppedClock(time.Time{})
	clk.Set(time.Now())
	e := setupWith(t, options{bus: true, now: clk.Now, inboxMax: 3})
	const nb = "/notification/v1/notification/"
	for i := 1; i <= 5; i++ {
		clk.Set(time.Now().Add(time.Duration(i) * time.Minute))
		e.system.Call(nb+"create", M{"resource_type": "identity.User", "resource_id": "ulla", "topic": "t",
			"message": M{"title": fmt.Sprint("notice ", i)}, "domain_id": "domain-a"}).OK(nil)
	}
	e.system.Call(nb+"create", M{"resource_type": "identity.User", "resource_id": "mia", "topic": "t", "message": M{"title": "mia's"}, "domain_id": "domain-a"}).OK(nil)
	var l struct {
		Results []struct {
			Message M `json:"message"`
		} `json:"results"`
		TotalCount int `json:"total_count"`
	}
	e.userA.Call(nb+"list", M{"query": M{"sort": []M{{"key": "created_at"}}}}).OK(&l)
	var titles []string
	for _, r := range l.Results {
		titles = append(titles, r.Message["title"].(string))
	}
	if !reflect.DeepEqual(titles, []string{"notice 3", "notice 4", "notice 5"}) {
		t.Fatalf("ulla's inbox %v", titles)
	}
	if n := e.countWhere(t, "notification_inbox", bson.D{{Key: "user_id", Value: "mia"}}); n != 1 {
		t.Fatalf("mia's inbox %d", n)
	}
}

// TestEmailChannelVerified: an e-mail channel of the built-in protocol
// takes only its owner's verified address (identity's); another address,
// or an address not verified, is 400 on create and update and nothing is
// stored or changed.
func TestEmailChannelVerified(t *testing.T) {
	t.Parallel()
	e := setup(t)
	builtin := e.builtin(t, e.userA)
	pia := e.anon.For(auth.Principal{DomainID: "domain-a", UserID: "pia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"})
	for _, c := range []struct {
		name, email string
		as          string
	}{
		{"an outside address", "evil@example.com", "ulla"},
		{"another user's verified address", "mia@a.example.com", "ulla"},
		{"one's own address not verified", "pia@a.example.com", "pia"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := e.userA
			if c.as == "pia" {
				cl = pia
			}
			cl.Call(ucBase+"create", M{"protocol_id": builtin, "name": "m", "data": M{"email": c.email}}).Fails(400, errs.InvalidParameter)
			if n := e.count(t, ucColl); n != 0 {
				t.Fatalf("stored %d", n)
			}
		})
	}
	var ch UserChannel
	e.userA.Call(ucBase+"create", M{"protocol_id": builtin, "name": "m", "data": M{"email": "Ulla@Example.com"}}).OK(&ch)
	e.userA.Call(ucBase+"update", M{"user_channel_id": ch.UserChannelID, "data": M{"email": "evil@example.com"}}).Fails(400, errs.InvalidParameter)
	var got UserChannel
	e.userA.Call(ucBase+"get", M{"user_channel_id": ch.UserChannelID}).OK(&got)
	if got.Data["email"] != "Ulla@Example.com" {
		t.Fatalf("a refused update changed the address: %v", got.Data)
	}
	// Another domain's user cannot touch it; no token is 401.
	e.adminB.Call(ucBase+"update", M{"user_channel_id": ch.UserChannelID, "data": M{"email": "bob@b.example.com"}}).Fails(404, errs.NotFoundCode)
	e.anon.Call(ucBase+"create", M{"protocol_id": builtin, "name": "m", "data": M{"email": "ulla@example.com"}}).Fails(401, errs.AuthenticateFailure)
}
