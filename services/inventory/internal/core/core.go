// Package core holds what the inventory service's resources share: the
// collections, who may call, the caller's tenancy (domain and workspace),
// the stored shapes of collectors, jobs, job tasks and collected
// resources, and the clients of identity (workspaces; trusted accounts and
// their secret data through pkg/trusted) and repository (plugins).
//
// It holds no operation of its own and never imports echo or nats.
package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/pluginref"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/trusted"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Collections owned by the inventory service.
const (
	CollectorsCollection        = "inventory_collectors"
	CloudServiceTypesCollection = "inventory_cloud_service_types"
	JobsCollection              = "inventory_jobs"
	JobTasksCollection          = "inventory_job_tasks"
	CloudServicesCollection     = "inventory_cloud_services"
	RegionsCollection           = "inventory_regions"
	// KeysCollection holds the records that make a value unique or
	// findable by _id alone: cloud service type keys per workspace, region
	// codes, and the match-rule keys of collected cloud services (see
	// package collectrun). Only the insert of a new _id is atomic on both
	// stores (docs/decisions.md "Storage"), so uniqueness is decided here.
	KeysCollection = "inventory_keys"
	// RecordsCollection holds the outcome of each sub-task (_id =
	// <job_task_id>-<n>): the first one recorded wins, so a redelivered
	// sub-task never counts twice.
	RecordsCollection = "inventory_task_records"
	// LeasesCollection holds leases (per-job concurrency slots, the
	// finishing of a task, schedule firings).
	LeasesCollection = "inventory_leases"
	OutboxCollection = "inventory_outbox"
	// DeadLettersCollection keeps the messages its consumers gave up on
	// (events.DeadRecords).
	DeadLettersCollection = "inventory_dead_letters"
	// RostersCollection holds, per collector and secret, the cloud
	// services its last successful task kept (garbage collection compares
	// them with what the next task saw, reading nothing else).
	RostersCollection = "inventory_rosters"
)

// Global is the workspace_id of a record that belongs to the whole
// domain, as upstream stores it.
const Global = tenancy.All

// Resource groups.
const (
	GroupDomain    = "DOMAIN"
	GroupWorkspace = "WORKSPACE"
)

// States of collector schedules and secret filters.
const (
	Enabled  = "ENABLED"
	Disabled = "DISABLED"
)

// Job statuses (semantics.md 5, HEAD model; TIMEOUT and ERROR are
// accepted in queries as upstream's query enum has them).
const (
	JobInProgress = "IN_PROGRESS"
	JobSuccess    = "SUCCESS"
	JobFailure    = "FAILURE"
	JobCanceled   = "CANCELED"
)

// JobStatuses is the enum of a job status in a request.
const JobStatuses = "CANCELED|IN_PROGRESS|FAILURE|SUCCESS|TIMEOUT|ERROR"

// Job task statuses.
const (
	TaskPending    = "PENDING"
	TaskInProgress = "IN_PROGRESS"
	TaskSuccess    = "SUCCESS"
	TaskFailure    = "FAILURE"
	TaskCanceled   = "CANCELED"
)

// TaskStatuses is the enum of a task status in a request.
const TaskStatuses = "PENDING|CANCELED|IN_PROGRESS|SUCCESS|FAILURE"

// Resource types a collector plugin reports (plugin-protocols.md 3).
const (
	TypeCloudService     = "inventory.CloudService"
	TypeCloudServiceType = "inventory.CloudServiceType"
	TypeRegion           = "inventory.Region"
	TypeErrorResource    = "inventory.ErrorResource"
	TypeNamespace        = "inventory.Namespace"
	TypeMetric           = "inventory.Metric"
)

var (
	// Readers may read every inventory resource of their reach.
	Readers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember)
	// Writers may change them (DOMAIN-level records need a domain admin).
	Writers = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner)
)

// PluginInfo is a collector's plugin: which one, its options and the
// metadata its init answered.
type PluginInfo = pluginref.Info

// Schedule is when a collector collects: at each of its hours (UTC).
type Schedule struct {
	State string `bson:"state" json:"state" v:"enum=ENABLED|DISABLED"`
	Hours []int  `bson:"hours" json:"hours" v:"max=24" doc:"hours of the day (UTC), 0 to 23"`
}

