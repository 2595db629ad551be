// Package repository holds the repositories the repository service answers
// for: the one local repository, created once at first start whatever the
// number of replicas, and the remote repositories of the configuration
// (other repository services speaking this API), consulted in order. It
// serves repository/list and repository/get, and gives the plugin, policy
// and schema packages the helpers they share (repository_info, the
// caller's domain, free-form objects).
//
// It holds no plugin, policy or schema rule.
package repository

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Collection holds the local repository's record.
const Collection = "repository_repositories"

// localKey is the fixed _id of the local repository's record: replicas
// starting together all insert it, exactly one insert wins.
const localKey = "local"

// Repository types.
const (
	Local  = "local"
	Remote = "remote"
)

// Info is repository_info, as every plugin, policy and schema carries it.
type Info struct {
	RepositoryID   string `bson:"repository_id" json:"repository_id"`
	Name           string `bson:"name" json:"name"`
	RepositoryType string `bson:"repository_type" json:"repository_type"`
}

// record is the stored local repository.
type record struct {
	ID        string    `bson:"_id"`
	Info      Info      `bson:",inline"`
	CreatedAt wire.Time `bson:"created_at"`
}

// RemoteConfig is one remote repository of the configuration.
type RemoteConfig struct {
	// Name names the repository in repository_info.
	Name string `json:"name" mapstructure:"name"`
	// URL is the base URL of the other repository service.
	URL string `json:"url" mapstructure:"url"`
	// Token is the bearer credential presented to it (an API key or a
	// system token of that deployment).
	Token string `json:"token" mapstructure:"token"`
	// RepositoryID, when set, is its local repository's id; otherwise it
	// is asked once (repository/list) and kept.
	RepositoryID string `json:"repository_id" mapstructure:"repository_id"`
}

// RemoteRepo is a remote repository: another repository service, called
// with its own credential, never the caller's.
type RemoteRepo struct {
	Name   string
	URL    string
	client *call.Client

	mu sync.Mutex
	id string
}

// ID is the remote's local repository id, asked once and kept.
func (r *RemoteRepo) ID(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.id != "" {
		return r.id, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var resp struct {
		Results []Info `json:"results"`
	}
	if err := r.Call(ctx, "/repository/v1/repository/list", map[string]any{"repository_type": Local}, &resp); err != nil {
		return "", err
	}
	if len(resp.Results) == 0 || resp.Results[0].RepositoryID == "" {
		return "", errs.Down("The remote repository "+r.Name, fmt.Errorf("%s lists no local repository", r.URL))
	}
	r.id = resp.Results[0].RepositoryID
	return r.id, nil
}

// Info is the remote's repository_info as this service names it.
func (r *RemoteRepo) Info(ctx context.Context) (Info, error) {
	id, err := r.ID(ctx)
	if err != nil {
		return Info{}, err
	}
	return Info{RepositoryID: id, Name: r.Name, RepositoryType: Remote}, nil
}

// Call POSTs req to the remote with the remote's credential. A remote that
// cannot be reached, or answers 5xx, is a 503 naming it.
func (r *RemoteRepo) Call(ctx context.Context, path string, req, resp any) error {
	err := r.client.CallAsService(ctx, path, req, resp)
	if e, ok := errs.As(err); ok && e.Status() == http.StatusServiceUnavailable {
		return errs.Down("The remote repository "+r.Name, e)
	}
	return err
}

// Repos are the repositories in the order they are consulted: the local
// one, then the remotes in configuration order.
type Repos struct {
	local   Info
	remotes []*RemoteRepo
	log     *slog.Logger
}

// Open makes sure the local repository exists (one record, whatever the
// number of replicas starting together) and prepares the remotes.
func Open(ctx context.Context, db *mongo.Database, remotes []RemoteConfig, hc *http.Client, log *slog.Logger) (*Repos, error) {
	c := db.Collection(Collection)
	rec := record{ID: localKey, Info: Info{RepositoryID: wire.NewID("repo"), Name: Local, RepositoryType: Local}, CreatedAt: wire.T(wire.Now())}
	var stored record
	var err error
	for attempt := range 5 {
		// The fixed _id makes every insert after the first a duplicate;
		// whoever loses reads the winner's record.
		if _, err = c.InsertOne(ctx, rec); err != nil && !mongo.IsDuplicateKeyError(err) {
			err = store.Wrap(err)
		} else if err = c.FindOne(ctx, bson.D{{Key: "_id", Value: localKey}}).Decode(&stored); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 100 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("local repository: %w", err)
	}
	r := &Repos{local: stored.Info, log: log}
	seen := map[string]bool{}
	for i, rc := range remotes {
		rc.Name, rc.URL = strings.TrimSpace(rc.Name), strings.TrimSpace(rc.URL)
		if rc.Name == "" || rc.URL == "" {
			return nil, fmt.Errorf("remote_repositories[%d]: name and url are required", i)
		}
		if !strings.HasPrefix(rc.URL, "http://") && !strings.HasPrefix(rc.URL, "https://") {
			return nil, fmt.Errorf("remote_repositories[%d]: url %q is not http(s)", i, rc.URL)
		}
		if seen[rc.Name] || rc.Name == Local {
			return nil, fmt.Errorf("remote_repositories[%d]: name %q is used twice", i, rc.Name)
		}
		seen[rc.Name] = true
		r.remotes = append(r.remotes, &RemoteRepo{Name: rc.Name, URL: rc.URL, id: rc.RepositoryID,
			client: call.NewClient("repository", rc.URL, rc.Token, hc)})
	}
	return r, nil
}

// Local is the local repository's info.
func (r *Repos) Local() Info { return r.local }

// Remotes are the remote repositories in order.
func (r *Repos) Remotes() []*RemoteRepo { return r.remotes }

// Log is the service's logger.
func (r *Repos) Log() *slog.Logger { return r.log }

// Resolve finds the repository of an id: the local one (remote nil) or a
// remote. An unknown id is 404; when a remote could not be asked its id,
// an unmatched id is 503 rather than a possibly wrong 404.
func (r *Repos) Resolve(ctx context.Context, id string) (*RemoteRepo, error) {
	if id == r.local.RepositoryID {
		return nil, nil
	}
	var down error
	for _, rm := range r.remotes {
		rid, err := rm.ID(ctx)
		if err != nil {
			down = err
			continue
		}
		if rid == id {
			return rm, nil
		}
	}
	if down != nil {
		return nil, down
	}
	return nil, errs.NotFound("repository_id", id)
}

// LocalOnly checks a repository_id of a policy or schema request: empty or
// the local repository. Policies and schemas live only in the local one.
func (r *Repos) LocalOnly(ctx context.Context, id string) error {
	if id == "" {
		return nil
	}
	rm, err := r.Resolve(ctx, id)
	if err != nil {
		return err
	}
	if rm != nil {
		return errs.Invalid("repository_id", "policies and schemas are kept only in the local repository "+r.local.RepositoryID)
	}
	return nil
}

// Who may call the repository's operations: writers change the local
// repository, readers read it. A person's SYSTEM_ADMIN grant writes
// nothing: the platform's records (domain_id "*") and other domains' are
// a service credential's (which passes every check), and in its own
// domain a domain admin's DOMAIN token does (issue 21).
var (
	Writers = auth.Roles(auth.DomainAdmin)
	Readers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember, auth.User)
)

