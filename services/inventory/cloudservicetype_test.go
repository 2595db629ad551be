package inventory_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/testkit"
)

type typeOut struct {
	CloudServiceTypeID  string         `json:"cloud_service_type_id"`
	Name                string         `json:"name"`
	Provider            string         `json:"provider"`
	Group               string         `json:"group"`
	CloudServiceTypeKey string         `json:"cloud_service_type_key"`
	ServiceCode         string         `json:"service_code"`
	IsPrimary           bool           `json:"is_primary"`
	IsMajor             bool           `json:"is_major"`
	ResourceType        string         `json:"resource_type"`
	Metadata            map[string]any `json:"metadata"`
	Tags                map[string]any `json:"tags"`
	Labels              []any          `json:"labels"`
	DomainID            string         `json:"domain_id"`
	WorkspaceID         string         `json:"workspace_id"`
	CreatedAt           string         `json:"created_at"`
	UpdatedAt           string         `json:"updated_at"`
}

func ec2() map[string]any {
	return map[string]any{"name": "Instance", "provider": "aws", "group": "EC2", "service_code": "AmazonEC2", "is_primary": true,
		"labels": []any{"Compute"}, "tags": map[string]any{"spaceone:icon": "ec2.svg"}, "metadata": map[string]any{"view": map[string]any{}}}
}

