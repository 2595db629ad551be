package provider

import (
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/services/identity/internal/managed"
)

// ManagedVersion is the version of the shipped providers: a change of
// any of them bumps it, and the next sync of each domain replaces them.
const ManagedVersion = "1.0"

const assets = "https://spaceone-custom-assets.s3.ap-northeast-2.amazonaws.com/console-assets/icons/"

// shipped are the providers upstream ships (identity's managed_resource),
// the facts of docs: provider, name, alias, colour, order, options and
// the account collector plugin of auto sync.
var shipped = []struct {
	provider, name, alias, color, icon, plugin string
	order                                      int
}{
	{"aws", "AWS", "", "#FF9900", assets + "aws.svg", "plugin-aws-identity-account-collector", 1},
	{"azure", "Azure", "", "#00BCF2", assets + "azure.svg", "plugin-azure-identity-account-collector", 2},
	{"google_cloud", "Google Cloud", "Google", "#4285F4", assets + "google_cloud.svg", "plugin-google-cloud-account-collector", 3},
	{"kubernetes", "Kubernetes", "", "#326CE5", assets + "cloud-services/kubernetes/kubernetes.svg", "", 4},
}

// Shipped are the managed providers' names.
func Shipped() []string {
	out := make([]string, len(shipped))
	for i, s := range shipped {
		out[i] = s.provider
	}
	return out
}

func records(domainID string) []managed.Record {
	out := make([]managed.Record, 0, len(shipped))
	for _, s := range shipped {
		options, plugin := freeform.Map{}, freeform.Map{}
		if s.plugin != "" {
			options = freeform.Map{"support_trusted_account": true, "support_auto_sync": true}
			plugin = freeform.Map{"plugin_id": s.plugin, "version": "", "upgrade_mode": "AUTO", "options": map[string]any{}, "metadata": map[string]any{}}
		}
		out = append(out, managed.Record{ID: Key(domainID, s.provider), Version: ManagedVersion, Doc: bson.M{
			"provider": s.provider, "name": s.name, "alias": s.alias, "color": s.color, "icon": s.icon, "order": s.order,
			"options": options, "plugin_info": plugin, "tags": freeform.Flat{}, "is_managed": true, "domain_id": domainID,
		}})
	}
	return out
}