// Tenancy is where plugins, policies and schemas keep their tenancy: a
// domain's records, and the platform's (domain_id "*", Global), which
// every domain reads and only a service changes (pkg/tenancy SharedAll).
var Tenancy = tenancy.Fields{Domain: "domain_id", SharedAll: true}

// Global is the domain_id of a record of the whole platform.
const Global = tenancy.All

// Acting is the caller as it acts on a request naming domain_id: in its
// own domain, or on the platform's records (domain_id "*": the tenancy
// rule lets every caller read them and only a service change them). A
// service credential may name any domain and acts inside it, as
// upstream's x_domain_id. Anyone else naming another domain, a person's
// SYSTEM_ADMIN grant included (issue 21), is 404, as if the domain did not
// exist, before any record is read.
func Acting(p *auth.Principal, domainID string) (*auth.Principal, error) {
	if domainID == "" || strings.Contains(domainID, "/") {
		return nil, errs.Invalid("domain_id", "not a domain id")
	}
	switch {
	case domainID == p.DomainID || domainID == Global:
		return p, nil
	case p.IsService():
		in := *p
		in.DomainID = domainID
		return &in, nil
	}
	return nil, errs.NotFound("domain_id", domainID)
}

// LocalActing is Acting for a read of policies or schemas, once its
// repository_id is checked to be the local one (LocalOnly).
func (r *Repos) LocalActing(ctx context.Context, p *auth.Principal, domainID, repositoryID string) (*auth.Principal, error) {
	actor, err := Acting(p, domainID)
	if err != nil {
		return nil, err
	}
	return actor, r.LocalOnly(ctx, repositoryID)
}

// Admits checks a create of a record of resource r in domainID: the
// caller acts there (Acting) and may place a record there (403 for the
// platform's records unless a service).
func Admits(p *auth.Principal, r query.Resource, domainID string) error {
	actor, err := Acting(p, domainID)
	if err != nil {
		return err
	}
	rule, err := tenancy.For(actor, r.Tenancy)
	if err != nil {
		return err
	}
	return rule.Admits(tenancy.Record{Domain: domainID})
}

// ToChange loads the record named key=name in domainID (its _id is
// Key(domainID, name)) that the caller may change (store.GetToChange).
func ToChange[T any](ctx context.Context, c *mongo.Collection, r query.Resource, p *auth.Principal, domainID, key, name string) (*T, error) {
	actor, err := Acting(p, domainID)
	if err != nil {
		return nil, err
	}
	return store.GetToChange[T](ctx, c, r, actor, key, Key(domainID, name))
}

