package plugin

import (
	"context"

	"github.com/nubes-io/nubes/pkg/errs"
)

// The methods of every plugin kind (plugin-protocols.md sections 3 to 6).
const (
	// inventory collector: spaceone.api.inventory.plugin
	CollectorInit     Method = "spaceone.api.inventory.plugin.Collector/init"
	CollectorVerify   Method = "spaceone.api.inventory.plugin.Collector/verify"
	CollectorCollect  Method = "spaceone.api.inventory.plugin.Collector/collect" // stream
	CollectorGetTasks Method = "spaceone.api.inventory.plugin.Job/get_tasks"

	// monitoring webhook and data source: spaceone.api.monitoring.plugin
	WebhookInit                Method = "spaceone.api.monitoring.plugin.Webhook/init"
	WebhookVerify              Method = "spaceone.api.monitoring.plugin.Webhook/verify"
	EventParse                 Method = "spaceone.api.monitoring.plugin.Event/parse"
	MonitoringDataSourceInit   Method = "spaceone.api.monitoring.plugin.DataSource/init"
	MonitoringDataSourceVerify Method = "spaceone.api.monitoring.plugin.DataSource/verify"
	MetricList                 Method = "spaceone.api.monitoring.plugin.Metric/list"
	MetricGetData              Method = "spaceone.api.monitoring.plugin.Metric/get_data"
	LogList                    Method = "spaceone.api.monitoring.plugin.Log/list" // stream

	// cost-analysis data source: spaceone.api.cost_analysis.plugin
	CostDataSourceInit    Method = "spaceone.api.cost_analysis.plugin.DataSource/init"
	CostDataSourceVerify  Method = "spaceone.api.cost_analysis.plugin.DataSource/verify"
	CostGetTasks          Method = "spaceone.api.cost_analysis.plugin.Job/get_tasks"
	CostGetLinkedAccounts Method = "spaceone.api.cost_analysis.plugin.Cost/get_linked_accounts"
	CostGetData           Method = "spaceone.api.cost_analysis.plugin.Cost/get_data" // stream

	// identity account collector: spaceone.api.identity.plugin
	AccountCollectorInit Method = "spaceone.api.identity.plugin.AccountCollector/init"
	AccountCollectorSync Method = "spaceone.api.identity.plugin.AccountCollector/sync"

	// notification protocol: spaceone.api.notification.plugin
	ProtocolInit         Method = "spaceone.api.notification.plugin.Protocol/init"
	ProtocolVerify       Method = "spaceone.api.notification.plugin.Protocol/verify"
	NotificationDispatch Method = "spaceone.api.notification.plugin.Notification/dispatch"
)

// Methods are every method above, for fakes and checks.
var Methods = []Method{
	CollectorInit, CollectorVerify, CollectorCollect, CollectorGetTasks,
	WebhookInit, WebhookVerify, EventParse,
	MonitoringDataSourceInit, MonitoringDataSourceVerify, MetricList, MetricGetData, LogList,
	CostDataSourceInit, CostDataSourceVerify, CostGetTasks, CostGetLinkedAccounts, CostGetData,
	ProtocolInit, ProtocolVerify, NotificationDispatch,
	AccountCollectorInit, AccountCollectorSync,
}

// M is a request or reply: a JSON-like map keyed by proto field name.
type M = map[string]any

// or returns m, or an empty map for nil: plugins require these keys.
func or(m M) M {
	if m == nil {
		return M{}
	}
	return m
}

// metadataOf reads PluginInfo.metadata of an init reply ({} when absent).
func metadataOf(reply M) M {
	if md, ok := reply["metadata"].(map[string]any); ok {
		return md
	}
	return M{}
}

