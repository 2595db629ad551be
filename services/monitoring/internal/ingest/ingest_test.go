package ingest

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/nubes-io/nubes/pkg/errs"
)

func TestDecodeObject(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
