// Package pluginref is how a service sets up the repository plugin that
// one of its own resources runs on (a webhook, a collector, a notification
// protocol, a cost data source). It looks the plugin up in the repository
// service (plugin/get over pkg/call, on the caller's behalf) and checks
// its resource_type. It picks a version from get-versions under the
// upgrade_mode rules and initialises the plugin. The outcome is the
// plugin_info kept with the resource (Info).
//
// It knows no service's records and dials no plugin: the caller passes
// its kind's init (pkg/plugin). Rules that belong to one service stay in
// that service: which provider, which secret schemas, whether a DISABLED
// plugin may be used, where secret data goes.
package pluginref

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"github.com/nubes-io/nubes/pkg/call"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Repository paths called.
const (
	GetPath      = "/repository/v1/plugin/get"
	VersionsPath = "/repository/v1/plugin/get-versions"
)

// Upgrade modes: AUTO follows the newest version on update_plugin, MANUAL
// keeps the one named, NONE (where a kind allows it) is never moved.
const (
	Auto   = "AUTO"
	Manual = "MANUAL"
	None   = "NONE"
)

// Info is the plugin_info kept with a resource: which plugin and version,
// its options, the metadata its init answered and the upgrade mode. A kind
// that keeps more (a secret's id) embeds it with `bson:",inline"`.
type Info struct {
	PluginID    string       `bson:"plugin_id" json:"plugin_id"`
	Version     string       `bson:"version" json:"version"`
	Options     freeform.Map `bson:"options" json:"options"`
	Metadata    freeform.Map `bson:"metadata" json:"metadata"`
	UpgradeMode string       `bson:"upgrade_mode" json:"upgrade_mode"`
}

// Plugin is what the services need of the repository's PluginInfo.
type Plugin struct {
	PluginID     string         `json:"plugin_id"`
	Name         string         `json:"name"`
	State        string         `json:"state"`
	ResourceType string         `json:"resource_type"`
	Provider     string         `json:"provider"`
	Capability   map[string]any `json:"capability"`
}

// Kind is one resource_type of plugin.
type Kind struct {
	// ResourceType is the repository's resource_type, e.g. monitoring.Webhook.
	ResourceType string
	// Name says what a resource of the kind is in messages, e.g. "webhook".
	Name string
}

// NotFound is the 404 of a plugin that is not of the kind (or not known).
func (k Kind) NotFound(pluginID string) error {
	return errs.New(errs.NotFoundCode, "No %s plugin (resource_type %s) found. (plugin_id = %s)", k.Name, k.ResourceType, pluginID)
}

// Repository looks up plugins of one kind in the repository service.
type Repository struct {
	Client *call.Client
	Kind   Kind
	// Strict: a version asked for must be one get-versions lists (400
	// otherwise). Not strict: a version asked for is kept as given.
	// Either way, when the repository cannot say (its answer is a 5xx:
	// the image's registry is out of reach, as offline), the request goes
	// on with the version asked, or the one kept, or none, and the gap is
	// logged: the endpoint map then serves the plugin by its id alone. A
	// 4xx of get-versions (no such image) fails a strict request.
	Strict bool
	// Log takes the warning of a get-versions that could not answer.
	Log *slog.Logger
}

// Get returns the plugin when it is of the kind: another kind of plugin
// is 404, as an unknown one is; the repository's own errors pass through.
func (r Repository) Get(ctx context.Context, pluginID string) (*Plugin, error) {
	var p Plugin
	if err := r.Client.Call(ctx, GetPath, map[string]string{"plugin_id": pluginID}, &p); err != nil {
		return nil, err
	}
	if p.PluginID != pluginID || p.ResourceType != r.Kind.ResourceType {
		return nil, r.Kind.NotFound(pluginID)
	}
	return &p, nil
}

// Versions are the plugin's versions, newest first.
func (r Repository) Versions(ctx context.Context, pluginID string) ([]string, error) {
	var v struct {
		Results []string `json:"results"`
	}
	if err := r.Client.Call(ctx, VersionsPath, map[string]string{"plugin_id": pluginID}, &v); err != nil {
		return nil, err
	}
	return v.Results, nil
}

