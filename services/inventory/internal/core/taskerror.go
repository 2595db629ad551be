package core

import (
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/plugin"
)

// Permanent reports an error that trying again does not fix: one the
// callee answered with a 4xx (an account deleted, a plugin that refuses).
func Permanent(err error) bool {
	e, ok := errs.As(err)
	return ok && e.Status() < 500
}

// TaskError is the job task error of a failed call: the plugin's own
// failure, or the error's code and message; code, when given, wins.
func TaskError(code string, err error) ErrorInfo {
	msg := err.Error()
	if f, ok := plugin.FailureOf(err); ok {
		msg = f.Error()
	} else if e, ok := errs.As(err); ok {
		if code == "" {
			code = e.Code
		}
		msg = e.Message
	}
	if code == "" {
		code = errs.Unknown
	}
	return ErrorInfo{ErrorCode: code, Message: msg, Additional: map[string]any{}}
}

// CollectorPlugin is the plugin a collector collects with.
func CollectorPlugin(plugins *plugin.Client, c *Collector) plugin.Collector {
	return plugin.Collector{Target: plugins.Plugin(c.PluginInfo.PluginID, c.PluginInfo.Version)}
}
