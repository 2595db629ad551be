// Package projectdashboard holds the project dashboard resource: dashboards
// attached to a project of identity, their version snapshots, who may
// see them (PRIVATE ones are their owner's alone) and the writer lock
// that keeps versions gapless under concurrent updates.
//
// Decoding, validation, authorization and errors come from pkg; this
// package holds only the dashboard's own rules. It must not read another
// service's collections: projects are checked through identity's API.
package projectdashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Viewers values.
const (
	Public  = "PUBLIC"
	Private = "PRIVATE"
)

// Dashboard is a project dashboard, stored and sent in the same shape
// (ProjectDashboardInfo). Its layouts, variables, settings and
// variables_schema are those of its current version.
type Dashboard struct {
	ID                 string        `bson:"_id" json:"-"`
	ProjectDashboardID string        `bson:"project_dashboard_id" json:"project_dashboard_id"`
	ProjectID          string        `bson:"project_id" json:"project_id"`
	Name               string        `bson:"name" json:"name"`
	Viewers            string        `bson:"viewers" json:"viewers"`
	Version            int32         `bson:"version" json:"version"`
	Layouts            freeform.List `bson:"layouts" json:"layouts"`
	Variables          freeform.Map  `bson:"variables" json:"variables"`
	Settings           freeform.Map  `bson:"settings" json:"settings"`
	VariablesSchema    freeform.Map  `bson:"variables_schema" json:"variables_schema"`
	Labels             freeform.List `bson:"labels" json:"labels"`
	Tags               freeform.Flat `bson:"tags" json:"tags"`
	// UserID is the owner of a PRIVATE dashboard; "" for PUBLIC ones
	// (upstream stores null), which keeps names unique among the public
	// dashboards of a project.
	UserID   string `bson:"user_id" json:"user_id"`
	DomainID string `bson:"domain_id" json:"domain_id"`
	// WorkspaceID is the project's workspace, copied from identity at
	// create: workspace-scoped callers see only their workspace's
	// dashboards. Not part of the Info.
	WorkspaceID string    `bson:"workspace_id" json:"-"`
	CreatedAt   wire.Time `bson:"created_at" json:"created_at"`
	UpdatedAt   wire.Time `bson:"updated_at" json:"updated_at"`
	// Rev counts the dashboard's writes: every write compares and bumps
	// it (changed). Not part of the Info.
	Rev int64 `bson:"rev,omitempty" json:"-"`

	only []string // get's `only`: the fields to send, nil for all
}

// MarshalJSON writes every field, or only those asked for by get's only.
func (d Dashboard) MarshalJSON() ([]byte, error) {
	type plain Dashboard
	p := plain(d)
	p.Layouts, p.Labels = wire.List(p.Layouts), wire.List(p.Labels)
	p.Variables, p.Settings = wire.Object(p.Variables), wire.Object(p.Settings)
	p.VariablesSchema, p.Tags = wire.Object(p.VariablesSchema), wire.Object(p.Tags)
	return onlyFields(p, d.only)
}

// Version is one snapshot of a dashboard's content
// (ProjectDashboardVersionInfo). Its _id is "<dashboard id>#<version>":
// inserting it is atomic on MongoDB and on FerretDB alike, so one version
// number is taken by one update only.
type Version struct {
	ID                 string        `bson:"_id" json:"-"`
	ProjectDashboardID string        `bson:"project_dashboard_id" json:"project_dashboard_id"`
	Version            int32         `bson:"version" json:"version"`
	Latest             bool          `bson:"-" json:"latest"`
	Layouts            freeform.List `bson:"layouts" json:"layouts"`
	Variables          freeform.Map  `bson:"variables" json:"variables"`
	Settings           freeform.Map  `bson:"settings" json:"settings"`
	VariablesSchema    freeform.Map  `bson:"variables_schema" json:"variables_schema"`
	DomainID           string        `bson:"domain_id" json:"domain_id"`
	CreatedAt          wire.Time     `bson:"created_at" json:"created_at"`

	only []string
}

// MarshalJSON writes every field, or only those asked for by get_version's only.
func (v Version) MarshalJSON() ([]byte, error) {
	type plain Version
	p := plain(v)
	p.Layouts = wire.List(p.Layouts)
	p.Variables, p.Settings, p.VariablesSchema = wire.Object(p.Variables), wire.Object(p.Settings), wire.Object(p.VariablesSchema)
	return onlyFields(p, v.only)
}

// versionID is the _id of a snapshot.
func versionID(dashboardID string, version int32) string {
	return fmt.Sprintf("%s#%d", dashboardID, version)
}

// onlyFields marshals v and keeps the top-level fields named by only (a
// path's first segment), or all of them when only is nil.
func onlyFields(v any, only []string) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || len(only) == 0 {
		return b, err
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	keep := map[string]json.RawMessage{}
	for _, f := range only {
		top, _, _ := strings.Cut(f, ".")
		if raw, ok := all[top]; ok {
			keep[top] = raw
		}
	}
	return json.Marshal(keep)
}

// checkOnly refuses an only naming a field the Info does not have.
func checkOnly(only []string, fields []string) error {
	check := query.Readable(fields)
	for _, f := range only {
		p := f
		if strings.TrimSpace(f) == "" {
			return errs.Invalid("only", "a field name is empty")
		}
		if err := check("only", &p); err != nil {
			return err
		}
	}
	return nil
}

var (
	dashboardFields = query.FieldsOf[Dashboard]()
	versionFields   = query.Without(query.FieldsOf[Version](), "latest") // latest is computed, not stored: no filter on it
	// versionInfoFields are what get_version's only may name.
	versionInfoFields = query.FieldsOf[Version]()
)

var dashboardResource = query.Resource{
	KeywordFields: []string{"project_dashboard_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "name"}},
	MinimalFields: []string{"project_dashboard_id", "project_id", "name", "viewers", "version"},
	Fields:        dashboardFields,
	Tenancy:       tenancy.InProject.WithMarks(), // deleted mark first (store.Teardown)
	Maps:          freeform.FieldsOf[Dashboard](),
}

var versionResource = query.Resource{
	DefaultSort:   []query.SortKey{{Key: "version", Desc: true}}, // newest first
	MinimalFields: []string{"project_dashboard_id", "version", "created_at"},
	Fields:        versionFields,
}

// checkContent refuses content no store keeps (freeform.Check: an empty
// key, NUL, nesting past 32 levels). Keys with dots, slashes, colons and
// a leading $ are kept, escaped in the store: a variables_schema is a
// JSON schema, whose "$schema", "$ref" and "$defs" must pass through.
func checkContent(path string, v any) error { return freeform.Check(path, v) }

// sameContent reports whether two JSON-like values are equal as JSON:
// the stored value comes back from BSON with other Go types (bson.D,
// bson.A, int32) than the request's, so both are compared in canonical
// JSON (object keys sorted).
func sameContent(a, b any) bool {
	ca, errA := canonical(a)
	cb, errB := canonical(b)
	return errA == nil && errB == nil && bytes.Equal(ca, cb)
}

func canonical(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	return json.Marshal(generic) // maps marshal with sorted keys
}

// changedList reports whether a list given in a request (nil: not
// given) differs from the stored one; nil and empty are alike.
func changedList(given, stored []any) bool {
	return given != nil && !sameContent(wire.List(given), wire.List(stored))
}

// changedObject is changedList for objects.
func changedObject(given, stored map[string]any) bool {
	return given != nil && !sameContent(wire.Object(given), wire.Object(stored))
}
