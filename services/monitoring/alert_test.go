package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/alertlink"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/monitoring"
	"github.com/nubes-io/nubes/services/monitoring/internal/core"
)

const ap = "/monitoring/v1/alert/"

type alertInfo struct {
	AlertNumber        int64          `json:"alert_number"`
	AlertID            string         `json:"alert_id"`
	Title              string         `json:"title"`
	State              string         `json:"state"`
	Description        string         `json:"description"`
	Assignee           string         `json:"assignee"`
	Responder          string         `json:"responder"`
	Urgency            string         `json:"urgency"`
	Severity           string         `json:"severity"`
	EscalationStep     int32          `json:"escalation_step"`
	EscalationTTL      int32          `json:"escalation_ttl"`
	TriggeredBy        string         `json:"triggered_by"`
	EventKey           string         `json:"event_key"`
	EventCount         int64          `json:"event_count"`
	LastEventID        string         `json:"last_event_id"`
	DomainID           string         `json:"domain_id"`
	WorkspaceID        string         `json:"workspace_id"`
	ProjectID          string         `json:"project_id"`
	WebhookID          string         `json:"webhook_id"`
	EscalationPolicyID string         `json:"escalation_policy_id"`
	AdditionalInfo     map[string]any `json:"additional_info"`
	Resources          []struct {
		Name string `json:"name"`
	} `json:"resources"`
	CreatedAt      string  `json:"created_at"`
	AcknowledgedAt *string `json:"acknowledged_at"`
	ResolvedAt     *string `json:"resolved_at"`
	EscalatedAt    *string `json:"escalated_at"`
}

func (c *callers) alert(t *testing.T, as *testkit.Client, title, project string) alertInfo {
	t.Helper()
	var a alertInfo
	as.Call(ap+"create", map[string]any{"title": title, "project_id": project}).OK(&a)
	return a
}

func (c *callers) getAlert(t *testing.T, id string) alertInfo {
	t.Helper()
	var a alertInfo
	c.adminA.Call(ap+"get", map[string]any{"alert_id": id}).OK(&a)
	return a
}

