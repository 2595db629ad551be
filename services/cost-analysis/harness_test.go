package costanalysis_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/plugin"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/server"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/pkg/testkit/fakeplugin"
	costanalysis "github.com/nubes-io/nubes/services/cost-analysis"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/job"
	"github.com/nubes-io/nubes/services/cost-analysis/internal/worker"
)

func TestMain(m *testing.M) { testkit.Main(m) }

type M = map[string]any

// Collections the tests read.
const (
	dataSources = "cost_data_sources"
	rules       = "cost_data_source_rules"
	jobs        = "cost_jobs"
	tasks       = "cost_job_tasks"
	costs       = "cost_costs"
	rates       = "cost_exchange_rates"
)

const (
	initMethod     = string(plugin.CostDataSourceInit)
	verifyMethod   = string(plugin.CostDataSourceVerify)
	getTasksMethod = string(plugin.CostGetTasks)
	getDataMethod  = string(plugin.CostGetData)
)

func writeError(w http.ResponseWriter, status int, code string) {
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(M{"detail": M{"code": code, "message": "fake: " + code}})
}

// offlineCE is a data source plugin whose registry the repository cannot
// reach: get-versions answers 503.
const offlineCE = "plugin-offline-cost-datasource"

// Plugins the fake repository knows: id -> resource_type.
var knownPlugins = map[string]string{
	"plugin-aws-cost-explorer-cost-datasource": "cost_analysis.DataSource",
	"plugin-unreachable":                       "cost_analysis.DataSource",
	"plugin-offline-cost-datasource":           "cost_analysis.DataSource", // its registry is out of reach
	"plugin-email-noti-protocol":               "notification.Protocol",
}

// fakeServices answers repository's plugin/get and plugin/get-versions
// and identity's project/list for a verified bearer, and identity's
// trusted accounts (fakeTrusted).
type fakeServices struct {
	mu       sync.Mutex
	projects map[string][]M // domain -> projects
	trusted  fakeTrusted
}