// Collector is a collector as stored and sent (CollectorInfo).
type Collector struct {
	ID              string         `bson:"_id" json:"-"`
	CollectorID     string         `bson:"collector_id" json:"collector_id"`
	Name            string         `bson:"name" json:"name"`
	Provider        string         `bson:"provider" json:"provider"`
	Capability      freeform.Map   `bson:"capability" json:"capability"`
	SecretFilter    trusted.Filter `bson:"secret_filter" json:"secret_filter"`
	PluginInfo      PluginInfo     `bson:"plugin_info" json:"plugin_info"`
	Schedule        Schedule       `bson:"schedule" json:"schedule"`
	Tags            freeform.Flat  `bson:"tags" json:"tags"`
	ResourceGroup   string         `bson:"resource_group" json:"resource_group"`
	DomainID        string         `bson:"domain_id" json:"domain_id"`
	WorkspaceID     string         `bson:"workspace_id" json:"workspace_id"`
	CreatedAt       wire.Time      `bson:"created_at" json:"created_at"`
	LastCollectedAt wire.Time      `bson:"last_collected_at" json:"last_collected_at"`
}

// Job is an inventory job as stored and sent (JobInfo). SecretID repeats
// RequestSecretID: the console reads secret_id to tell a one-secret job
// from an all-secrets one.
type Job struct {
	ID                 string       `bson:"_id" json:"-"`
	JobID              string       `bson:"job_id" json:"job_id"`
	Status             string       `bson:"status" json:"status"`
	TotalTasks         int32        `bson:"total_tasks" json:"total_tasks"`
	RemainedTasks      int32        `bson:"remained_tasks" json:"remained_tasks"`
	SuccessTasks       int32        `bson:"success_tasks" json:"success_tasks"`
	FailureTasks       int32        `bson:"failure_tasks" json:"failure_tasks"`
	RequestSecretID    string       `bson:"request_secret_id" json:"request_secret_id"`
	RequestWorkspaceID string       `bson:"request_workspace_id" json:"request_workspace_id"`
	SecretID           string       `bson:"secret_id" json:"secret_id"`
	Filter             freeform.Map `bson:"filter" json:"filter"`
	ResourceGroup      string       `bson:"resource_group" json:"resource_group"`
	DomainID           string       `bson:"domain_id" json:"domain_id"`
	WorkspaceID        string       `bson:"workspace_id" json:"workspace_id"`
	CollectorID        string       `bson:"collector_id" json:"collector_id"`
	PluginID           string       `bson:"plugin_id" json:"plugin_id"`
	CreatedAt          wire.Time    `bson:"created_at" json:"created_at"`
	UpdatedAt          wire.Time    `bson:"updated_at" json:"updated_at"`
	FinishedAt         wire.Time    `bson:"finished_at" json:"finished_at"`

	// TaskIDs are the job's tasks, read by _id when the job is counted.
	TaskIDs []string `bson:"task_ids" json:"-"`
	// Concurrency is the plugin's limit of sub-tasks running at once
	// (init metadata concurrency; 0: none).
	Concurrency int `bson:"concurrency" json:"-"`
}

// ErrorInfo is one error of a job task.
type ErrorInfo struct {
	ErrorCode  string       `bson:"error_code" json:"error_code"`
	Message    string       `bson:"message" json:"message"`
	Additional freeform.Map `bson:"additional" json:"additional"`
}

// JobTask is a job task as stored and sent (JobTaskInfo): the collection
// with one secret.
type JobTask struct {
	ID                string      `bson:"_id" json:"-"`
	JobTaskID         string      `bson:"job_task_id" json:"job_task_id"`
	Status            string      `bson:"status" json:"status"`
	Provider          string      `bson:"provider" json:"provider"`
	CreatedCount      int32       `bson:"created_count" json:"created_count"`
	UpdatedCount      int32       `bson:"updated_count" json:"updated_count"`
	FailureCount      int32       `bson:"failure_count" json:"failure_count"`
	DeletedCount      int32       `bson:"deleted_count" json:"deleted_count"`
	DisconnectedCount int32       `bson:"disconnected_count" json:"disconnected_count"`
	Errors            []ErrorInfo `bson:"errors" json:"errors"`
	TotalSubTasks     int32       `bson:"total_sub_tasks" json:"total_sub_tasks"`
	RemainedSubTasks  int32       `bson:"remained_sub_tasks" json:"remained_sub_tasks"`
	DomainID          string      `bson:"domain_id" json:"domain_id"`
	WorkspaceID       string      `bson:"workspace_id" json:"workspace_id"`
	ProjectID         string      `bson:"project_id" json:"project_id"`
	ServiceAccountID  string      `bson:"service_account_id" json:"service_account_id"`
	JobID             string      `bson:"job_id" json:"job_id"`
	SecretID          string      `bson:"secret_id" json:"secret_id"`
	CollectorID       string      `bson:"collector_id" json:"collector_id"`
	CreatedAt         wire.Time   `bson:"created_at" json:"created_at"`
	StartedAt         wire.Time   `bson:"started_at" json:"started_at"`
	FinishedAt        wire.Time   `bson:"finished_at" json:"finished_at"`

	// SubTasks are the task_options of each sub-task Job.get_tasks
	// answered (nil for one without); set once the task is split.
	SubTasks []freeform.Map `bson:"sub_tasks" json:"-"`
	Split    bool           `bson:"split" json:"-"`
	// DoomedIDs are the cloud services its garbage collection deletes
	// (emptied once they are gone).
	DoomedIDs []string `bson:"doomed_ids" json:"-"`
}