// replica is a second monitoring service on the same store and broker,
// with its workers running: what a second pod does.
func (c *callers) replica(t *testing.T) *testkit.Client {
	t.Helper()
	svc, err := monitoring.Build(context.Background(), c.deps, c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	testkit.RunWorkers(t, svc.Workers)
	srv, err := server.New(server.Options{Name: "monitoring", Auth: testkit.Get().Verifier, Logger: slog.New(slog.DiscardHandler), Raw: svc.Raw}, svc.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	return testkit.NewClient(t, srv.Handler())
}

func TestAlertCreate(t *testing.T) {
	t.Parallel()
	c := setup(t)
	a := c.alert(t, c.memberA1, "disk full", "project-a1")
	if a.AlertNumber != 1 || !strings.HasPrefix(a.AlertID, "alert-") || len(a.AlertID) != 18 || a.State != "TRIGGERED" ||
		a.Urgency != "HIGH" || a.Severity != "NONE" || a.EscalationStep != 1 || a.EscalationTTL != 1 || a.TriggeredBy != "mia" ||
		a.DomainID != "domain-a" || a.WorkspaceID != "workspace-1" || a.ProjectID != "project-a1" || a.AcknowledgedAt != nil ||
		a.ResolvedAt != nil || a.EscalatedAt != nil || a.EscalationPolicyID != "" || a.CreatedAt == "" {
		t.Fatalf("created %+v", a)
	}
	var b alertInfo
	c.ownerA1.Call(ap+"create", map[string]any{"title": "cpu", "project_id": "project-a1", "urgency": "LOW", "description": "hot",
		"assignee": "mia"}).OK(&b)
	if b.AlertNumber != 2 || b.Urgency != "LOW" || b.Description != "hot" || b.Assignee != "mia" || b.TriggeredBy != "olga" {
		t.Fatalf("second %+v", b)
	}
	// Numbers are per domain.
	var other alertInfo
	c.adminB.Call(ap+"create", map[string]any{"title": "b", "project_id": "project-b1"}).OK(&other)
	if other.AlertNumber != 1 {
		t.Fatalf("domain b starts at %d", other.AlertNumber)
	}
	var l list[alertInfo]
	c.memberA1.Call(ap+"list", map[string]any{"urgency": "LOW"}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].AlertID != b.AlertID {
		t.Fatalf("list LOW %+v", l)
	}
	c.adminA.Call(ap+"list", map[string]any{"alert_number": 1}).OK(&l)
	if l.TotalCount != 1 || l.Results[0].AlertID != a.AlertID {
		t.Fatalf("list number 1 %+v", l)
	}
	var st struct {
		Results []map[string]any `json:"results"`
	}
	c.adminA.Call(ap+"stat", map[string]any{"query": map[string]any{"aggregate": []any{map[string]any{"group": map[string]any{
		"keys": []any{map[string]any{"key": "urgency", "name": "urgency"}}, "fields": []any{map[string]any{"name": "n", "operator": "count"}}}}}}}).OK(&st)
	if len(st.Results) != 2 {
		t.Fatalf("stat %+v", st)
	}
}

// TestAlertCreatePolicy: an alert of a project without an alert config
// follows the scope's default policy: the workspace's, else the domain's.
func TestAlertCreatePolicy(t *testing.T) {
	t.Parallel()
	c := setup(t)
	dom := c.policy(t, c.adminA, "Domain", "DOMAIN", map[string]any{"repeat_count": 2})
	if a := c.alert(t, c.memberA1, "x", "project-a1"); a.EscalationPolicyID != dom.EscalationPolicyID || a.EscalationTTL != 3 {
		t.Fatalf("domain default: %+v", a)
	}
	ws := c.policy(t, c.ownerA1, "Workspace", "WORKSPACE", map[string]any{"repeat_count": 1})
	if a := c.alert(t, c.memberA1, "y", "project-a1"); a.EscalationPolicyID != ws.EscalationPolicyID || a.EscalationTTL != 2 {
		t.Fatalf("workspace default: %+v", a)
	}
}

func TestAlertBadInput(t *testing.T) {
	t.Parallel()
	c := setup(t)
	for _, tc := range []struct {
		body   any
		status int
		code   string
	}{
		{map[string]any{"project_id": "project-a1"}, 400, errs.RequiredParameter},
		{map[string]any{"title": "x"}, 400, errs.RequiredParameter},
		{map[string]any{"title": "x", "project_id": "project-a1", "urgency": "MEDIUM"}, 400, errs.InvalidParameter},
		{map[string]any{"title": "x", "project_id": "project-a1", "state": "ACKNOWLEDGED"}, 400, errs.InvalidParameter},
		{map[string]any{"title": strings.Repeat("x", 1001), "project_id": "project-a1"}, 400, errs.InvalidParameter},
		{map[string]any{"title": 5, "project_id": "project-a1"}, 400, errs.InvalidParameterType},
		{`{"title": "x", "project_id": "project-a1"`, 400, errs.JSONFormat},
		{map[string]any{"title": "x", "project_id": "project-nope"}, 404, errs.NotFoundCode},
		{map[string]any{"title": "x", "project_id": "project-a2"}, 404, errs.NotFoundCode}, // another workspace
		{map[string]any{"title": "x", "project_id": "project-b1"}, 404, errs.NotFoundCode}, // another domain
	} {
		r := c.memberA1.Call(ap+"create", tc.body)
		if r.Status != tc.status {
			t.Errorf("%v: %d %s", tc.body, r.Status, r.Body)
			continue
		}
		r.Fails(tc.status, tc.code)
	}
	a := c.alert(t, c.memberA1, "x", "project-a1")
	for _, tc := range []struct {
		path   string
		body   any
		status int
		code   string
	}{
		{"update", map[string]any{"alert_id": a.AlertID, "state": "ERROR"}, 400, errs.InvalidParameter},
		{"update", map[string]any{"alert_id": a.AlertID, "state": "SNOOZED"}, 400, errs.InvalidParameter},
		{"update", map[string]any{"alert_id": a.AlertID, "urgency": "low"}, 400, errs.InvalidParameter},
		{"update", map[string]any{"title": "y"}, 400, errs.RequiredParameter},
		{"update", map[string]any{"alert_id": a.AlertID, "project_id": "project-a2"}, 404, errs.NotFoundCode},
		{"update", map[string]any{"alert_id": "alert-000000000000", "title": "y"}, 404, errs.NotFoundCode},
		{"assign-user", map[string]any{"alert_id": a.AlertID}, 400, errs.RequiredParameter},
		{"assign-user", map[string]any{"alert_id": a.AlertID, "assignee": ""}, 400, errs.RequiredParameter},
		{"delete", map[string]any{}, 400, errs.RequiredParameter},
		{"get", map[string]any{"alert_id": "alert-000000000000"}, 404, errs.NotFoundCode},
		{"list", map[string]any{"state": "OPEN"}, 400, errs.InvalidParameter},
		{"stat", map[string]any{}, 400, errs.RequiredParameter},
		{"update-state", map[string]any{"alert_id": a.AlertID}, 400, errs.RequiredParameter},
		{"update-state", map[string]any{"alert_id": a.AlertID, "access_key": "x", "state": "RESOLVED"}, 400, errs.InvalidParameter},
	} {
		r := c.memberA1.Call(ap+tc.path, tc.body)
		if r.Status != tc.status {
			t.Errorf("%s %v: %d %s", tc.path, tc.body, r.Status, r.Body)
			continue
		}
		r.Fails(tc.status, tc.code)
	}
	if n := c.count(t, core.AlertsCollection, nil); n != 1 {
		t.Fatalf("%d alerts stored", n)
	}
	if got := c.getAlert(t, a.AlertID); got.Title != "x" || got.State != "TRIGGERED" || got.ProjectID != "project-a1" || got.Urgency != "HIGH" {
		t.Fatalf("changed by refused calls: %+v", got)
	}
}

// setState puts an alert in a state as stored (ERROR only comes from an
// ERROR event).
func (c *callers) setState(t *testing.T, id, state string) {
	t.Helper()
	if _, err := c.db.Collection(core.AlertsCollection).UpdateOne(context.Background(), bson.D{{Key: "_id", Value: id}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: state}}}}); err != nil {
		t.Fatal(err)
	}
}