func (f *fakeServices) serve(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := testkit.Get().Verifier.Authenticate(r.Context(), strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		if err != nil {
			writeError(w, http.StatusUnauthorized, errs.AuthenticateFailure)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var req struct {
			PluginID string `json:"plugin_id"`
		}
		_ = json.Unmarshal(body, &req)
		if f.trusted.serve(w, r.URL.Path, p, body) {
			return
		}
		switch r.URL.Path {
		case "/identity/v2/project/list":
			// As identity: a SYSTEM caller names the domain, anyone else
			// gets their own.
			var q struct {
				DomainID string `json:"domain_id"`
			}
			_ = json.Unmarshal(body, &q)
			domain := p.DomainID
			if q.DomainID != "" && q.DomainID != domain {
				if !p.IsSystem() {
					writeError(w, http.StatusNotFound, errs.NotFoundCode)
					return
				}
				domain = q.DomainID
			}
			f.mu.Lock()
			ps := []M{}
			for _, pr := range f.projects[domain] { // as identity answers them: with their domain
				ps = append(ps, M{"project_id": pr["project_id"], "name": pr["name"], "workspace_id": pr["workspace_id"], "domain_id": domain})
			}
			f.mu.Unlock()
			_ = json.NewEncoder(w).Encode(M{"results": ps, "total_count": len(ps)})
			return
		}
		rt, ok := knownPlugins[req.PluginID]
		if !ok {
			writeError(w, http.StatusBadRequest, "ERROR_NO_PLUGIN")
			return
		}
		switch r.URL.Path {
		case "/repository/v1/plugin/get":
			_ = json.NewEncoder(w).Encode(M{"plugin_id": req.PluginID, "name": req.PluginID, "resource_type": rt, "provider": "aws",
				"capability": M{}, "state": "ENABLED"})
		case "/repository/v1/plugin/get-versions":
			if req.PluginID == offlineCE {
				writeError(w, http.StatusServiceUnavailable, errs.RegistryUnavailable) // as the repository answers offline
				return
			}
			_ = json.NewEncoder(w).Encode(M{"results": []string{"2.0.1", "2.0.0"}, "total_count": 2})
		default:
			writeError(w, http.StatusNotFound, errs.UnsupportedAPI)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

type env struct {
	anon, system, adminA, adminB, ownerA1, ownerA2, memberA1 *testkit.Client
	db                                                       *mongo.Database
	plugin                                                   *fakeplugin.Server
	services                                                 *fakeServices
	bus                                                      *events.Bus
	nats                                                     *testkit.NATS
	handler                                                  http.Handler
	stopWorkers                                              func()
	deps                                                     app.Deps
	cfg                                                      costanalysis.Config
	logs                                                     *testkit.LogBuffer
}

// start builds an instance of the service on the env's store and bus and
// runs its workers until stopWorkers (or the end of the test).
func (e *env) start(t *testing.T) *app.Service {
	t.Helper()
	svc, err := costanalysis.Build(context.Background(), e.deps, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, len(svc.Workers))
	for _, w := range svc.Workers {
		go func() { _ = w(ctx); done <- struct{}{} }()
	}
	var once sync.Once
	e.stopWorkers = func() {
		once.Do(func() {
			cancel()
			for range svc.Workers {
				<-done
			}
		})
	}
	t.Cleanup(e.stopWorkers)
	return svc
}

type options struct {
	bus        bool // a NATS of the test's own, the outbox and the workers
	logs       bool // the service's log lines kept in env.logs
	noWorkers  bool // the bus without workers (tasks wait in the queue)
	jobTimeout time.Duration
	// callTimeout bounds a unary plugin call (3 s when 0): a test that
	// holds one until an event of its own sets a bound like waitBound.
	callTimeout time.Duration
	workers     func(*worker.Config)
	jobs        func(*job.Config)
}

func setup(t *testing.T) *env { t.Helper(); return setupWith(t, options{}) }

// initMetadata is what the fake plugin's DataSource.init answers: two
// MANAGED rules.
var initMetadata = M{"currency": "USD", "data_source_rules": []any{
	M{"name": "match service account", "conditions_policy": "ALWAYS", "conditions": []any{},
		"actions": M{"match_service_account": M{"source": "additional_info.Account ID", "target": "data.account_id"}},
		"options": M{"stop_processing": false}},
	M{"name": "managed label", "conditions_policy": "ALL", "conditions": []any{M{"key": "provider", "value": "aws", "operator": "eq"}},
		"actions": M{"add_additional_info": M{"managed": "yes"}}, "options": M{"stop_processing": false}},
}}

func setupWith(t *testing.T, o options) *env {
	t.Helper()
	tk := testkit.Get()
	db := tk.Database(t)
	fs := &fakeServices{projects: map[string][]M{}}
	svcSrv := fs.serve(t)
	fp := fakeplugin.Start(t, fakeplugin.Options{})
	fp.Script(initMethod, fakeplugin.Reply{Result: M{"metadata": initMetadata}})
	callTimeout := 3 * time.Second
	if o.callTimeout > 0 {
		callTimeout = o.callTimeout
	}
	plugins := fakeplugin.Client(t, map[string]string{"plugin-aws-cost-explorer-cost-datasource": fp.Endpoint, offlineCE: fp.Endpoint,
		"plugin-unreachable": fakeplugin.Unreachable},
		// The wait for a ready connection is a bound like waitBound's: at
		// 300 ms a register at load 20 met "cannot be reached"
		// (TestSettleRacingCancel). plugin-unreachable refuses at once.
		plugin.Options{ReadyTimeout: 10 * time.Second, CallTimeout: callTimeout, Retries: -1})
	keys, err := seal.Parse(seal.RandomSpec("k1"), "k1")
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	logs := &testkit.LogBuffer{}
	if o.logs {
		log = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if os.Getenv("COST_TEST_LOG") != "" { // the service's log on stderr, for debugging a test
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	// The service credential: a SYSTEM token of the root domain, as deployed.
	svcToken := tk.Token(t, auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-root", UserID: "cost-analysis", Role: auth.SystemAdmin})
	deps := app.Deps{DB: db, Log: log, Plugins: plugins,
		Services: call.NewServices(map[string]string{"repository": svcSrv.URL, "identity": svcSrv.URL}, svcToken, nil)}
	e := &env{db: db, plugin: fp, services: fs, logs: logs}
	if o.bus {
		e.nats = testkit.StartNATS(t)
		bus, err := events.Connect(context.Background(), e.nats.URL(), "cost-analysis-test", slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(bus.Close)
		deps.Events, e.bus = bus, bus
	}
	cfg := costanalysis.DefaultConfig(keys)
	// A job's timeout bounds a wait for its end like waitBound: at load 28
	// a 3-row scheduled job ran past 30 s (TestScheduledSync met TIMEOUT).
	// Tests of the timeout set their own (options.jobTimeout).
	cfg.Jobs = job.Config{Timeout: waitBound, SweepEvery: 200 * time.Millisecond}
	// Schedules are looked at once an hour: a test whose data source's
	// schedule holds the current hour gets no job it did not ask for
	// (TestScheduledSync drives its own clock).
	cfg.SyncSchedule.Tick = time.Hour
	if o.jobTimeout > 0 {
		cfg.Jobs.Timeout = o.jobTimeout
	}
	cfg.Workers = worker.Config{Concurrency: 2, AckWait: 3 * time.Second, MaxDeliver: 3, Backoff: 100 * time.Millisecond, Poll: 50 * time.Millisecond}
	if o.workers != nil {
		o.workers(&cfg.Workers)
	}
	if o.jobs != nil {
		o.jobs(&cfg.Jobs)
	}
	cfg.NoWorkers = o.noWorkers
	e.deps, e.cfg = deps, cfg
	svc := e.start(t)
	srv, err := server.New(server.Options{Name: costanalysis.Name, Auth: tk.Verifier, Logger: log}, svc.Routes...)
	if err != nil {
		t.Fatal(err)
	}
	e.handler = srv.Handler()
	c := testkit.NewClient(t, srv.Handler())
	e.anon = c
	e.system = c.For(auth.Principal{TokenType: auth.SystemToken, DomainID: "domain-root", UserID: "root", Role: auth.SystemAdmin})
	e.adminA = c.For(auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin})
	e.adminB = c.For(auth.Principal{DomainID: "domain-b", UserID: "bob", Role: auth.DomainAdmin})
	e.ownerA1 = c.For(auth.Principal{DomainID: "domain-a", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"})
	e.ownerA2 = c.For(auth.Principal{DomainID: "domain-a", UserID: "otto", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-2"})
	e.memberA1 = c.For(auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1"})
	return e
}

// count is the number of documents in a collection matching filter (all
// when nil): the proof that a refused request stored nothing.
func (e *env) count(t *testing.T, coll string, filter ...bson.E) int64 {
	t.Helper()
	return testkit.Count(t, e.db.Collection(coll), filter...)
}

// raw reads a stored document by _id.
func (e *env) raw(t *testing.T, coll, id string) bson.M {
	t.Helper()
	return testkit.Raw(t, e.db.Collection(coll), id)
}

// DataSource is the DataSourceInfo as a client reads it.
type DataSource struct {
	DataSourceID   string `json:"data_source_id"`
	Name           string `json:"name"`
	State          string `json:"state"`
	DataSourceType string `json:"data_source_type"`
	Provider       string `json:"provider"`
	SecretType     string `json:"secret_type"`
	PluginInfo     struct {
		PluginID    string `json:"plugin_id"`
		Version     string `json:"version"`
		Options     M      `json:"options"`
		Metadata    M      `json:"metadata"`
		SecretID    string `json:"secret_id"`
		UpgradeMode string `json:"upgrade_mode"`
	} `json:"plugin_info"`
	Schedule struct {
		State string `json:"state"`
		Hours []int  `json:"hours"`
	} `json:"schedule"`
	Tags                   M        `json:"tags"`
	CostTagKeys            []string `json:"cost_tag_keys"`
	CostAdditionalInfoKeys []string `json:"cost_additional_info_keys"`
	CostDataKeys           []string `json:"cost_data_keys"`
	ResourceGroup          string   `json:"resource_group"`
	WorkspaceID            string   `json:"workspace_id"`
	DomainID               string   `json:"domain_id"`
	CreatedAt              string   `json:"created_at"`
	LastSynchronizedAt     *string  `json:"last_synchronized_at"`
}

// Rule is the DataSourceRuleInfo as a client reads it.
type Rule struct {
	DataSourceRuleID string `json:"data_source_rule_id"`
	Name             string `json:"name"`
	RuleType         string `json:"rule_type"`
	Order            int    `json:"order"`
	Conditions       []M    `json:"conditions"`
	ConditionsPolicy string `json:"conditions_policy"`
	Actions          M      `json:"actions"`
	Options          M      `json:"options"`
	Tags             M      `json:"tags"`
	IsDefault        bool   `json:"is_default"`
	ResourceGroup    string `json:"resource_group"`
	WorkspaceID      string `json:"workspace_id"`
	DomainID         string `json:"domain_id"`
	DataSourceID     string `json:"data_source_id"`
	CreatedAt        string `json:"created_at"`
}

// Job is the JobInfo as a client reads it.
type Job struct {
	JobID          string  `json:"job_id"`
	Status         string  `json:"status"`
	Options        M       `json:"options"`
	ErrorCode      string  `json:"error_code"`
	ErrorMessage   string  `json:"error_message"`
	TotalTasks     int     `json:"total_tasks"`
	RemainedTasks  int     `json:"remained_tasks"`
	Changed        []M     `json:"changed"`
	SyncedAccounts []M     `json:"synced_accounts"`
	ResourceGroup  string  `json:"resource_group"`
	DomainID       string  `json:"domain_id"`
	WorkspaceID    string  `json:"workspace_id"`
	DataSourceID   string  `json:"data_source_id"`
	CreatedAt      string  `json:"created_at"`
	UpdatedAt      string  `json:"updated_at"`
	FinishedAt     *string `json:"finished_at"`
}

// Cost is a cost row as a client reads it.
type Cost struct {
	CostID           string  `json:"cost_id"`
	Cost             float64 `json:"cost"`
	UsageQuantity    float64 `json:"usage_quantity"`
	Provider         string  `json:"provider"`
	RegionCode       string  `json:"region_code"`
	Product          string  `json:"product"`
	Tags             M       `json:"tags"`
	AdditionalInfo   M       `json:"additional_info"`
	Data             M       `json:"data"`
	Currency         string  `json:"currency"`
	BilledDate       string  `json:"billed_date"`
	BilledMonth      string  `json:"billed_month"`
	BilledYear       string  `json:"billed_year"`
	ProjectID        string  `json:"project_id"`
	ServiceAccountID string  `json:"service_account_id"`
	DataSourceID     string  `json:"data_source_id"`
	JobID            string  `json:"job_id"`
	JobTaskID        string  `json:"job_task_id"`
	WorkspaceID      string  `json:"workspace_id"`
	DomainID         string  `json:"domain_id"`
}

const (
	dsBase   = "/cost-analysis/v1/data-source/"
	ruleBase = "/cost-analysis/v1/data-source-rule/"
	jobBase  = "/cost-analysis/v1/job/"
	costBase = "/cost-analysis/v1/cost/"
	rateBase = "/cost-analysis/v1/exchange-rate/"
	awsCE    = "plugin-aws-cost-explorer-cost-datasource"
)

// domainSource is a DOMAIN data source's register body.
func domainSource(name string) M {
	return M{"name": name, "resource_group": "DOMAIN", "plugin_info": M{"plugin_id": awsCE, "options": M{"region": "us-east-1"},
		"secret_data": M{"aws_secret_access_key": "hunter2-secret"}}, "tags": M{"team": "finops"}}
}

// workspaceSource is a WORKSPACE data source's register body.
func workspaceSource(name, ws string) M {
	b := domainSource(name)
	b["resource_group"] = "WORKSPACE"
	if ws != "" {
		b["workspace_id"] = ws
	}
	return b
}

func (e *env) register(t *testing.T, c *testkit.Client, body M) DataSource {
	t.Helper()
	var d DataSource
	c.Call(dsBase+"register", body).OK(&d)
	return d
}

func (e *env) createRule(t *testing.T, c *testkit.Client, body M) Rule {
	t.Helper()
	var r Rule
	c.Call(ruleBase+"create", body).OK(&r)
	return r
}

// customRule is a rule body adding additional_info on a provider match.
func customRule(dsID, name string) M {
	return M{"data_source_id": dsID, "name": name, "conditions_policy": "ALL", "resource_group": "DOMAIN",
		"conditions": []M{{"key": "provider", "value": "aws", "operator": "eq"}},
		"actions":    M{"add_additional_info": M{"rule": name}}}
}

// waitJob polls the job until cond holds (or fails the test after
// waitBound).
func (e *env) waitJob(t *testing.T, c *testkit.Client, id string, cond func(Job) bool) Job {
	t.Helper()
	var j Job
	if err := testkit.Within(waitBound, func() bool { c.Call(jobBase+"get", M{"job_id": id}).OK(&j); return cond(j) }); err != nil {
		t.Fatalf("job %s: condition %v, last %+v", id, err, j)
	}
	return j
}

// waitBound bounds a test's wait for a condition: far above what it
// takes on an idle machine (a second or two), so that a loaded one
// (-race, other tests) does not fail a test that would have got there.
const waitBound = 60 * time.Second

// heldTasks is for tests that hold a task's stream open on purpose: no
// redelivery after a short ack wait while the machine is too loaded for
// the worker's heartbeat to run, which would hand the held task to a
// second attempt and the plugin's next scripted reply to it.
func heldTasks(c *worker.Config) { c.AckWait = 5 * time.Minute }

func finished(j Job) bool { return j.Status != "IN_PROGRESS" }