// Final reports whether a task status is final.
func Final(status string) bool {
	return slices.Contains([]string{TaskSuccess, TaskFailure, TaskCanceled}, status)
}

// CollectionInfo says which collector and secret last reported a cloud
// service.
type CollectionInfo struct {
	CollectorID      string    `bson:"collector_id" json:"collector_id"`
	ServiceAccountID string    `bson:"service_account_id" json:"service_account_id"`
	SecretID         string    `bson:"secret_id" json:"secret_id"`
	JobID            string    `bson:"job_id" json:"job_id"`
	JobTaskID        string    `bson:"job_task_id" json:"job_task_id"`
	LastCollectedAt  wire.Time `bson:"last_collected_at" json:"last_collected_at"`
}

// Cloud service states.
const (
	StateActive       = "ACTIVE"
	StateDisconnected = "DISCONNECTED"
)

// CloudService is a collected resource as stored and sent.
type CloudService struct {
	ID                  string         `bson:"_id" json:"-"`
	CloudServiceID      string         `bson:"cloud_service_id" json:"cloud_service_id"`
	Name                string         `bson:"name" json:"name"`
	State               string         `bson:"state" json:"state"`
	Account             string         `bson:"account" json:"account"`
	InstanceType        string         `bson:"instance_type" json:"instance_type"`
	InstanceSize        float64        `bson:"instance_size" json:"instance_size"`
	IPAddresses         []string       `bson:"ip_addresses" json:"ip_addresses"`
	CloudServiceType    string         `bson:"cloud_service_type" json:"cloud_service_type"`
	CloudServiceGroup   string         `bson:"cloud_service_group" json:"cloud_service_group"`
	Provider            string         `bson:"provider" json:"provider"`
	Data                freeform.Map   `bson:"data" json:"data"`
	Metadata            freeform.Map   `bson:"metadata" json:"metadata"`
	Reference           freeform.Map   `bson:"reference" json:"reference"`
	Tags                freeform.Flat  `bson:"tags" json:"tags"`
	RegionCode          string         `bson:"region_code" json:"region_code"`
	RefCloudServiceType string         `bson:"ref_cloud_service_type" json:"ref_cloud_service_type"`
	RefRegion           string         `bson:"ref_region" json:"ref_region"`
	LaunchedAt          string         `bson:"launched_at" json:"launched_at"`
	CollectionInfo      CollectionInfo `bson:"collection_info" json:"collection_info"`
	ProjectID           string         `bson:"project_id" json:"project_id"`
	WorkspaceID         string         `bson:"workspace_id" json:"workspace_id"`
	DomainID            string         `bson:"domain_id" json:"domain_id"`
	CreatedAt           wire.Time      `bson:"created_at" json:"created_at"`
	UpdatedAt           wire.Time      `bson:"updated_at" json:"updated_at"`

	// CreatedBy is the sub-task (<job_task_id>-<n>) that created the
	// document: a redelivered sub-task that finds it again still counts it
	// as created.
	CreatedBy string `bson:"created_by_task" json:"-"`
	// DisconnectCount is how many finished tasks of its collector and
	// secret in a row did not see it; GCTask is the last task that counted
	// it (so a finishing step run twice counts once).
	DisconnectCount int    `bson:"disconnect_count" json:"-"`
	GCTask          string `bson:"gc_task" json:"-"`
	Doomed          bool   `bson:"doomed" json:"-"`
	// MatchKeys are its records in KeysCollection.
	MatchKeys []string `bson:"match_keys" json:"-"`
}