// Get reads the record named key=name for actor (Acting): the domain's
// own, else the platform's of that name (store.GetFor), as every domain
// uses the repository's global policies and schemas.
func Get[T any](ctx context.Context, c *mongo.Collection, r query.Resource, actor *auth.Principal, domainID, key, name string) (*T, error) {
	out, err := store.GetFor[T](ctx, c, r, actor, key, Key(domainID, name))
	if domainID != Global && errs.Is(err, errs.NotFoundCode) {
		out, err = store.GetFor[T](ctx, c, r, actor, key, Key(Global, name))
	}
	return out, err
}

// CheckLabelsTags checks the free-form labels and tags of a record: their
// keys keep dots, slashes, colons and a leading $ (escaped in the store,
// pkg/freeform).
func CheckLabelsTags(labels []any, tags map[string]any) error {
	return freeform.CheckAll("labels", labels, "tags", tags)
}

// NotFound names a record by key and value in a 404 of a lookup by the
// internal _id (Key), which the caller never sees.
func NotFound(err error, key, value string) error {
	if errs.Is(err, errs.NotFoundCode) {
		return errs.NotFound(key, value)
	}
	return err
}

// --- repository/list and repository/get ---

var readers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember, auth.User)

type (
	repositoryRequest struct {
		RepositoryID string `json:"repository_id" v:"required"`
	}
	repositoryQuery struct {
		Query          *listQuery `json:"query"`
		RepositoryID   string     `json:"repository_id"`
		Name           string     `json:"name"`
		RepositoryType string     `json:"repository_type" v:"enum=local|remote"`
	}
	// listQuery is what a list of a handful of configured repositories
	// can honour; a filter there would be answered wrongly, so it is not
	// accepted.
	listQuery struct {
		Keyword   string      `json:"keyword"`
		Page      *query.Page `json:"page"`
		CountOnly bool        `json:"count_only"`
	}
)

// Routes are repository/list and repository/get.
func (r *Repos) Routes() []api.Route {
	return []api.Route{
		api.Op[repositoryQuery, api.List[Info]]{Path: "/repository/v1/repository/list", Access: readers,
			Summary: "List the repositories: the local one, then the remote ones in order.", Handle: r.list},
		api.Op[repositoryRequest, Info]{Path: "/repository/v1/repository/get", Access: readers,
			Summary: "Get a repository.", Handle: r.get},
	}
}

// all lists the repositories whose id is known; a remote that cannot be
// asked its id is left out (and logged) rather than failing the list.
func (r *Repos) all(ctx context.Context) []Info {
	out := []Info{r.local}
	for _, rm := range r.remotes {
		info, err := rm.Info(ctx)
		if err != nil {
			r.log.Warn("remote repository left out of the list", "remote", rm.Name, "error", err)
			continue
		}
		out = append(out, info)
	}
	return out
}

func (r *Repos) list(ctx context.Context, _ *auth.Principal, q *repositoryQuery) (*api.List[Info], error) {
	var rows []Info
	for _, info := range r.all(ctx) {
		if (q.RepositoryID != "" && info.RepositoryID != q.RepositoryID) || (q.Name != "" && info.Name != q.Name) ||
			(q.RepositoryType != "" && info.RepositoryType != q.RepositoryType) ||
			(q.Query != nil && q.Query.Keyword != "" && !strings.Contains(strings.ToLower(info.Name+" "+info.RepositoryID), strings.ToLower(q.Query.Keyword))) {
			continue
		}
		rows = append(rows, info)
	}
	total := int64(len(rows))
	if q.Query != nil {
		if q.Query.CountOnly {
			rows = nil
		} else if p := q.Query.Page; p != nil {
			start := max(p.Start, 1) - 1
			rows = rows[min(start, len(rows)):]
			if p.Limit > 0 {
				rows = rows[:min(p.Limit, len(rows))]
			}
		}
	}
	return &api.List[Info]{Results: wire.List(rows), TotalCount: total}, nil
}

func (r *Repos) get(ctx context.Context, _ *auth.Principal, q *repositoryRequest) (*Info, error) {
	rm, err := r.Resolve(ctx, q.RepositoryID)
	if err != nil {
		return nil, err
	}
	if rm == nil {
		info := r.local
		return &info, nil
	}
	info, err := rm.Info(ctx)
	if err != nil {
		return nil, err
	}
	return &info, nil
}

// Trim keeps only the top-level members of a JSON object named by fields
// (their first path segment): a get's `only`.
func Trim(b []byte, fields []string) ([]byte, error) {
	if len(fields) == 0 {
		return b, nil
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return nil, err
	}
	keep := map[string]json.RawMessage{}
	for _, f := range fields {
		top, _, _ := strings.Cut(f, ".")
		if v, ok := all[top]; ok {
			keep[top] = v
		}
	}
	return json.Marshal(keep)
}

// CheckOnly refuses `only` entries that are not fields of the resource.
func CheckOnly(only, fields []string) error {
	for _, f := range only {
		top, _, _ := strings.Cut(f, ".")
		if !slices.Contains(fields, top) {
			return errs.Invalid("only", fmt.Sprintf("%q is not a field of this resource", f))
		}
	}
	return nil
}

// Key is the _id of a record named by key within a domain: a domain's
// policies and schemas are apart by construction.
func Key(domainID, key string) string { return domainID + "/" + key }
