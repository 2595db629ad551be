package schema

import (
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/services/identity/internal/managed"
)

// ManagedVersion is the version of the shipped schemas: a change of any
// of them bumps it, and the next sync of each domain replaces them.
const ManagedVersion = "1.1"

// field is one property of a shipped form.
type field struct {
	key, title string
	required   bool
	format     string // password, generate_id (hints of the console's form)
	def        string
	integer    bool
	minLength  int // 0: none
}

// form is a JSON schema object over fields, in their order.
func form(fields ...field) map[string]any {
	props, order, required := map[string]any{}, []any{}, []any{}
	for _, f := range fields {
		p := map[string]any{"title": f.title, "type": "string"}
		if f.integer {
			p["type"] = "integer"
		}
		if f.minLength > 0 {
			p["minLength"] = f.minLength
		}
		if f.format != "" {
			p["format"] = f.format
		}
		if f.def != "" {
			p["default"] = f.def
		}
		props[f.key] = p
		order = append(order, f.key)
		if f.required {
			required = append(required, f.key)
		}
	}
	return map[string]any{"type": "object", "properties": props, "required": required, "order": order}
}

// key is a required secret string of at least 4 characters.
func key(k, title string) field { return field{key: k, title: title, required: true, minLength: 4} }

// req is a required string of an account's data.
func req(k, title string) field { return field{key: k, title: title, required: true} }

func help(what string) map[string]any {
	return map[string]any{"help": map[string]any{"en": what}}
}

