package inventory_test

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// TestTenancy runs the tenancy matrix over every inventory resource: a
// record of workspace-1 (and of project-1, where the resource has
// projects) is read and changed by no outsider.
func TestTenancy(t *testing.T) {
	t.Parallel()
	s := setup(t)
	owner := auth.Principal{DomainID: "domain-a", UserID: "olga", Role: auth.WorkspaceOwner, WorkspaceID: "workspace-1"}
	member := auth.Principal{DomainID: "domain-a", UserID: "mia", Role: auth.WorkspaceMember, WorkspaceID: "workspace-1", Projects: []string{"project-1"}}
	matrix := func(coll, id, project string, insider auth.Principal, get, list, stat testkit.Req, changes ...testkit.Req) testkit.Tenancy {
		return testkit.Tenancy{Handler: s.h, Coll: s.db.Collection(coll), ID: id, Domain: "domain-a", Workspace: "workspace-1", Project: project,
			Insider: insider, Get: get, List: list, Stat: &stat, Changes: changes,
			Watch: []*mongo.Collection{s.db.Collection(jobsColl), s.db.Collection(tasksColl), s.db.Collection(collectorsColl), s.db.Collection(typesColl)}}
	}
	distinct := func(key string) map[string]any { return map[string]any{"query": map[string]any{"distinct": key}} }
	insert := func(coll string, doc bson.D) {
		if _, err := s.db.Collection(coll).InsertOne(context.Background(), doc); err != nil {
			t.Fatal(err)
		}
	}
	const base = "/inventory/v1/"

	t.Run("collector", func(t *testing.T) {
		c := s.createCollector(s.ownerA1, domainCollector(map[string]any{"resource_group": "WORKSPACE"}))
		id := map[string]any{"collector_id": c.CollectorID}
		matrix(collectorsColl, c.CollectorID, "", owner,
			testkit.Req{Path: base + "collector/get", Body: id}, testkit.Req{Path: base + "collector/list", Body: id},
			testkit.Req{Path: base + "collector/stat", Body: distinct("collector_id")},
			testkit.Req{Path: base + "collector/update", Body: map[string]any{"collector_id": c.CollectorID, "name": "taken"}},
			testkit.Req{Path: base + "collector/update-plugin", Body: map[string]any{"collector_id": c.CollectorID, "options": map[string]any{"region": "eu-west-1"}}},
			testkit.Req{Path: base + "collector/verify-plugin", Body: id},
			testkit.Req{Path: base + "collector/collect", Body: id},
			testkit.Req{Path: base + "collector/delete", Body: id},
		).Run(t)
	})
	t.Run("cloud service type", func(t *testing.T) {
		var ty typeOut
		s.ownerA1.Call(base+"cloud-service-type/create", ec2()).OK(&ty)
		id := map[string]any{"cloud_service_type_id": ty.CloudServiceTypeID}
		matrix(typesColl, ty.CloudServiceTypeID, "", owner,
			testkit.Req{Path: base + "cloud-service-type/get", Body: id}, testkit.Req{Path: base + "cloud-service-type/list", Body: id},
			testkit.Req{Path: base + "cloud-service-type/stat", Body: distinct("cloud_service_type_id")},
			testkit.Req{Path: base + "cloud-service-type/update", Body: map[string]any{"cloud_service_type_id": ty.CloudServiceTypeID, "tags": map[string]any{"a": "b"}}},
			testkit.Req{Path: base + "cloud-service-type/delete", Body: id},
		).Run(t)
	})
	t.Run("job", func(t *testing.T) {
		insert(jobsColl, bson.D{{Key: "_id", Value: "job-t1"}, {Key: "job_id", Value: "job-t1"}, {Key: "status", Value: "SUCCESS"},
			{Key: "domain_id", Value: "domain-a"}, {Key: "workspace_id", Value: "workspace-1"}, {Key: "collector_id", Value: "collector-x"}})
		id := map[string]any{"job_id": "job-t1"}
		matrix(jobsColl, "job-t1", "", owner,
			testkit.Req{Path: base + "job/get", Body: id}, testkit.Req{Path: base + "job/list", Body: id},
			testkit.Req{Path: base + "job/stat", Body: distinct("job_id")},
			testkit.Req{Path: base + "job/delete", Body: id},
		).Run(t)
		// analyze has no total_count; checked by the list above's outsiders
		// too, here as one more read.
		testkit.Tenancy{Handler: s.h, Coll: s.db.Collection(jobsColl), ID: "job-t1", Domain: "domain-a", Workspace: "workspace-1", Insider: owner,
			Get:  testkit.Req{Path: base + "job/get", Body: id},
			List: testkit.Req{Path: base + "job/analyze", Body: map[string]any{"query": map[string]any{"group_by": []any{"job_id"}}}},
		}.Run(t)
	})
	t.Run("job task", func(t *testing.T) {
		insert(tasksColl, bson.D{{Key: "_id", Value: "job-task-t1"}, {Key: "job_task_id", Value: "job-task-t1"}, {Key: "status", Value: "SUCCESS"},
			{Key: "domain_id", Value: "domain-a"}, {Key: "workspace_id", Value: "workspace-1"}, {Key: "project_id", Value: "project-1"}, {Key: "job_id", Value: "job-x"}})
		id := map[string]any{"job_task_id": "job-task-t1"}
		matrix(tasksColl, "job-task-t1", "project-1", member,
			testkit.Req{Path: base + "job-task/get", Body: id}, testkit.Req{Path: base + "job-task/list", Body: id},
			testkit.Req{Path: base + "job-task/stat", Body: distinct("job_task_id")},
			testkit.Req{Path: base + "job-task/delete", Body: id},
		).Run(t)
	})
	t.Run("cloud service", func(t *testing.T) {
		insert(servicesColl, bson.D{{Key: "_id", Value: "cloud-svc-t1"}, {Key: "cloud_service_id", Value: "cloud-svc-t1"}, {Key: "name", Value: "vm"},
			{Key: "state", Value: "ACTIVE"}, {Key: "domain_id", Value: "domain-a"}, {Key: "workspace_id", Value: "workspace-1"}, {Key: "project_id", Value: "project-1"}})
		id := map[string]any{"cloud_service_id": "cloud-svc-t1"}
		matrix(servicesColl, "cloud-svc-t1", "project-1", member,
			testkit.Req{Path: base + "cloud-service/get", Body: id}, testkit.Req{Path: base + "cloud-service/list", Body: id},
			testkit.Req{Path: base + "cloud-service/stat", Body: distinct("cloud_service_id")},
		).Run(t)
	})
}