// CloudServiceType is a type of cloud service as stored and sent.
type CloudServiceType struct {
	ID                  string        `bson:"_id" json:"-"`
	CloudServiceTypeID  string        `bson:"cloud_service_type_id" json:"cloud_service_type_id"`
	Name                string        `bson:"name" json:"name"`
	Provider            string        `bson:"provider" json:"provider"`
	Group               string        `bson:"group" json:"group"`
	CloudServiceTypeKey string        `bson:"cloud_service_type_key" json:"cloud_service_type_key"`
	RefCloudServiceType string        `bson:"ref_cloud_service_type" json:"ref_cloud_service_type"`
	ServiceCode         string        `bson:"service_code" json:"service_code"`
	IsPrimary           bool          `bson:"is_primary" json:"is_primary"`
	IsMajor             bool          `bson:"is_major" json:"is_major"`
	ResourceType        string        `bson:"resource_type" json:"resource_type"`
	Metadata            freeform.Map  `bson:"metadata" json:"metadata"`
	Tags                freeform.Flat `bson:"tags" json:"tags"`
	Labels              freeform.List `bson:"labels" json:"labels"`
	UpdatedBy           string        `bson:"updated_by" json:"updated_by"`
	DomainID            string        `bson:"domain_id" json:"domain_id"`
	WorkspaceID         string        `bson:"workspace_id" json:"workspace_id"`
	CreatedAt           wire.Time     `bson:"created_at" json:"created_at"`
	UpdatedAt           wire.Time     `bson:"updated_at" json:"updated_at"`
}

// TypeKey is the KeysCollection _id that makes a cloud service type key
// unique in its workspace.
func TypeKey(domainID, workspaceID, key string) string {
	return HashKey("cst", domainID, workspaceID, key)
}

// Region is a region a collector reported.
type Region struct {
	ID          string        `bson:"_id" json:"-"`
	RegionID    string        `bson:"region_id" json:"region_id"`
	Name        string        `bson:"name" json:"name"`
	RegionKey   string        `bson:"region_key" json:"region_key"`
	RegionCode  string        `bson:"region_code" json:"region_code"`
	Provider    string        `bson:"provider" json:"provider"`
	Tags        freeform.Flat `bson:"tags" json:"tags"`
	DomainID    string        `bson:"domain_id" json:"domain_id"`
	WorkspaceID string        `bson:"workspace_id" json:"workspace_id"`
	CreatedAt   wire.Time     `bson:"created_at" json:"created_at"`
	UpdatedAt   wire.Time     `bson:"updated_at" json:"updated_at"`
}

// RegionKeyOf is the KeysCollection _id of a region code.
func RegionKeyOf(domainID, workspaceID, provider, code string) string {
	return HashKey("region", domainID, workspaceID, provider, code)
}

// HashKey is a KeysCollection _id: kind and a digest of the parts, so
// any value (dots, dollars, NUL, any length) makes a plain short key.
func HashKey(kind string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	return kind + ":" + hex.EncodeToString(h.Sum(nil))[:40]
}

// Key is a record of KeysCollection: the value it makes unique or
// findable points at one document.
type Key struct {
	ID     string    `bson:"_id"`
	Target string    `bson:"target"`
	At     time.Time `bson:"at"`
}

// StaleKey is how old a key must be before a missing target frees it: a
// create that claimed the key stores its document within seconds.
const StaleKey = time.Minute

// EndTasks gives the unfinished tasks among ids a final status (and an
// error, when not nil): a canceled or timed-out job's tasks.
func EndTasks(ctx context.Context, tasks *mongo.Collection, ids []string, status string, e *ErrorInfo, now wire.Time) error {
	cur, err := ByIDs[JobTask](ctx, tasks, ids, bson.D{{Key: "status", Value: 1}})
	if err != nil {
		return err
	}
	update := bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: status}, {Key: "finished_at", Value: now}}}}
	if e != nil {
		update = append(update, bson.E{Key: "$push", Value: bson.D{{Key: "errors", Value: e}}})
	}
	for id, t := range cur {
		if Final(t.Status) {
			continue
		}
		// By _id alone: FerretDB scans for any other condition.
		if _, err := tasks.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update); err != nil {
			return store.Wrap(err)
		}
	}
	return nil
}