// TestAlertTransitions: update moves between TRIGGERED, ACKNOWLEDGED and
// RESOLVED as upstream (any move, with its timestamps and responder); an
// ERROR alert refuses every change and stays as it was.
func TestAlertTransitions(t *testing.T) {
	t.Parallel()
	c := setup(t)
	states := []string{"TRIGGERED", "ACKNOWLEDGED", "RESOLVED"}
	for _, from := range states {
		for _, to := range states {
			t.Run(from+"->"+to, func(t *testing.T) {
				a := c.alert(t, c.memberA1, "x", "project-a1")
				if from != "TRIGGERED" {
					c.ownerA1.Call(ap+"update", map[string]any{"alert_id": a.AlertID, "state": from}).OK(nil)
				}
				var got alertInfo
				c.memberA1.Call(ap+"update", map[string]any{"alert_id": a.AlertID, "state": to}).OK(&got)
				if got.State != to {
					t.Fatalf("state %s", got.State)
				}
				switch to {
				case "ACKNOWLEDGED":
					if got.Responder != "mia" || got.AcknowledgedAt == nil || got.ResolvedAt != nil {
						t.Fatalf("acknowledged %+v", got)
					}
				case "RESOLVED":
					if got.ResolvedAt == nil || got.EscalationTTL != 0 {
						t.Fatalf("resolved %+v", got)
					}
				case "TRIGGERED":
					if got.AcknowledgedAt != nil || got.ResolvedAt != nil {
						t.Fatalf("triggered %+v", got)
					}
				}
				if c.getAlert(t, a.AlertID).State != to {
					t.Fatal("not stored")
				}
			})
		}
	}
	t.Run("ERROR refuses", func(t *testing.T) {
		a := c.alert(t, c.memberA1, "x", "project-a1")
		c.setState(t, a.AlertID, "ERROR")
		before := c.raw(t, core.AlertsCollection, a.AlertID)
		for _, body := range []map[string]any{{"state": "ACKNOWLEDGED"}, {"state": "RESOLVED"}, {"state": "TRIGGERED"}, {"title": "y"},
			{"urgency": "LOW"}, {"reset_description": true}} {
			body["alert_id"] = a.AlertID
			c.memberA1.Call(ap+"update", body).Fails(http.StatusConflict, errs.AlertInvalidState)
		}
		c.memberA1.Call(ap+"assign-user", map[string]any{"alert_id": a.AlertID, "assignee": "mia"}).Fails(http.StatusConflict, errs.AlertInvalidState)
		if after := c.raw(t, core.AlertsCollection, a.AlertID); !reflect.DeepEqual(after, before) {
			t.Fatalf("changed: %v -> %v", before, after)
		}
	})
	t.Run("fields", func(t *testing.T) {
		a := c.alert(t, c.memberA1, "x", "project-a1")
		var got alertInfo
		c.memberA1.Call(ap+"update", map[string]any{"alert_id": a.AlertID, "title": "y", "description": "d", "urgency": "LOW"}).OK(&got)
		if got.Title != "y" || got.Description != "d" || got.Urgency != "LOW" || got.State != "TRIGGERED" {
			t.Fatalf("%+v", got)
		}
		c.memberA1.Call(ap+"update", map[string]any{"alert_id": a.AlertID, "reset_description": true}).OK(&got)
		if got.Description != "" || got.Title != "y" {
			t.Fatalf("reset %+v", got)
		}
		// Only a user of the alert's workspace (identity's bindings).
		c.memberA1.Call(ap+"assign-user", map[string]any{"alert_id": a.AlertID, "assignee": "nobody"}).Fails(http.StatusNotFound, errs.NotFoundCode)
		c.memberA1.Call(ap+"assign-user", map[string]any{"alert_id": a.AlertID, "assignee": "max"}).Fails(http.StatusNotFound, errs.NotFoundCode)
		c.memberA1.Call(ap+"assign-user", map[string]any{"alert_id": a.AlertID, "assignee": "alice"}).OK(nil)
		c.memberA1.Call(ap+"assign-user", map[string]any{"alert_id": a.AlertID, "assignee": "olga"}).OK(&got)
		if got.Assignee != "olga" {
			t.Fatalf("assign %+v", got)
		}
		// Moving to another project of the caller's reach takes its policy.
		pol := c.policy(t, c.ownerA1, "Ws", "WORKSPACE", map[string]any{"repeat_count": 4})
		c.setState(t, a.AlertID, "TRIGGERED")
		c.ownerA1.Call(ap+"update", map[string]any{"alert_id": a.AlertID, "project_id": "project-a1"}).OK(&got)
		if got.EscalationPolicyID != "" {
			t.Fatalf("same project took a policy: %+v", got)
		}
		c.ownerA1.Call(ap+"update", map[string]any{"alert_id": a.AlertID, "project_id": "project-a3"}).OK(&got)
		if got.ProjectID != "project-a3" || got.WorkspaceID != "workspace-1" || got.EscalationPolicyID != pol.EscalationPolicyID ||
			got.EscalationTTL != 4 || got.EscalationStep != 1 {
			t.Fatalf("moved %+v", got)
		}
	})
}