// Latest is the newest version the repository lists, "" when it lists
// none or cannot say (logged unless the repository answered a 4xx).
func (r Repository) Latest(ctx context.Context, pluginID string) string {
	v, err := r.Versions(ctx, pluginID)
	if err != nil {
		if unanswered(err) {
			r.unknown(pluginID, "", err)
		}
		return ""
	}
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// Ask is what a request asks of a resource's plugin; an empty field (nil
// options) leaves it as it is.
type Ask struct {
	Version     string
	Options     map[string]any
	UpgradeMode string
}

// Init initialises the plugin as info names it (pkg/plugin's Init of the
// kind) and answers its metadata.
type Init func(ctx context.Context, info Info) (map[string]any, error)

// New is the plugin_info of a new resource on plugin pluginID: the
// upgrade mode asked (AUTO when none), the version asked or else the
// newest, the options asked and the metadata of init. versionKey names
// the version in a 400 (strict), e.g. plugin_info.version.
func (r Repository) New(ctx context.Context, pluginID string, ask Ask, versionKey string, init Init) (Info, error) {
	info := Info{PluginID: pluginID, Options: ask.Options, UpgradeMode: ask.UpgradeMode}
	if info.UpgradeMode == "" {
		info.UpgradeMode = Auto
	}
	if err := r.pick(ctx, &info, ask.Version, true, versionKey); err != nil {
		return Info{}, err
	}
	return info, r.init(ctx, &info, init)
}

// Change is info after an update_plugin: the upgrade mode and the
// options asked replace the kept ones; the version asked is set, or in
// AUTO mode the newest; MANUAL mode with no version at all is a 400; the
// plugin is initialised again and its metadata kept.
func (r Repository) Change(ctx context.Context, info Info, ask Ask, init Init) (Info, error) {
	if ask.UpgradeMode != "" {
		info.UpgradeMode = ask.UpgradeMode
	}
	if ask.Options != nil {
		info.Options = ask.Options
	}
	if ask.Version == "" && info.UpgradeMode == Manual && info.Version == "" {
		return Info{}, errs.Required("version")
	}
	if err := r.pick(ctx, &info, ask.Version, info.UpgradeMode == Auto, "version"); err != nil {
		return Info{}, err
	}
	return info, r.init(ctx, &info, init)
}

// unanswered reports a get-versions the repository could not answer (a
// 5xx: the registry out of reach, or the repository itself), as opposed
// to an answer (a 4xx: no such plugin or image).
func unanswered(err error) bool {
	var e *errs.Error
	return !errors.As(err, &e) || e.Status() >= 500
}

// unknown logs that the plugin's versions could not be listed and what
// the resource keeps instead.
func (r Repository) unknown(pluginID, kept string, err error) {
	if r.Log == nil {
		return
	}
	if kept == "" {
		r.Log.Warn("plugin versions not known; the "+r.Kind.Name+" keeps no version", "plugin_id", pluginID, "error", err.Error())
		return
	}
	r.Log.Warn("plugin versions not known; the "+r.Kind.Name+" keeps version "+kept+" unchecked", "plugin_id", pluginID, "version", kept, "error", err.Error())
}

// pick sets info's version: the one asked for (checked when strict and
// the repository can list versions), else the newest when newest says so
// and the repository lists one.
func (r Repository) pick(ctx context.Context, info *Info, asked string, newest bool, key string) error {
	if !r.Strict {
		switch {
		case asked != "":
			info.Version = asked
		case newest:
			if v := r.Latest(ctx, info.PluginID); v != "" {
				info.Version = v
			}
		}
		return nil
	}
	versions, err := r.Versions(ctx, info.PluginID)
	if err != nil && unanswered(err) {
		// Offline: go on as a kind that is not strict does (issue 18).
		if asked != "" {
			info.Version = asked
		}
		r.unknown(info.PluginID, info.Version, err)
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case asked != "":
		if !slices.Contains(versions, asked) {
			return errs.Invalid(key, "not a version of plugin "+info.PluginID+" in the repository")
		}
		info.Version = asked
	case newest && len(versions) > 0:
		info.Version = versions[0]
	}
	return nil
}

func (r Repository) init(ctx context.Context, info *Info, init Init) error {
	info.Options = wire.Object(info.Options)
	md, err := init(ctx, *info)
	if err != nil {
		return err
	}
	info.Metadata = wire.Object(md)
	return nil
}
