package notification_test

import (
	"testing"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// The kit's tenancy matrix over a protocol (a record of the whole
// domain): an admin of another domain and a workspace owner without a
// workspace read nothing and change nothing; a plain user of the domain
// reads protocols (§4.4: read DA, WO, WM, USER) but changes nothing.
func TestTenancyMatrix(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := e.create(t, e.adminA, emailProtocol("Matrix"))
	id := M{"protocol_id": p.ProtocolID}
	testkit.Tenancy{
		Handler: e.handler, Coll: e.db.Collection("notification_protocols"), ID: p.ProtocolID, Domain: "domain-a",
		Get:  testkit.Req{Path: base + "get", Body: id},
		List: testkit.Req{Path: base + "list", Body: id},
		Stat: &testkit.Req{Path: base + "stat", Body: M{"query": M{
			"filter":    []any{M{"k": "protocol_id", "v": p.ProtocolID, "o": "eq"}},
			"aggregate": []any{M{"group": M{"keys": []any{M{"key": "name", "name": "n"}}}}}}}},
		Changes: []testkit.Req{
			{Path: base + "update", Body: M{"protocol_id": p.ProtocolID, "name": "taken"}},
			{Path: base + "update-plugin", Body: M{"protocol_id": p.ProtocolID, "options": M{"smtp_host": "evil.example.com"}}},
			{Path: base + "disable", Body: id},
			{Path: base + "enable", Body: id},
			{Path: base + "delete", Body: id},
		},
		Insider:     auth.Principal{DomainID: "domain-a", UserID: "alice", Role: auth.DomainAdmin},
		UserReads:   true,
		NamesDomain: true,
	}.Run(t)
}