func TestAlertDeleteCascades(t *testing.T) {
	t.Parallel()
	c := setup(t)
	a := c.alert(t, c.memberA1, "x", "project-a1")
	keep := c.alert(t, c.memberA1, "y", "project-a1")
	for _, id := range []string{a.AlertID, keep.AlertID} {
		c.memberA1.Call("/monitoring/v1/note/create", map[string]any{"alert_id": id, "note": "n"}).OK(nil)
		if _, err := c.db.Collection(core.EventsCollection).InsertOne(context.Background(), bson.D{{Key: "_id", Value: "event-" + id},
			{Key: "alert_id", Value: id}, {Key: "domain_id", Value: "domain-a"}}); err != nil {
			t.Fatal(err)
		}
	}
	c.memberA1.Call(ap+"delete", map[string]any{"alert_id": a.AlertID}).OK(nil)
	c.memberA1.Call(ap+"get", map[string]any{"alert_id": a.AlertID}).Fails(404, errs.NotFoundCode)
	c.memberA1.Call(ap+"delete", map[string]any{"alert_id": a.AlertID}).Fails(404, errs.NotFoundCode)
	for _, coll := range []string{core.NotesCollection, core.EventsCollection} {
		if n := c.count(t, coll, bson.D{{Key: "alert_id", Value: a.AlertID}}); n != 0 {
			t.Fatalf("%s keeps %d records of the deleted alert", coll, n)
		}
		if n := c.count(t, coll, bson.D{{Key: "alert_id", Value: keep.AlertID}}); n != 1 {
			t.Fatalf("%s keeps %d records of the other alert", coll, n)
		}
	}
}

