// Package policy holds the repository service's policy operations
// (spec part 3, 1.x): page access permissions kept in the local
// repository, one set per domain. A policy is named by its client-given
// policy_id ([a-z0-9-], at most 48), unique in its domain and never
// changed; its permissions are kept exactly as given.
//
// Decoding, validation and authorization come from pkg; this package
// holds only the policy rules.
package policy

import (
	"context"
	"encoding/json"
	"regexp"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/stat"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/wire"
	"github.com/nubes-io/nubes/services/repository/internal/repository"
)

// Collection holds the policies, _id = domain_id/policy_id.
const Collection = "repository_policies"

// Policy is a policy, stored and sent in the same shape.
type Policy struct {
	ID             string          `bson:"_id" json:"-"`
	PolicyID       string          `bson:"policy_id" json:"policy_id"`
	Name           string          `bson:"name" json:"name"`
	State          string          `bson:"state" json:"state"`
	Permissions    []string        `bson:"permissions" json:"permissions"`
	Labels         freeform.List   `bson:"labels" json:"labels"`
	Tags           freeform.Flat   `bson:"tags" json:"tags"`
	RepositoryInfo repository.Info `bson:"repository_info" json:"repository_info"`
	ProjectID      string          `bson:"project_id" json:"project_id"`
	DomainID       string          `bson:"domain_id" json:"domain_id"`
	CreatedAt      wire.Time       `bson:"created_at" json:"created_at"`
	UpdatedAt      wire.Time       `bson:"updated_at" json:"updated_at"`

	only []string // get's `only`: the members to send
}

// MarshalJSON sends the policy, or only the members asked for.
func (p Policy) MarshalJSON() ([]byte, error) {
	type plain Policy
	b, err := json.Marshal(plain(p))
	if err != nil {
		return nil, err
	}
	return repository.Trim(b, p.only)
}

var policyResource = query.Resource{
	KeywordFields: []string{"policy_id", "name"},
	DefaultSort:   []query.SortKey{{Key: "policy_id"}},
	MinimalFields: []string{"policy_id", "name", "state", "project_id"},
	Fields:        query.FieldsOf[Policy](),
	Maps:          freeform.FieldsOf[Policy](),
	Tenancy:       repository.Tenancy,
}

var writers, readers = repository.Writers, repository.Readers

var policyIDPattern = regexp.MustCompile(`^[a-z0-9-]+$`)

type (
	createPolicy struct {
		Name        string        `json:"name" v:"required,max=255"`
		Permissions []string      `json:"permissions" v:"required,max=1000"`
		PolicyID    string        `json:"policy_id" v:"required,max=48"`
		DomainID    string        `json:"domain_id" v:"required,max=64"`
		Labels      freeform.List `json:"labels" v:"max=100"`
		Tags        freeform.Flat `json:"tags"`
		ProjectID   string        `json:"project_id" v:"max=64"`
	}
	updatePolicy struct {
		PolicyID    string        `json:"policy_id" v:"required"`
		DomainID    string        `json:"domain_id" v:"required,max=64"`
		Name        string        `json:"name" v:"max=255"`
		Permissions []string      `json:"permissions" v:"max=1000"`
		Labels      freeform.List `json:"labels" v:"max=100"`
		Tags        freeform.Flat `json:"tags"`
	}
	policyRequest struct {
		PolicyID string `json:"policy_id" v:"required"`
		DomainID string `json:"domain_id" v:"required,max=64"`
	}
	getPolicy struct {
		PolicyID     string   `json:"policy_id" v:"required"`
		DomainID     string   `json:"domain_id" v:"required,max=64"`
		RepositoryID string   `json:"repository_id"`
		Only         []string `json:"only"`
	}
	policyQuery struct {
		Query        *query.Query `json:"query"`
		RepositoryID string       `json:"repository_id" v:"required"`
		DomainID     string       `json:"domain_id" v:"required,max=64"`
		PolicyID     string       `json:"policy_id"`
		Name         string       `json:"name"`
		ProjectID    string       `json:"project_id"`
		State        string       `json:"state" v:"enum=ENABLED|DISABLED"`
	}
	policyStat struct {
		Query        *stat.Query `json:"query" v:"required"`
		RepositoryID string      `json:"repository_id" v:"required"`
		DomainID     string      `json:"domain_id" v:"required,max=64"`
	}
)

// Validate checks policy_id, the permissions and the free-form members.
func (r *createPolicy) Validate() error {
	if !policyIDPattern.MatchString(r.PolicyID) {
		return errs.Invalid("policy_id", "may hold only lowercase letters, digits and hyphens")
	}
	return check(r.Permissions, r.Labels, r.Tags)
}

// Validate checks the permissions and the free-form members.
func (r *updatePolicy) Validate() error { return check(r.Permissions, r.Labels, r.Tags) }

// Validate checks `only`.
func (r *getPolicy) Validate() error { return repository.CheckOnly(r.Only, policyResource.Fields) }

func check(permissions []string, labels []any, tags map[string]any) error {
	for _, p := range permissions {
		if p == "" {
			return errs.Invalid("permissions", "a permission is empty")
		}
	}
	return repository.CheckLabelsTags(labels, tags)
}

type policies struct {
	c     *mongo.Collection
	repos *repository.Repos
}

