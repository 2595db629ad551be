package pluginref

import (
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
)

// Request is the plugin_info of a create request, as every kind takes it:
// the plugin, the version and options asked, and the metadata clients
// echo back. A kind's request type embeds it and adds its upgrade_mode
// (the kinds differ on which modes they take: NONE is not every kind's)
// and what else the kind takes (secret data and the schema of its form):
//
//	pluginInfo struct {
//		pluginref.Request
//		UpgradeMode string `json:"upgrade_mode" v:"enum=AUTO|MANUAL|NONE"`
//	}
//
// Embedded without a json name, its members are the kind's own members on
// the wire (pkg/api and pkg/strictjson promote them as encoding/json does).
type Request struct {
	PluginID string       `json:"plugin_id" v:"required,max=255"`
	Version  string       `json:"version" v:"max=255"`
	Options  freeform.Map `json:"options"`
	// Metadata is echoed back by clients; the plugin's init decides it,
	// so what is sent is accepted and not kept.
	Metadata freeform.Map `json:"metadata"`
}

// Ask is what the request asks of New, with the kind's upgrade mode.
func (r Request) Ask(upgradeMode string) Ask {
	return Ask{Version: r.Version, Options: r.Options, UpgradeMode: upgradeMode}
}

// Check is the rule every kind's create keeps: a MANUAL plugin names its
// version (400 plugin_info.version otherwise).
func (r Request) Check(upgradeMode string) error {
	if upgradeMode == Manual && r.Version == "" {
		return errs.Required("plugin_info.version")
	}
	return nil
}

// Update is the plugin part of an update-plugin request: the version and
// options asked (options replace the kept ones whole). A kind's request
// embeds it beside the resource's id and, where the kind lets an update
// change it, its upgrade_mode:
//
//	updatePlugin struct {
//		WebhookID string `json:"webhook_id" v:"required"`
//		pluginref.Update
//		UpgradeMode string `json:"upgrade_mode" v:"enum=AUTO|MANUAL|NONE"`
//	}
//
// The handling is Repository.Change: load the resource the caller may
// change, Change its Info with u.Ask(mode) and the kind's Init, store the
// Info answered.
type Update struct {
	Version string       `json:"version" v:"max=255"`
	Options freeform.Map `json:"options"`
}

// Ask is what the update asks of Change, with the kind's upgrade mode
// ("" keeps the one kept).
func (u Update) Ask(upgradeMode string) Ask {
	return Ask{Version: u.Version, Options: u.Options, UpgradeMode: upgradeMode}
}