// TestAlertNumbersConcurrent: creates racing on two replicas number the
// domain's alerts 1..n, no gap, no duplicate.
func TestAlertNumbersConcurrent(t *testing.T) {
	t.Parallel()
	c := setup(t)
	other := c.replica(t).For(memberA1)
	const n = 24
	var wg sync.WaitGroup
	ids := make(chan string, n)
	for i := range n {
		cl := c.memberA1
		if i%2 == 1 {
			cl = other
		}
		wg.Go(func() {
			r := cl.Call(ap+"create", map[string]any{"title": fmt.Sprint("a", i), "project_id": "project-a1"})
			if r.Status != 200 {
				t.Errorf("create %d: %d %s", i, r.Status, r.Body)
				return
			}
			var a alertInfo
			_ = json.Unmarshal(r.Body, &a)
			ids <- a.AlertID
		})
	}
	wg.Wait()
	close(ids)
	c.checkNumbers(t, n)
}

// checkUniqueNumbers asserts the domain has n alerts, no two of one
// number: what holds where a create died after taking its number (a gap).
func (c *callers) checkUniqueNumbers(t *testing.T, n int) {
	t.Helper()
	var l list[alertInfo]
	c.adminA.Call(ap+"list", map[string]any{"query": map[string]any{"page": map[string]any{"limit": 1000}}}).OK(&l)
	seen := map[int64]bool{}
	for _, a := range l.Results {
		if seen[a.AlertNumber] {
			t.Fatalf("number %d given twice", a.AlertNumber)
		}
		seen[a.AlertNumber] = true
	}
	if len(l.Results) != n {
		t.Fatalf("%d alerts, want %d", len(l.Results), n)
	}
}

// checkNumbers asserts the domain's alerts are numbered 1..n.
func (c *callers) checkNumbers(t *testing.T, n int) {
	t.Helper()
	var l list[alertInfo]
	c.adminA.Call(ap+"list", map[string]any{"query": map[string]any{"page": map[string]any{"limit": 1000}}}).OK(&l)
	var nums []int
	for _, a := range l.Results {
		nums = append(nums, int(a.AlertNumber))
	}
	slices.Sort(nums)
	if len(nums) != n {
		t.Fatalf("%d alerts, want %d", len(nums), n)
	}
	for i, v := range nums {
		if v != i+1 {
			t.Fatalf("numbers %v: gap or duplicate at %d", nums, i+1)
		}
	}
}

// TestAlertNumberCarriesOldCounter: a domain's counter as the
// lease-held numbering left it (next: the next number to give) goes on
// from there once a replica of today starts, and numbers stay unique.
func TestAlertNumberCarriesOldCounter(t *testing.T) {
	t.Parallel()
	c := setup(t)
	c.alert(t, c.memberA1, "one", "project-a1")
	claims := c.db.Collection(core.ClaimsCollection)
	if _, err := claims.ReplaceOne(context.Background(), bson.D{{Key: "_id", Value: "alert-number#domain-a"}},
		bson.D{{Key: "_id", Value: "alert-number#domain-a"}, {Key: "next", Value: int64(5)}}); err != nil {
		t.Fatal(err)
	}
	stop := c.instance(t) // its start carries the counter over
	defer stop()
	if a := c.alert(t, c.memberA1, "five", "project-a1"); a.AlertNumber != 5 {
		t.Fatalf("got %d, want 5", a.AlertNumber)
	}
	if a := c.alert(t, c.memberA1, "six", "project-a1"); a.AlertNumber != 6 {
		t.Fatalf("got %d, want 6", a.AlertNumber)
	}
	c.checkUniqueNumbers(t, 3)
}

