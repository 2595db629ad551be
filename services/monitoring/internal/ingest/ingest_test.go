package ingest

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/errs"
)

func TestLimiter(t *testing.T) {
	l := newLimiter(2, 3) // 2 per second, bursts of 3
	now := time.Unix(1000, 0)
	for i := range 3 {
		if ok, _ := l.allow("a", now); !ok {
			t.Fatalf("burst call %d refused", i)
		}
	}
	ok, wait := l.allow("a", now)
	if ok || wait <= 0 || wait > time.Second {
		t.Fatalf("4th call: %v, wait %s", ok, wait)
	}
	if ok, _ := l.allow("b", now); !ok {
		t.Fatal("another key shares the bucket")
	}
	if ok, _ := l.allow("a", now.Add(500*time.Millisecond)); !ok {
		t.Fatal("a token did not come back after 1/rate")
	}
	if ok, _ := l.allow("a", now.Add(500*time.Millisecond)); ok {
		t.Fatal("two tokens from half a second")
	}
	if ok, _ := newLimiter(0, 0).allow("x", now); !ok {
		t.Fatal("rate 0 means no limit")
	}
}

func TestDecodeObject(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{}`, true}, {` {"a": [1, {"b": null}]} `, true}, {`[]`, false}, {`"x"`, false}, {`1`, false}, {`null`, false},
		{`{"a":1}{}`, false}, {`{"a":1} 1`, false}, {``, false}, {`{"a":`, false}, {`{'a': 1}`, false},
	} {
		_, err := decodeObject([]byte(tc.body))
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v", tc.body, err)
		}
		if e, ok := errs.As(err); err != nil && (!ok || e.Code != errs.JSONFormat) {
			t.Errorf("%q: %v", tc.body, err)
		}
	}
}

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code string
		keep bool
	}{
		{errs.New(errs.GRPCTimeout, "x"), errs.WebhookPluginTimeout, true},
		{errs.New(errs.GRPCConnection, "x"), errs.WebhookPluginUnavailable, true},
		{errs.New(errs.NoPluginEndpoint, "x"), "", false}, // no retry finds an endpoint
		{errs.New(errs.PluginFailed, "x"), "", false},
		{errors.New("odd"), errs.WebhookPluginUnavailable, true},
	} {
		code, keep := transient(tc.err)
		if code != tc.code || keep != tc.keep {
			t.Errorf("%v: %s %v", tc.err, code, keep)
		}
	}
	_ = codes.OK
}