func TestCloudServiceType(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var dom typeOut
	s.adminA.Call("/inventory/v1/cloud-service-type/create", ec2()).OK(&dom)
	if !strings.HasPrefix(dom.CloudServiceTypeID, "cloud-svc-type-") || dom.CloudServiceTypeKey != "aws.EC2.Instance" || dom.WorkspaceID != "*" ||
		dom.ResourceType != "inventory.CloudService" || !dom.IsPrimary || dom.IsMajor || dom.Labels[0] != "Compute" || dom.Tags["spaceone:icon"] != "ec2.svg" {
		t.Fatalf("create: %+v", dom)
	}
	var w1 typeOut
	s.ownerA1.Call("/inventory/v1/cloud-service-type/create", ec2()).OK(&w1) // same key, another workspace
	if w1.WorkspaceID != "workspace-1" {
		t.Fatalf("workspace type: %+v", w1)
	}

	t.Run("refused creates", func(t *testing.T) {
		with := func(k string, v any) map[string]any { b := ec2(); b[k] = v; return b }
		without := func(k string) map[string]any { b := ec2(); delete(b, k); return b }
		for _, tt := range []struct {
			name   string
			caller *testkit.Client
			body   any
			status int
			code   string
		}{
			{"same key in the workspace", s.adminA, ec2(), http.StatusConflict, errs.SaveUniqueValues},
			{"same key in workspace-1", s.ownerA1, ec2(), http.StatusConflict, errs.SaveUniqueValues},
			{"no name", s.adminA, without("name"), http.StatusBadRequest, errs.RequiredParameter},
			{"no provider", s.adminA, without("provider"), http.StatusBadRequest, errs.RequiredParameter},
			{"no group", s.adminA, without("group"), http.StatusBadRequest, errs.RequiredParameter},
			{"a dot in the name", s.adminA, with("name", "a.b"), http.StatusBadRequest, errs.InvalidParameter},
			{"is_major not a bool", s.adminA, with("is_major", "yes"), http.StatusBadRequest, errs.InvalidParameterType},
			{"labels not a list", s.adminA, with("labels", "x"), http.StatusBadRequest, errs.InvalidParameterType},
			{"metadata key", s.adminA, with("metadata", map[string]any{"": 1}), http.StatusBadRequest, errs.InvalidParameter},
			{"unknown field", s.adminA, with("cloud_service_type_key", "x.y.z"), http.StatusBadRequest, errs.InvalidParameter},
			{"member", s.memberA1, with("name", "Other"), http.StatusForbidden, errs.PermissionDenied},
			{"anonymous", s.anon, with("name", "Other"), http.StatusUnauthorized, errs.AuthenticateFailure},
		} {
			t.Run(tt.name, func(t *testing.T) {
				tt.caller.Call("/inventory/v1/cloud-service-type/create", tt.body).Fails(tt.status, tt.code)
				if n := s.count(typesColl, nil); n != 2 {
					t.Fatalf("%d types stored", n)
				}
			})
		}
	})

	t.Run("update", func(t *testing.T) {
		var out typeOut
		s.adminA.Call("/inventory/v1/cloud-service-type/update", map[string]any{"cloud_service_type_id": dom.CloudServiceTypeID,
			"is_major": true, "is_primary": false, "service_code": "", "tags": map[string]any{}, "name": "Instance", "provider": "aws"}).OK(&out)
		if !out.IsMajor || out.IsPrimary || out.ServiceCode != "" || len(out.Tags) != 0 || out.Name != "Instance" || out.UpdatedAt == "" {
			t.Fatalf("update: %+v", out)
		}
		before := s.raw(typesColl, dom.CloudServiceTypeID)
		for _, tt := range []struct {
			name   string
			caller *testkit.Client
			body   map[string]any
			status int
			code   string
		}{
			{"name", s.adminA, map[string]any{"name": "Volume"}, http.StatusBadRequest, errs.InvalidParameter},
			{"provider", s.adminA, map[string]any{"provider": "google_cloud"}, http.StatusBadRequest, errs.InvalidParameter},
			{"group", s.adminA, map[string]any{"group": "EBS"}, http.StatusBadRequest, errs.InvalidParameter},
			{"key", s.adminA, map[string]any{"cloud_service_type_key": "a.b.c"}, http.StatusBadRequest, errs.InvalidParameter},
			{"bad labels", s.adminA, map[string]any{"labels": map[string]any{}}, http.StatusBadRequest, errs.InvalidParameterType},
			{"domain type by an owner", s.ownerA1, map[string]any{"is_major": false}, http.StatusForbidden, errs.PermissionDenied},
			{"another domain", s.adminB, map[string]any{"is_major": false}, http.StatusNotFound, errs.NotFoundCode},
		} {
			t.Run(tt.name, func(t *testing.T) {
				tt.body["cloud_service_type_id"] = dom.CloudServiceTypeID
				tt.caller.Call("/inventory/v1/cloud-service-type/update", tt.body).Fails(tt.status, tt.code)
				after := s.raw(typesColl, dom.CloudServiceTypeID)
				if after["name"] != before["name"] || after["group"] != before["group"] || after["is_major"] != before["is_major"] {
					t.Fatalf("changed: %v", after)
				}
			})
		}
		s.adminA.Call("/inventory/v1/cloud-service-type/update", map[string]any{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
	})

	t.Run("reads and isolation", func(t *testing.T) {
		var l list[typeOut]
		s.ownerA1.Call("/inventory/v1/cloud-service-type/list", map[string]any{"provider": "aws"}).OK(&l)
		if l.TotalCount != 2 {
			t.Fatalf("owner sees its workspace's and the domain's: %+v", l)
		}
		s.ownerA2.Call("/inventory/v1/cloud-service-type/list", nil).OK(&l)
		if l.TotalCount != 1 || l.Results[0].WorkspaceID != "*" {
			t.Fatalf("workspace-2: %+v", l)
		}
		s.adminB.Call("/inventory/v1/cloud-service-type/list", nil).OK(&l)
		if l.TotalCount != 0 {
			t.Fatalf("domain b: %+v", l)
		}
		s.adminA.Call("/inventory/v1/cloud-service-type/list", map[string]any{"cloud_service_type_key": "aws.EC2.Instance", "workspace_id": "workspace-1"}).OK(&l)
		if l.TotalCount != 1 || l.Results[0].CloudServiceTypeID != w1.CloudServiceTypeID {
			t.Fatalf("by key: %+v", l)
		}
		var st struct {
			Results []any `json:"results"`
		}
		// The console's distinct stat.
		s.adminA.Call("/inventory/v1/cloud-service-type/stat", map[string]any{"query": map[string]any{"distinct": "group",
			"filter": []any{map[string]any{"k": "provider", "v": "aws", "o": "eq"}}}}).OK(&st)
		if len(st.Results) != 1 || st.Results[0] != "EC2" {
			t.Fatalf("distinct: %v", st.Results)
		}
		s.adminB.Call("/inventory/v1/cloud-service-type/stat", map[string]any{"query": map[string]any{"distinct": "group"}}).OK(&st)
		if len(st.Results) != 0 {
			t.Fatalf("stat of domain b: %v", st.Results)
		}
		s.adminA.Call("/inventory/v1/cloud-service-type/stat", map[string]any{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
		s.adminA.Call("/inventory/v1/cloud-service-type/list", map[string]any{"is_major": "yes"}).Fails(http.StatusBadRequest, errs.InvalidParameterType)
		s.ownerA2.Call("/inventory/v1/cloud-service-type/get", map[string]any{"cloud_service_type_id": w1.CloudServiceTypeID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		s.adminB.Call("/inventory/v1/cloud-service-type/get", map[string]any{"cloud_service_type_id": dom.CloudServiceTypeID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		s.adminA.Call("/inventory/v1/cloud-service-type/get", map[string]any{}).Fails(http.StatusBadRequest, errs.RequiredParameter)
		var got typeOut
		s.memberA1.Call("/inventory/v1/cloud-service-type/get", map[string]any{"cloud_service_type_id": dom.CloudServiceTypeID}).OK(&got)
		if got.CloudServiceTypeKey != "aws.EC2.Instance" {
			t.Fatalf("get: %+v", got)
		}
	})

	t.Run("delete frees the key", func(t *testing.T) {
		s.ownerA1.Call("/inventory/v1/cloud-service-type/delete", map[string]any{"cloud_service_type_id": dom.CloudServiceTypeID}).Fails(http.StatusForbidden, errs.PermissionDenied)
		s.adminB.Call("/inventory/v1/cloud-service-type/delete", map[string]any{"cloud_service_type_id": dom.CloudServiceTypeID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		s.memberA1.Call("/inventory/v1/cloud-service-type/delete", map[string]any{"cloud_service_type_id": w1.CloudServiceTypeID}).Fails(http.StatusForbidden, errs.PermissionDenied)
		if n := s.count(typesColl, nil); n != 2 {
			t.Fatalf("%d types after refused deletes", n)
		}
		s.adminA.Call("/inventory/v1/cloud-service-type/delete", map[string]any{"cloud_service_type_id": dom.CloudServiceTypeID}).OK(nil)
		s.adminA.Call("/inventory/v1/cloud-service-type/get", map[string]any{"cloud_service_type_id": dom.CloudServiceTypeID}).Fails(http.StatusNotFound, errs.NotFoundCode)
		s.adminA.Call("/inventory/v1/cloud-service-type/create", ec2()).OK(nil)
	})
}

// TestCloudServiceTypeKeyUnderConcurrency: many creates of one key at
// once store exactly one type (the key is claimed by an _id insert).
func TestCloudServiceTypeKeyUnderConcurrency(t *testing.T) {
	t.Parallel()
	s := setup(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := s.adminA.Call("/inventory/v1/cloud-service-type/create", ec2())
			mu.Lock()
			statuses[r.Status]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if statuses[http.StatusOK] != 1 || statuses[http.StatusConflict] != 11 {
		t.Fatalf("statuses %v", statuses)
	}
	if n := s.count(typesColl, nil); n != 1 {
		t.Fatalf("%d types stored", n)
	}
}