// linkOf makes the acknowledge link a notification would carry.
func linkOf(t *testing.T, a alertInfo, now time.Time) string {
	t.Helper()
	u, err := alertlink.URL(testKeys, "https://nubes.example.com", a.DomainID, a.AlertID, alertlink.Acknowledged, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u, "https://nubes.example.com")
}

func (c *callers) visit(t *testing.T, method, path, contentType, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	c.handler.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Body)
	return rec.Code, string(b)
}

// TestAlertLink: the link a notification carries acknowledges its alert
// once, without a token; a GET only shows the button; an expired,
// altered, moved or used link changes nothing.
func TestAlertLink(t *testing.T) {
	t.Parallel()
	c := setup(t)
	a := c.alert(t, c.memberA1, "disk full", "project-a1")
	link := linkOf(t, a, c.clock.Now())
	status, body := c.visit(t, http.MethodGet, link, "", "")
	if status != 200 || !strings.Contains(body, `<form method="post">`) || !strings.Contains(body, "disk full") {
		t.Fatalf("GET %d %s", status, body)
	}
	if got := c.getAlert(t, a.AlertID); got.State != "TRIGGERED" {
		t.Fatalf("a GET acknowledged: %+v", got)
	}
	// Moved to another alert, domain or state, or altered: refused.
	b := c.alert(t, c.memberA1, "other", "project-a1")
	tok := strings.Split(link, "/")[7]
	for _, bad := range []string{
		strings.Replace(link, a.AlertID, b.AlertID, 1),
		strings.Replace(link, "/domain-a/", "/domain-b/", 1),
		strings.Replace(link, tok, tok[:len(tok)-2]+"AA", 1),
	} {
		if status, body := c.visit(t, http.MethodPost, bad, "", ""); status != 403 {
			t.Fatalf("POST %s: %d %s", bad, status, body)
		}
	}
	if status, _ := c.visit(t, http.MethodPost, strings.Replace(link, "/ACKNOWLEDGED", "/RESOLVED", 1), "", ""); status != 404 {
		t.Fatalf("RESOLVED link: %d", status)
	}
	if got := c.getAlert(t, a.AlertID); got.State != "TRIGGERED" {
		t.Fatalf("refused links changed it: %+v", got)
	}
	status, body = c.visit(t, http.MethodPost, link, "application/x-www-form-urlencoded", url.Values{"responder": {"oncall"}}.Encode())
	if status != 200 {
		t.Fatalf("POST %d %s", status, body)
	}
	got := c.getAlert(t, a.AlertID)
	if got.State != "ACKNOWLEDGED" || got.Responder != "oncall" || got.AcknowledgedAt == nil {
		t.Fatalf("after the link: %+v", got)
	}
	// Once only.
	if status, _ := c.visit(t, http.MethodPost, link, "", ""); status != 403 {
		t.Fatalf("second use: %d", status)
	}
	// Expired.
	old := linkOf(t, b, c.clock.Now())
	c.clock.Advance(time.Hour + time.Second)
	if status, body := c.visit(t, http.MethodPost, old, "", ""); status != 403 || !strings.Contains(body, "expired") {
		t.Fatalf("expired: %d %s", status, body)
	}
	if got := c.getAlert(t, b.AlertID); got.State != "TRIGGERED" {
		t.Fatalf("expired link changed it: %+v", got)
	}
	// update-state with the token as access_key, no credentials; an alert
	// not TRIGGERED stays as it is.
	fresh := linkOf(t, b, c.clock.Now())
	key := strings.Split(fresh, "/")[7]
	var upd alertInfo
	c.anon.Call(ap+"update-state", map[string]any{"alert_id": b.AlertID, "access_key": key, "responder": "bot"}).OK(&upd)
	if upd.State != "ACKNOWLEDGED" || upd.Responder != "bot" {
		t.Fatalf("update-state %+v", upd)
	}
	c.anon.Call(ap+"update-state", map[string]any{"alert_id": b.AlertID, "access_key": key}).Fails(403, errs.PermissionDenied)
	c.ownerA1.Call(ap+"update", map[string]any{"alert_id": b.AlertID, "state": "RESOLVED"}).OK(nil)
	again := strings.Split(linkOf(t, b, c.clock.Now()), "/")[7]
	c.anon.Call(ap+"update-state", map[string]any{"alert_id": b.AlertID, "access_key": again}).OK(&upd)
	if upd.State != "RESOLVED" {
		t.Fatalf("a RESOLVED alert moved: %+v", upd)
	}
	c.anon.Call(ap+"update-state", map[string]any{"alert_id": a.AlertID, "access_key": again}).Fails(403, errs.PermissionDenied)
}

