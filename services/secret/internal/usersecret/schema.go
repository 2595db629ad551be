package usersecret

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/jsonschema"
)

// SchemaGetPath is the repository operation that names a schema.
const SchemaGetPath = "/repository/v1/schema/get"

// Schemas checks secret data against the repository's schemas.
type Schemas struct{ repo *call.Client }

// repoSchema is what the secret service reads of a repository SchemaInfo.
type repoSchema struct {
	Name     string        `json:"name"`
	SchemaID string        `json:"schema_id"`
	Schema   any           `json:"schema"`
	Provider string        `json:"provider"`
	Tags     freeform.Flat `json:"tags"`
}

// check validates data against the repository schema that schemaID names
// (a schema's name in the caller's domain, on the caller's behalf) and
// returns the secret's provider: the schema's `provider` member if it
// has one, else its tag `provider`. An empty schemaID, or one the
// repository does not know, checks nothing. Data that does not fit is
// 400 naming the failing place in data; a repository that does not
// answer is 503.
func (s *Schemas) check(ctx context.Context, domainID, schemaID string, data map[string]any) (string, error) {
	if schemaID == "" {
		return "", nil
	}
	var sc repoSchema
	err := s.repo.Call(ctx, SchemaGetPath, map[string]any{"name": schemaID, "domain_id": domainID}, &sc)
	if e, ok := errs.As(err); ok && e.Status() == http.StatusNotFound {
		if e.Code == errs.NotFoundCode {
			return "", nil // not a repository schema: a label of the client's
		}
		// Any other 404 (an unknown path) means no repository answers here.
		return "", errs.Down("The repository service", errors.New(e.Error()))
	}
	if err != nil {
		return "", err
	}
	compiled, err := jsonschema.Compile(sc.Schema)
	if err != nil {
		return "", errs.Invalid("schema_id", "the repository schema "+schemaID+" is not a valid JSON Schema")
	}
	if err := compiled.ValidateAt("data", data); err != nil {
		return "", dataFault(err, schemaID)
	}
	provider := sc.Provider
	if provider == "" {
		provider, _ = sc.Tags["provider"].(string)
	}
	return provider, nil
}

// dataFault keeps only the failing place of a validation error: the
// validator's reason may quote the offending value (a pattern, an enum, a
// format), and secret data must never reach a message or a log line.
func dataFault(err error, schemaID string) error {
	e, ok := errs.As(err)
	if !ok {
		return err
	}
	key := "data"
	if rest, ok := strings.CutPrefix(e.Message, "Invalid parameter. (key = "); ok {
		if i := strings.Index(rest, ", reason = "); i > 0 {
			key = rest[:i]
		}
	}
	return errs.Invalid(key, "does not fit the schema "+schemaID)
}
