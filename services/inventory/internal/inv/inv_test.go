package inv

import (
	"fmt"
	"strings"
	"testing"
)

func TestSecrets(t *testing.T) {
	accounts := []Account{
		{TrustedAccountID: "ta-dom", DomainID: "d", WorkspaceID: "*", SecretSchemaID: "key", TrustedSecretID: "s-dom"},
		{TrustedAccountID: "ta-w1", DomainID: "d", WorkspaceID: "w1", SecretSchemaID: "role", TrustedSecretID: "s-w1"},
		{TrustedAccountID: "ta-w2", DomainID: "d", WorkspaceID: "w2", SecretSchemaID: "key", TrustedSecretID: "s-w2"},
		{TrustedAccountID: "ta-other", DomainID: "e", WorkspaceID: "*", SecretSchemaID: "key", TrustedSecretID: "s-other"},
		{TrustedAccountID: "ta-nosecret", DomainID: "d", WorkspaceID: "*", SecretSchemaID: "key"},
	}
	dom := Collector{DomainID: "d", ResourceGroup: GroupDomain, WorkspaceID: "*"}
	ws1 := Collector{DomainID: "d", ResourceGroup: GroupWorkspace, WorkspaceID: "w1"}
	with := func(c Collector, f SecretFilter) *Collector { c.SecretFilter = f; return &c }
	for _, tt := range []struct {
		name     string
		c        *Collector
		secretID string
		want     string
	}{
		{"domain collector takes the domain's", &dom, "", "s-dom s-w1 s-w2"},
		{"workspace collector: its workspace and the domain-wide", &ws1, "", "s-dom s-w1"},
		{"secret_id narrows", &dom, "s-w2", "s-w2"},
		{"secret_id out of the workspace", &ws1, "s-w2", ""},
		{"another domain's secret", &dom, "s-other", ""},
		{"filter DISABLED is ignored", with(dom, SecretFilter{State: Disabled, Secrets: []string{"s-w1"}}), "", "s-dom s-w1 s-w2"},
		{"secrets in", with(dom, SecretFilter{State: Enabled, Secrets: []string{"s-w1", "s-w2"}}), "", "s-w1 s-w2"},
		{"service_accounts in", with(dom, SecretFilter{State: Enabled, ServiceAccounts: []string{"ta-dom"}}), "", "s-dom"},
		{"schemas in", with(dom, SecretFilter{State: Enabled, Schemas: []string{"key"}}), "", "s-dom s-w2"},
		{"exclude secrets", with(dom, SecretFilter{State: Enabled, ExcludeSecrets: []string{"s-dom"}}), "", "s-w1 s-w2"},
		{"exclude service accounts", with(dom, SecretFilter{State: Enabled, ExcludeServiceAccounts: []string{"ta-w1"}}), "", "s-dom s-w2"},
		{"exclude schemas", with(dom, SecretFilter{State: Enabled, ExcludeSchemas: []string{"key"}}), "", "s-w1"},
		{"in and not in together", with(dom, SecretFilter{State: Enabled, Schemas: []string{"key"}, ExcludeSecrets: []string{"s-w2"}}), "", "s-dom"},
		{"filter and secret_id", with(dom, SecretFilter{State: Enabled, Schemas: []string{"key"}}), "s-w1", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, a := range Secrets(accounts, tt.c, tt.secretID) {
				got = append(got, a.TrustedSecretID)
			}
			if strings.Join(got, " ") != tt.want {
				t.Fatalf("got %v, want %q", got, tt.want)
			}
		})
	}
	if TaskWorkspace(accounts[0], &ws1) != "w1" || TaskWorkspace(accounts[0], &dom) != "*" || TaskWorkspace(accounts[1], &dom) != "w1" {
		t.Fatal("TaskWorkspace")
	}
}

func TestCheckSchedule(t *testing.T) {
	for _, tt := range []struct {
		in   *Schedule
		want string
		bad  bool
	}{
		{nil, "DISABLED []", false},
		{&Schedule{State: "ENABLED", Hours: []int{23, 0, 23}}, "ENABLED [0 23]", false},
		{&Schedule{Hours: []int{5}}, "DISABLED [5]", false},
		{&Schedule{Hours: []int{24}}, "", true},
		{&Schedule{Hours: []int{-1}}, "", true},
		{&Schedule{Hours: []int{1, 2, 3}}, "", true},
	} {
		got, err := CheckSchedule(tt.in)
		if (err != nil) != tt.bad {
			t.Fatalf("%+v: err %v", tt.in, err)
		}
		if !tt.bad {
			if s := fmt.Sprintf("%s %v", got.State, got.Hours); s != tt.want {
				t.Fatalf("%+v: got %q, want %q", tt.in, s, tt.want)
			}
		}
	}
}

func TestCheckKeys(t *testing.T) {
	for _, tt := range []struct {
		v   any
		bad bool
	}{
		{map[string]any{"a": map[string]any{"b": []any{map[string]any{"c": 1}}}}, false},
		{map[string]any{"$a": 1}, true},
		{map[string]any{"a.b": 1}, true},
		{map[string]any{"": 1}, true},
		{map[string]any{"a": []any{map[string]any{"x.y": 1}}}, true},
	} {
		if err := CheckKeys("f", tt.v); (err != nil) != tt.bad {
			t.Fatalf("%v: %v", tt.v, err)
		}
	}
	if HashKey("k", "a", "bc") == HashKey("k", "ab", "c") {
		t.Fatal("HashKey must separate its parts")
	}
}