// TestAlertLinkOnceUnderRace: the same link used at once on two replicas
// acknowledges once; the other use is refused.
func TestAlertLinkOnceUnderRace(t *testing.T) {
	t.Parallel()
	c := setup(t)
	other := c.replica(t)
	a := c.alert(t, c.memberA1, "x", "project-a1")
	key := strings.Split(linkOf(t, a, c.clock.Now()), "/")[7]
	var wg sync.WaitGroup
	codes := make(chan int, 4)
	for i := range 4 {
		cl := c.anon
		if i%2 == 1 {
			cl = other
		}
		wg.Go(func() {
			codes <- cl.Call(ap+"update-state", map[string]any{"alert_id": a.AlertID, "access_key": key, "responder": fmt.Sprint("r", i)}).Status
		})
	}
	wg.Wait()
	close(codes)
	ok := 0
	for code := range codes {
		switch code {
		case 200:
			ok++
		case 403:
		default:
			t.Fatalf("status %d", code)
		}
	}
	if ok != 1 {
		t.Fatalf("%d uses succeeded", ok)
	}
}

// TestAlertLinkSaysLittle: the link's page and POST, open to whoever
// holds the link, answer only the alert's number, title and state, are
// never cached or framed; a forged token is refused before the store is
// read (an alert id that does not exist answers as one that does).
func TestAlertLinkSaysLittle(t *testing.T) {
	t.Parallel()
	c := setup(t)
	a := c.alert(t, c.memberA1, "disk full", "project-a1")
	link := linkOf(t, a, c.clock.Now())
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		req := httptest.NewRequest(method, link, strings.NewReader(""))
		rec := httptest.NewRecorder()
		c.handler.ServeHTTP(rec, req)
		if rec.Code != 200 {
			t.Fatalf("%s %d %s", method, rec.Code, rec.Body)
		}
		h := rec.Header()
		if h.Get("X-Frame-Options") != "DENY" || h.Get("Content-Security-Policy") != "frame-ancestors 'none'" || h.Get("Cache-Control") != "no-store" {
			t.Fatalf("%s headers %v", method, h)
		}
		if method == http.MethodPost {
			var got map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if len(got) != 3 || got["alert_number"] != float64(a.AlertNumber) || got["title"] != "disk full" || got["state"] != "ACKNOWLEDGED" {
				t.Fatalf("the link's answer tells %v", got)
			}
		} else if strings.Contains(rec.Body.String(), "project-a1") || strings.Contains(rec.Body.String(), "workspace-1") {
			t.Fatalf("the page tells the project: %s", rec.Body)
		}
	}
	tok := strings.Split(link, "/")[7]
	forged := strings.Replace(strings.Replace(link, a.AlertID, "alert-0123456789ab", 1), tok, tok[:len(tok)-2]+"AA", 1)
	if status, body := c.visit(t, http.MethodPost, forged, "", ""); status != 403 {
		t.Fatalf("a forged token on a made-up alert: %d %s", status, body)
	}
}