// Routes creates the policy indexes and returns the policy operations.
func Routes(ctx context.Context, db *mongo.Database, repos *repository.Repos) ([]api.Route, error) {
	ps := policies{c: db.Collection(Collection), repos: repos}
	if err := store.EnsureIndexes(ctx, ps.c,
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "policy_id", Value: 1}}, Unique: true},
		store.Index{Keys: bson.D{{Key: "domain_id", Value: 1}, {Key: "name", Value: 1}}},
	); err != nil {
		return nil, err
	}
	return []api.Route{
		api.Op[createPolicy, Policy]{Path: "/repository/v1/policy/create", Access: writers, Summary: "Create a policy in the local repository.", Handle: ps.create},
		api.Op[updatePolicy, Policy]{Path: "/repository/v1/policy/update", Access: writers, Summary: "Change a policy's name, permissions, labels or tags; policy_id never changes.", Handle: ps.update},
		api.Op[policyRequest, api.Empty]{Path: "/repository/v1/policy/delete", Access: writers, Summary: "Delete a policy.", Handle: ps.delete},
		api.Op[getPolicy, Policy]{Path: "/repository/v1/policy/get", Access: readers, Summary: "Get a policy.", Handle: ps.get},
		api.Op[policyQuery, api.List[Policy]]{Path: "/repository/v1/policy/list", Access: readers, Summary: "List the domain's policies of a repository.", Handle: ps.list},
		api.Op[policyStat, map[string]any]{Path: "/repository/v1/policy/stat", Access: readers, Summary: "Statistics over the domain's policies of a repository.", Handle: ps.stat},
	}, nil
}

func (ps policies) create(ctx context.Context, p *auth.Principal, r *createPolicy) (*Policy, error) {
	if err := repository.Admits(p, policyResource, r.DomainID); err != nil {
		return nil, err
	}
	project := r.ProjectID
	if project == "" {
		project = "*" // domain-wide, as upstream stores it
	}
	now := wire.T(wire.Now())
	doc := &Policy{ID: repository.Key(r.DomainID, r.PolicyID), PolicyID: r.PolicyID, Name: r.Name, State: "ENABLED",
		Permissions: r.Permissions, Labels: wire.List(r.Labels), Tags: wire.Object(r.Tags),
		RepositoryInfo: ps.repos.Local(), ProjectID: project, DomainID: r.DomainID, CreatedAt: now, UpdatedAt: now}
	if _, err := ps.c.InsertOne(ctx, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return nil, errs.Duplicate("policy_id", r.PolicyID)
		}
		return nil, store.Wrap(err)
	}
	return doc, nil
}

func (ps policies) update(ctx context.Context, p *auth.Principal, r *updatePolicy) (*Policy, error) {
	if _, err := repository.ToChange[Policy](ctx, ps.c, policyResource, p, r.DomainID, "policy_id", r.PolicyID); err != nil {
		return nil, err
	}
	set := bson.D{{Key: "updated_at", Value: wire.T(wire.Now())}}
	if r.Name != "" {
		set = append(set, bson.E{Key: "name", Value: r.Name})
	}
	if r.Permissions != nil {
		set = append(set, bson.E{Key: "permissions", Value: r.Permissions})
	}
	if r.Labels != nil {
		set = append(set, bson.E{Key: "labels", Value: r.Labels})
	}
	if r.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: r.Tags})
	}
	out, err := store.SetByID[Policy](ctx, ps.c, "policy_id", repository.Key(r.DomainID, r.PolicyID), set)
	if err != nil {
		return nil, repository.NotFound(err, "policy_id", r.PolicyID)
	}
	return out, nil
}

func (ps policies) delete(ctx context.Context, p *auth.Principal, r *policyRequest) (*api.Empty, error) {
	if _, err := repository.ToChange[Policy](ctx, ps.c, policyResource, p, r.DomainID, "policy_id", r.PolicyID); err != nil {
		return nil, err
	}
	res, err := ps.c.DeleteOne(ctx, bson.D{{Key: "_id", Value: repository.Key(r.DomainID, r.PolicyID)}})
	if err != nil {
		return nil, store.Wrap(err)
	}
	if res.DeletedCount == 0 {
		return nil, errs.NotFound("policy_id", r.PolicyID)
	}
	return &api.Empty{}, nil
}

func (ps policies) get(ctx context.Context, p *auth.Principal, r *getPolicy) (*Policy, error) {
	actor, err := ps.repos.LocalActing(ctx, p, r.DomainID, r.RepositoryID)
	if err != nil {
		return nil, err
	}
	out, err := repository.Get[Policy](ctx, ps.c, policyResource, actor, r.DomainID, "policy_id", r.PolicyID)
	if err != nil {
		return nil, err
	}
	out.only = r.Only
	return out, nil
}

func (ps policies) list(ctx context.Context, p *auth.Principal, r *policyQuery) (*api.List[Policy], error) {
	actor, err := ps.repos.LocalActing(ctx, p, r.DomainID, r.RepositoryID)
	if err != nil {
		return nil, err
	}
	q := query.With(r.Query, query.Params("policy_id", r.PolicyID, "name", r.Name, "project_id", r.ProjectID, "state", r.State)...)
	return store.SearchFor[Policy](ctx, ps.c, q, policyResource, actor)
}

func (ps policies) stat(ctx context.Context, p *auth.Principal, r *policyStat) (*map[string]any, error) {
	actor, err := ps.repos.LocalActing(ctx, p, r.DomainID, r.RepositoryID)
	if err != nil {
		return nil, err
	}
	res, err := stat.RunFor(ctx, ps.c, actor, policyResource, r.Query)
	return &res, err
}