// shipped are the schemas upstream ships (identity's managed_resource):
// their ids, types, providers, fields and related schemas.
var shipped = []struct {
	id, name, kind, provider string
	schema                   map[string]any
	related                  []string
	options                  map[string]any
}{
	{"aws-service-account", "AWS Service Account", ServiceAccount, "aws", form(req("account_id", "Account ID")),
		[]string{"aws-secret-access-key", "aws-secret-assume-role"},
		merge(help("The AWS account ID the service account collects from."), map[string]any{"external_link": "https://<%- data.account_id %>.signin.aws.amazon.com/console"})},
	{"aws-trusted-account", "AWS Trusted Account", TrustedAccount, "aws", form(req("account_id", "Account ID")),
		[]string{"aws-secret-access-key", "aws-control-tower-access-key"},
		merge(help("The AWS account whose keys attached accounts assume roles with."), map[string]any{"external_link": "https://<%- data.account_id %>.signin.aws.amazon.com/console"})},
	{"aws-secret-access-key", "AWS Access Key", Secret, "aws", form(key("aws_access_key_id", "AWS Access Key"),
		field{key: "aws_secret_access_key", title: "AWS Secret Key", required: true, minLength: 4, format: "password"}), nil, map[string]any{}},
	{"aws-control-tower-access-key", "AWS Control Tower", Secret, "aws", form(key("aws_access_key_id", "AWS Access Key"),
		field{key: "aws_secret_access_key", title: "AWS Secret Key", required: true, minLength: 4, format: "password"},
		field{key: "role_name", title: "Role Name", required: true, minLength: 4, def: "SpaceONERole"},
		field{key: "external_id", title: "External ID", required: true, minLength: 4, format: "generate_id"}), nil, map[string]any{}},
	{"aws-secret-assume-role", "AWS Assume Role", TrustingSecret, "aws", form(key("role_arn", "Role ARN"),
		field{key: "external_id", title: "External ID", format: "generate_id"}), nil, map[string]any{}},
	{"aws-security-ou-secret", "AWS Security OU", TrustingSecret, "aws", form(key("account_id", "Account ID")), nil, map[string]any{}},
	{"azure-service-account", "Azure Service Account", ServiceAccount, "azure", form(req("tenant_id", "Tenant ID"), req("subscription_id", "Subscription ID")),
		[]string{"azure-secret-client-secret", "azure-secret-subscription-id", "azure-secret-multi-tenant"}, help("The Azure tenant and subscription the account collects from.")},
	{"azure-trusted-account", "Azure Trusted Account", TrustedAccount, "azure", form(req("tenant_id", "Tenant ID"), req("subscription_id", "Subscription ID")),
		[]string{"azure-secret-client-secret"}, help("The Azure tenant whose client secret attached accounts use.")},
	{"azure-secret-client-secret", "Azure Client Secret", Secret, "azure", form(key("subscription_id", "Subscription ID"), key("tenant_id", "Tenant ID"),
		key("client_id", "Client ID"), field{key: "client_secret", title: "Client Secret", required: true, minLength: 4, format: "password"}), nil, map[string]any{}},
	{"azure-secret-subscription-id", "Azure Subscription", TrustingSecret, "azure", form(key("subscription_id", "Subscription ID")), nil, map[string]any{}},
	{"azure-secret-multi-tenant", "Azure Multi Tenant", TrustingSecret, "azure", form(key("subscription_id", "Subscription ID"),
		field{key: "tenant_id", title: "Tenant ID", minLength: 4}), nil, map[string]any{}},
	{"google-cloud-service-account", "Google Cloud Service Account", ServiceAccount, "google_cloud", form(req("project_id", "Project ID")),
		[]string{"google-secret-oauth2-credentials", "google-secret-project-id"},
		help("The Google Cloud project the account collects from.")},
	{"google-cloud-trusted-account", "Google Cloud Trusted Account", TrustedAccount, "google_cloud", form(req("project_id", "Project ID")),
		[]string{"google-secret-oauth2-credentials"}, map[string]any{}},
	{"google-secret-oauth2-credentials", "Google OAuth2 Credentials", Secret, "google_cloud", form(
		field{key: "type", title: "Type", required: true, minLength: 4, def: "service_account"}, key("project_id", "Project ID"),
		key("private_key_id", "Private Key ID"), field{key: "private_key", title: "Private Key", required: true, minLength: 4, format: "password"},
		key("client_email", "Client Email"), key("client_id", "Client ID"),
		field{key: "auth_uri", title: "Auth URI", required: true, minLength: 4, def: "https://acounts.google.com/o/oauth2/auth"},
		field{key: "token_uri", title: "Token URI", required: true, minLength: 4, def: "https://oauth2.googleapis.com/token"},
		field{key: "auth_provider_x509_cert_url", title: "Auth Provider x509 Cert URL", required: true, minLength: 4, def: "https://www.googleapis.com/oauth2/v1/certs"},
		key("client_x509_cert_url", "Client x509 Cert URL")), nil, map[string]any{}},
	{"google-secret-project-id", "Google Project ID", TrustingSecret, "google_cloud", form(key("project_id", "Project ID")), nil, map[string]any{}},
	{"kubernetes-service-account", "Kubernetes Service Account", ServiceAccount, "kubernetes", map[string]any{}, nil,
		help("A Kubernetes cluster, collected by an agent installed in it.")},
	{"email-smtp", "SMTP", Secret, "", form(key("smtp_host", "SMTP Host"), field{key: "smtp_port", title: "SMTP Port", required: true, integer: true},
		key("user", "User"), field{key: "password", title: "Password", required: true, minLength: 4, format: "password"}), nil, map[string]any{}},
}

func merge(a, b map[string]any) map[string]any {
	for k, v := range b {
		a[k] = v
	}
	return a
}

// Shipped are the managed schemas' ids.
func Shipped() []string {
	out := make([]string, len(shipped))
	for i, s := range shipped {
		out[i] = s.id
	}
	return out
}

func records(domainID string) []managed.Record {
	out := make([]managed.Record, 0, len(shipped))
	for _, s := range shipped {
		related := s.related
		if related == nil {
			related = []string{}
		}
		out = append(out, managed.Record{ID: Key(domainID, s.id), Version: ManagedVersion, Doc: bson.M{
			"schema_id": s.id, "name": s.name, "schema_type": s.kind, "schema": freeform.Map(s.schema), "provider": s.provider,
			"related_schemas": related, "options": freeform.Map(s.options), "tags": freeform.Flat{}, "is_managed": true, "domain_id": domainID,
		}})
	}
	return out
}