// listOf reads a repeated message field of a reply as maps.
func listOf(reply M, key string) []M {
	raw, _ := reply[key].([]any)
	out := make([]M, 0, len(raw))
	for _, v := range raw {
		if m, ok := v.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// Collector is an inventory collector plugin (spaceone.api.inventory.plugin).
type Collector struct{ *Target }

// Init returns the plugin's metadata (collector_rules, concurrency,
// options_schema, ...).
func (c Collector) Init(ctx context.Context, options M) (M, error) {
	r, err := c.Invoke(ctx, CollectorInit, M{"options": or(options)})
	return metadataOf(r), err
}

// Verify checks options and secret data with the plugin.
func (c Collector) Verify(ctx context.Context, options, secretData M) error {
	_, err := c.Invoke(ctx, CollectorVerify, M{"options": or(options), "secret_data": or(secretData)})
	return err
}

// GetTasks asks for sub-tasks (Job.get_tasks) and returns each task's
// task_options. A plugin without the Job service answers an error whose
// Failure is Unsupported: upstream then runs one task without sub-tasks.
func (c Collector) GetTasks(ctx context.Context, options, secretData M) ([]M, error) {
	r, err := c.Invoke(ctx, CollectorGetTasks, M{"options": or(options), "secret_data": or(secretData)})
	if err != nil {
		return nil, err
	}
	tasks := listOf(r, "tasks")
	out := make([]M, 0, len(tasks))
	for _, t := range tasks {
		to, _ := t["task_options"].(map[string]any)
		out = append(out, or(to))
	}
	return out, nil
}

// CollectRequest is what Collector.collect sends. TaskOptions is sent only
// when not nil, as upstream sends it only for a sub-task that has one.
type CollectRequest struct {
	Options, SecretData, Filter, TaskOptions M
}

// Collect streams the plugin's ResourceInfo messages (state by name,
// resource_type, match_rules, resource, ...) to fn.
func (c Collector) Collect(ctx context.Context, req CollectRequest, fn func(resource M) error) error {
	r := M{"options": or(req.Options), "secret_data": or(req.SecretData), "filter": or(req.Filter)}
	if req.TaskOptions != nil {
		r["task_options"] = req.TaskOptions
	}
	return c.Stream(ctx, CollectorCollect, r, fn)
}

// Webhook is a monitoring webhook plugin (spaceone.api.monitoring.plugin).
type Webhook struct{ *Target }

// Init returns the plugin's metadata.
func (w Webhook) Init(ctx context.Context, options M) (M, error) {
	r, err := w.Invoke(ctx, WebhookInit, M{"options": or(options)})
	return metadataOf(r), err
}

// Verify checks options with the plugin (webhooks have no secret).
func (w Webhook) Verify(ctx context.Context, options M) error {
	_, err := w.Invoke(ctx, WebhookVerify, M{"options": or(options)})
	return err
}

// Parse turns a received webhook body into events (EventInfo maps:
// event_key, event_type, title, severity by name, ...).
func (w Webhook) Parse(ctx context.Context, options, data M) ([]M, error) {
	r, err := w.Invoke(ctx, EventParse, M{"options": or(options), "data": or(data)})
	if err != nil {
		return nil, err
	}
	return listOf(r, "results"), nil
}

// MonitoringDataSource is a monitoring metric or log data source plugin.
type MonitoringDataSource struct{ *Target }

// Init returns the plugin's metadata (supported_stat, required_keys, ...).
func (d MonitoringDataSource) Init(ctx context.Context, options M) (M, error) {
	r, err := d.Invoke(ctx, MonitoringDataSourceInit, M{"options": or(options)})
	return metadataOf(r), err
}

// Verify checks options and secret data with the plugin.
func (d MonitoringDataSource) Verify(ctx context.Context, options, secretData M, schema string) error {
	_, err := d.Invoke(ctx, MonitoringDataSourceVerify, M{"options": or(options), "secret_data": or(secretData), "schema": schema})
	return err
}

// ListMetrics is Metric.list; req holds query and schema beside options
// and secret_data. It returns the MetricsInfo reply.
func (d MonitoringDataSource) ListMetrics(ctx context.Context, req M) (M, error) {
	return d.Invoke(ctx, MetricList, req)
}

// GetMetricData is Metric.get_data (metric_query, metric, start, end,
// period, stat, schema). It returns the MetricDataInfo reply.
func (d MonitoringDataSource) GetMetricData(ctx context.Context, req M) (M, error) {
	return d.Invoke(ctx, MetricGetData, req)
}

// ListLogs is Log.list: each streamed LogsDataInfo's results go to fn.
func (d MonitoringDataSource) ListLogs(ctx context.Context, req M, fn func(results []M) error) error {
	return d.Stream(ctx, LogList, req, func(m M) error { return fn(listOf(m, "results")) })
}

// CostDataSource is a cost-analysis data source plugin
// (spaceone.api.cost_analysis.plugin). Every call needs the domain id:
// the plugins' SDK refuses a request without one.
type CostDataSource struct{ *Target }

func needDomain(domainID string) error {
	if domainID == "" {
		return errs.Required("domain_id")
	}
	return nil
}

// Init returns the plugin's metadata (data_source_rules,
// use_account_routing, currency, ...).
func (d CostDataSource) Init(ctx context.Context, options M, domainID string) (M, error) {
	if err := needDomain(domainID); err != nil {
		return nil, err
	}
	r, err := d.Invoke(ctx, CostDataSourceInit, M{"options": or(options), "domain_id": domainID})
	return metadataOf(r), err
}

// Verify checks options and secret data with the plugin.
func (d CostDataSource) Verify(ctx context.Context, options, secretData M, schema, domainID string) error {
	if err := needDomain(domainID); err != nil {
		return err
	}
	_, err := d.Invoke(ctx, CostDataSourceVerify, M{"options": or(options), "secret_data": or(secretData), "schema": schema, "domain_id": domainID})
	return err
}

// CostTasksRequest is what Job.get_tasks sends. Start and
// LastSynchronizedAt are ISO 8601 strings, "" when unknown.
type CostTasksRequest struct {
	Options, SecretData M
	Schema              string
	Start               string
	LastSynchronizedAt  string
	DomainID            string
	LinkedAccounts      []M
}

// GetTasks returns the TasksInfo reply: tasks (task_options,
// task_changed), changed, synced_accounts.
func (d CostDataSource) GetTasks(ctx context.Context, req CostTasksRequest) (M, error) {
	if err := needDomain(req.DomainID); err != nil {
		return nil, err
	}
	r := M{"options": or(req.Options), "secret_data": or(req.SecretData), "schema": req.Schema, "start": req.Start,
		"last_synchronized_at": req.LastSynchronizedAt, "domain_id": req.DomainID}
	if req.LinkedAccounts != nil {
		r["linked_accounts"] = req.LinkedAccounts
	}
	return d.Invoke(ctx, CostGetTasks, r)
}

// GetLinkedAccounts returns the accounts (account_id, name) the plugin's
// secret reaches.
func (d CostDataSource) GetLinkedAccounts(ctx context.Context, options, secretData M, schema, domainID string) ([]M, error) {
	if err := needDomain(domainID); err != nil {
		return nil, err
	}
	r, err := d.Invoke(ctx, CostGetLinkedAccounts, M{"options": or(options), "secret_data": or(secretData), "schema": schema, "domain_id": domainID})
	if err != nil {
		return nil, err
	}
	return listOf(r, "results"), nil
}

// CostDataRequest is what Cost.get_data sends.
type CostDataRequest struct {
	Options, SecretData, TaskOptions M
	Schema                           string
	DomainID                         string
}

// GetData streams the plugin's cost chunks: fn gets each CostsInfo's
// results (cost, usage_quantity, billed_date, ...).
func (d CostDataSource) GetData(ctx context.Context, req CostDataRequest, fn func(costs []M) error) error {
	if err := needDomain(req.DomainID); err != nil {
		return err
	}
	r := M{"options": or(req.Options), "secret_data": or(req.SecretData), "task_options": or(req.TaskOptions),
		"schema": req.Schema, "domain_id": req.DomainID}
	return d.Stream(ctx, CostGetData, r, func(m M) error { return fn(listOf(m, "results")) })
}

// Protocol is a notification protocol plugin
// (spaceone.api.notification.plugin).
type Protocol struct{ *Target }

// Init returns the plugin's metadata (data_type, data.schema).
func (p Protocol) Init(ctx context.Context, options M) (M, error) {
	r, err := p.Invoke(ctx, ProtocolInit, M{"options": or(options)})
	return metadataOf(r), err
}

// Verify checks options and secret data with the plugin.
func (p Protocol) Verify(ctx context.Context, options, secretData M) error {
	_, err := p.Invoke(ctx, ProtocolVerify, M{"options": or(options), "secret_data": or(secretData)})
	return err
}

// NotificationTypes are the values Dispatch accepts (never
// NOTIFICATION_TYPE_NONE: the plugins' SDK refuses it).
var NotificationTypes = []string{"INFO", "ERROR", "SUCCESS", "WARNING"}

// DispatchRequest is what Notification.dispatch sends.
type DispatchRequest struct {
	Options, Message, SecretData, ChannelData M
	NotificationType                          string // INFO, ERROR, SUCCESS or WARNING
}

// Dispatch sends one message through the plugin.
func (p Protocol) Dispatch(ctx context.Context, req DispatchRequest) error {
	ok := false
	for _, t := range NotificationTypes {
		ok = ok || t == req.NotificationType
	}
	if !ok {
		return errs.Invalid("notification_type", "one of INFO, ERROR, SUCCESS, WARNING")
	}
	_, err := p.Invoke(ctx, NotificationDispatch, M{"options": or(req.Options), "message": or(req.Message),
		"notification_type": req.NotificationType, "secret_data": or(req.SecretData), "channel_data": or(req.ChannelData)})
	return err
}

// AccountCollector is an identity account collector plugin
// (spaceone.api.identity.plugin): it lists the accounts a trusted
// account's credentials reach (plugin-protocols.md section 7).
type AccountCollector struct{ *Target }

// Init returns the plugin's metadata.
func (a AccountCollector) Init(ctx context.Context, options M, domainID string) (M, error) {
	r, err := a.Invoke(ctx, AccountCollectorInit, M{"options": or(options), "domain_id": domainID})
	return metadataOf(r), err
}

// SyncRequest is what AccountCollector.sync sends.
type SyncRequest struct {
	Options, SecretData M
	SchemaID, DomainID  string
}

// Sync returns the accounts the plugin found (AccountInfo maps: name,
// data, resource_id, secret_schema_id, secret_data, tags, location).
func (a AccountCollector) Sync(ctx context.Context, req SyncRequest) ([]M, error) {
	r, err := a.Invoke(ctx, AccountCollectorSync, M{"options": or(req.Options), "schema_id": req.SchemaID,
		"secret_data": or(req.SecretData), "domain_id": req.DomainID})
	if err != nil {
		return nil, err
	}
	return listOf(r, "results"), nil
}
