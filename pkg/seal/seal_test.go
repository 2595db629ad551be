package seal_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/seal"
)

func key(b byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }

func ring(t *testing.T, spec, active string) *seal.Keyring {
	t.Helper()
	k, err := seal.Parse(spec, active)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestParse(t *testing.T) {
	tests := []struct {
		name, spec, active string
		wantActive         string
		wantErr            string
	}{
		{"one key is active", "k1:" + key(1), "", "k1", ""},
		{"legacy numeric ids: highest is active", "1:" + key(1) + ",2:" + key(2) + ",10:" + key(3), "", "10", ""},
		{"named active", "old:" + key(1) + ", new:" + key(2), "new", "new", ""},
		{"named active among numbers", "1:" + key(1) + ",2:" + key(2), "1", "1", ""},
		{"spaces and empty parts", " a:" + key(1) + " ,, ", "", "a", ""},
		{"several named keys need an active one", "old:" + key(1) + ",new:" + key(2), "", "", "encryption_active_key"},
		{"active key not in ring", "a:" + key(1), "b", "", "not among the keys"},
		{"empty", "", "", "", "no encryption key"},
		{"no colon", key(1), "", "", "form <id>:<base64"},
		{"short key", "a:" + base64.StdEncoding.EncodeToString([]byte("short")), "", "", "want 32 bytes"},
		{"not base64", "a:!!!", "", "", "want 32 bytes"},
		{"bad id", "a b:" + key(1), "", "", "key id"},
		{"duplicate id", "a:" + key(1) + ",a:" + key(2), "a", "", "twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := seal.Parse(tt.spec, tt.active)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), key(1)) || strings.Contains(err.Error(), key(2)) {
					t.Fatalf("the error shows key material: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if k.Active() != tt.wantActive {
				t.Fatalf("active = %q, want %q", k.Active(), tt.wantActive)
			}
		})
	}
}

func TestLoadMergesInlineAndFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "keys")
	if err := os.WriteFile(file, []byte("b:"+key(2)+"\nc:"+key(3)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := seal.Load(seal.Config{Keys: "a:" + key(1), KeysFile: file, Active: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(k.IDs(), ","); got != "a,b,c" || k.Active() != "c" {
		t.Fatalf("ids %s active %s", got, k.Active())
	}
	if _, err := seal.Load(seal.Config{}); err == nil {
		t.Fatal("no keys at all must fail")
	}
	if _, err := seal.Load(seal.Config{KeysFile: filepath.Join(dir, "missing")}); err == nil {
		t.Fatal("a missing keys file must fail")
	}
	if _, err := seal.Parse(seal.RandomSpec("dev"), ""); err != nil {
		t.Fatalf("RandomSpec does not parse: %v", err)
	}
}

func TestSealOpen(t *testing.T) {
	old := ring(t, "1:"+key(1), "")
	rotated := ring(t, "1:"+key(1)+",2:"+key(2), "2") // 2 seals, 1 still opens
	dropped := ring(t, "2:"+key(2), "")               // 1 withdrawn
	other := ring(t, "1:"+key(9), "")                 // same id, other bytes
	ad := seal.AD("user_secrets", "user-secret-1", "domain-a")
	plain := []byte(`{"password":"hunter2"}`)

	byOld, err := old.Seal(plain, ad)
	if err != nil {
		t.Fatal(err)
	}
	byNew, err := rotated.Seal(plain, ad)
	if err != nil {
		t.Fatal(err)
	}
	if byOld.KeyID != "1" || byNew.KeyID != "2" {
		t.Fatalf("key ids %q %q", byOld.KeyID, byNew.KeyID)
	}
	if bytes.Contains(byOld.Data, []byte("hunter2")) {
		t.Fatal("the ciphertext holds the plaintext")
	}
	tampered := byOld
	tampered.Data = append([]byte{}, byOld.Data...)
	tampered.Data[0] ^= 1

	tests := []struct {
		name    string
		k       *seal.Keyring
		s       seal.Sealed
		ad      []byte
		wantErr error
	}{
		{"same key, same AD", old, byOld, ad, nil},
		{"old record opens after rotation", rotated, byOld, ad, nil},
		{"new record under the new key", rotated, byNew, ad, nil},
		{"new record, old ring does not know key 2", old, byNew, ad, seal.ErrUnknownKey},
		{"withdrawn key", dropped, byOld, ad, seal.ErrUnknownKey},
		{"same id, other key bytes", other, byOld, ad, seal.ErrOpen},
		{"wrong record id in AD", old, byOld, seal.AD("user_secrets", "user-secret-2", "domain-a"), seal.ErrOpen},
		{"wrong domain in AD", old, byOld, seal.AD("user_secrets", "user-secret-1", "domain-b"), seal.ErrOpen},
		{"wrong collection in AD", old, byOld, seal.AD("trusted", "user-secret-1", "domain-a"), seal.ErrOpen},
		{"AD parts shifted", old, byOld, seal.AD("user_secret", "suser-secret-1", "domain-a"), seal.ErrOpen},
		{"no AD", old, byOld, nil, seal.ErrOpen},
		{"altered ciphertext", old, tampered, ad, seal.ErrOpen},
		{"short nonce", old, seal.Sealed{KeyID: "1", Nonce: []byte{1}, Data: byOld.Data}, ad, seal.ErrOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.k.Open(tt.s, tt.ad)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("the error shows the plaintext: %v", err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("open = %q, %v", got, err)
			}
		})
	}
}

func TestADIsUnambiguous(t *testing.T) {
	if bytes.Equal(seal.AD("ab", "c"), seal.AD("a", "bc")) || bytes.Equal(seal.AD("a", ""), seal.AD("a")) {
		t.Fatal("AD parts run into each other")
	}
}

func TestRotationReseal(t *testing.T) {
	old := ring(t, "1:"+key(1), "")
	rotated := ring(t, "1:"+key(1)+",2:"+key(2), "2")
	ad := seal.AD("c", "r")
	s, _ := old.SealJSON(map[string]any{"a": "b"}, ad)
	if rotated.Current(s) {
		t.Fatal("a record under key 1 is not current once 2 is active")
	}
	fresh, changed, err := rotated.Reseal(s, ad)
	if err != nil || !changed || fresh.KeyID != "2" || !rotated.Current(fresh) {
		t.Fatalf("reseal = %+v %v %v", fresh, changed, err)
	}
	var m map[string]any
	if err := rotated.OpenJSON(fresh, ad, &m); err != nil || m["a"] != "b" {
		t.Fatalf("open resealed = %v %v", m, err)
	}
	again, changed, err := rotated.Reseal(fresh, ad)
	if err != nil || changed || !bytes.Equal(again.Nonce, fresh.Nonce) {
		t.Fatal("resealing a current record must leave it as it is")
	}
	if _, _, err := rotated.Reseal(s, seal.AD("c", "other")); !errors.Is(err, seal.ErrOpen) {
		t.Fatalf("reseal with a wrong AD = %v", err)
	}
	// Once every record is resealed, key 1 can leave the ring.
	if err := ring(t, "2:"+key(2), "").OpenJSON(fresh, ad, &m); err != nil {
		t.Fatal(err)
	}
}

func TestSealedBSON(t *testing.T) {
	k := ring(t, "7:"+key(7), "")
	s, _ := k.Seal([]byte("x"), nil)
	raw, err := bson.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back seal.Sealed
	if err := bson.Unmarshal(raw, &back); err != nil || back.KeyID != "7" || !bytes.Equal(back.Nonce, s.Nonce) || !bytes.Equal(back.Data, s.Data) {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	// The form identity stored first: {key_version: <int>, nonce, data}.
	legacy, _ := bson.Marshal(bson.D{{Key: "key_version", Value: int32(7)}, {Key: "nonce", Value: s.Nonce}, {Key: "data", Value: s.Data}})
	var old seal.Sealed
	if err := bson.Unmarshal(legacy, &old); err != nil || old.KeyID != "7" {
		t.Fatalf("legacy: %+v %v", old, err)
	}
	if p, err := k.Open(old, nil); err != nil || string(p) != "x" {
		t.Fatalf("legacy open: %q %v", p, err)
	}
	// Inside a document, as a pointer field.
	type rec struct {
		S *seal.Sealed `bson:"s,omitempty"`
	}
	doc, _ := bson.Marshal(bson.D{{Key: "s", Value: bson.Raw(legacy)}})
	var r rec
	if err := bson.Unmarshal(doc, &r); err != nil || r.S == nil || r.S.KeyID != "7" {
		t.Fatalf("nested legacy: %+v %v", r.S, err)
	}
	bad, _ := bson.Marshal(bson.D{{Key: "key_id", Value: "7"}, {Key: "nonce", Value: "text"}, {Key: "data", Value: s.Data}})
	if err := bson.Unmarshal(bad, &old); err == nil {
		t.Fatal("a nonce that is not binary must fail")
	}
}

func TestTokenHasOneSpelling(t *testing.T) {
	k, err := seal.New(map[string][]byte{"k1": make([]byte, seal.KeySize)}, "k1")
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		s, err := k.Seal(nil, seal.AD("x"))
		if err != nil {
			t.Fatal(err)
		}
		tok := seal.EncodeToken(s)
		back, err := seal.DecodeToken(tok)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Open(back, seal.AD("x")); err != nil {
			t.Fatal(err)
		}
		for _, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_" {
			other := tok[:len(tok)-1] + string(c)
			if other == tok {
				continue
			}
			if s2, err := seal.DecodeToken(other); err == nil {
				if _, err := k.Open(s2, seal.AD("x")); err == nil {
					t.Fatalf("%q opens like %q", other, tok)
				}
			}
		}
	}
	for _, bad := range []string{"", "!", "AA", "A"} {
		if _, err := seal.DecodeToken(bad); err == nil {
			t.Fatalf("%q decoded", bad)
		}
	}
}
