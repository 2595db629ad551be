package identity_test

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/services/identity"
	"github.com/nubes-io/nubes/services/identity/internal/core"
	"github.com/nubes-io/nubes/services/identity/internal/identitytest"
	"github.com/nubes-io/nubes/services/identity/internal/verification"
)

// toLegacy rewrites a sealed field into the form identity stored before
// pkg/seal: {key_version: <int>, nonce, data}.
func toLegacy(t *testing.T, h *harness, coll string, id any, field string) {
	t.Helper()
	ctx := context.Background()
	var doc bson.Raw
	if err := h.DB.Collection(coll).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var s seal.Sealed
	if err := bson.Unmarshal(doc.Lookup(field).Document(), &s); err != nil {
		t.Fatal(err)
	}
	legacy := bson.D{{Key: "key_version", Value: int32(1)}, {Key: "nonce", Value: s.Nonce}, {Key: "data", Value: s.Data}}
	if _, err := h.DB.Collection(coll).UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: field, Value: legacy}}}}); err != nil {
		t.Fatal(err)
	}
}

func sealedOf(t *testing.T, h *harness, coll string, id any, field string) seal.Sealed {
	t.Helper()
	var doc bson.Raw
	if err := h.DB.Collection(coll).FindOne(context.Background(), bson.D{{Key: "_id", Value: id}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var s seal.Sealed
	if err := bson.Unmarshal(doc.Lookup(field).Document(), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSealedRecordsAcrossKeyRotation: records stored in identity's first
// sealed form (key_version) still open after the move to pkg/seal; a
// rotation's reseal moves every sealed field to the new key, after which
// the old key can leave the ring.
func TestSealedRecordsAcrossKeyRotation(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	h.SeedUser(h.Domain, "rota")
	rota := h.As("rota")
	userKey := h.Domain + "/rota"

	// An OTP secret, confirmed, then put back into the legacy form.
	var u map[string]any
	rota.Call("/identity/v2/user-profile/enable-mfa", map[string]any{"current_password": identitytest.UserPassword, "mfa_type": "OTP"}).OK(&u)
	uri, err := url.Parse(fmt.Sprint(u["mfa"].(map[string]any)["options"].(map[string]any)["otp_qrcode_uri"]))
	if err != nil {
		t.Fatal(err)
	}
	secret := uri.Query().Get("secret")
	toLegacy(t, h, core.UsersCollection, userKey, "otp_pending")
	identitytest.WaitForFreshOTPStep(t)
	code, _ := verification.OTPCode(secret, time.Now())
	rota.Call("/identity/v2/user-profile/confirm-mfa", map[string]any{"verify_code": code}).OK(&u) // opens the legacy record
	toLegacy(t, h, core.UsersCollection, userKey, "otp_secret")
	next, _ := verification.OTPCode(secret, time.Now().Add(30*time.Second))
	h.Anon.Call("/identity/v2/token/issue", map[string]any{"credentials": map[string]any{"user_id": "rota", "password": identitytest.UserPassword},
		"domain_id": h.Domain, "auth_type": "MFA", "verify_code": next}).OK(nil)

	// A trusted account's secret in the legacy form.
	var a map[string]any
	h.Admin.Call("/identity/v2/trusted-account/create", map[string]any{"name": "rotated", "provider": "aws", "data": map[string]any{"account_id": "1"},
		"secret_schema_id": "aws-secret-access-key", "secret_data": map[string]any{"aws_access_key_id": "AKIAROTATED", "aws_secret_access_key": "rotated-secret-value"}, "resource_group": "DOMAIN"}).OK(&a)
	secretID := a["trusted_secret_id"].(string)
	toLegacy(t, h, core.TrustedSecretsCollection, secretID, "sealed")
	// One more, sealed as of today (key id "1").
	h.Admin.Call("/identity/v2/trusted-account/create", map[string]any{"name": "current", "provider": "aws", "data": map[string]any{"account_id": "2"},
		"secret_schema_id": "aws-secret-access-key", "secret_data": map[string]any{"aws_access_key_id": "AKIACURRENT", "aws_secret_access_key": "current-value"}, "resource_group": "DOMAIN"}).OK(nil)

	// Rotation: key 2 becomes active; the reseal moves every record.
	newKey := seal.RandomSpec("2")
	rotated, err := seal.Parse(h.CipherSpec+","+newKey, "2")
	if err != nil {
		t.Fatal(err)
	}
	reps, err := seal.ResealAll(ctx, rotated, identity.ResealTargets(h.DB), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	moved := map[string]int{}
	for _, r := range reps {
		if len(r.Failed) != 0 {
			t.Fatalf("failed: %+v", r)
		}
		moved[r.Collection+"."+r.Field] += r.Resealed
	}
	if moved[core.TrustedSecretsCollection+".sealed"] != 2 || moved[core.UsersCollection+".otp_secret"] != 1 {
		t.Fatalf("resealed %v", moved)
	}
	// The old key can go: every record opens with key 2 alone.
	onlyNew, _ := seal.Parse(newKey, "")
	ts := sealedOf(t, h, core.TrustedSecretsCollection, secretID, "sealed")
	otp := sealedOf(t, h, core.UsersCollection, userKey, "otp_secret")
	if ts.KeyID != "2" || otp.KeyID != "2" {
		t.Fatalf("key ids after reseal: %q %q", ts.KeyID, otp.KeyID)
	}
	var data map[string]any
	ad := "identity/trusted-secret\x00" + secretID + "\x00" + a["trusted_account_id"].(string) + "\x00" + h.Domain
	if err := onlyNew.OpenJSON(ts, []byte(ad), &data); err != nil || data["aws_secret_access_key"] != "rotated-secret-value" {
		t.Fatalf("trusted secret after reseal: %v %v", data, err)
	}
	var s string
	if err := onlyNew.OpenJSON(otp, []byte("otp:"+userKey), &s); err != nil || s != secret {
		t.Fatalf("otp secret after reseal: %v", err)
	}
	// Nothing left for a second run.
	reps, _ = seal.ResealAll(ctx, rotated, identity.ResealTargets(h.DB), 10, nil)
	for _, r := range reps {
		if r.Resealed != 0 {
			t.Fatalf("second run moved %+v", r)
		}
	}
}
