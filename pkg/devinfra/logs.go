package devinfra

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// Quiet returns log limited to records at min or above. The embedded
// servers log every wire message and connection at debug and info; the
// devstack shows their warnings and errors only unless asked for more.
func Quiet(log *slog.Logger, min slog.Level) *slog.Logger {
	if log == nil {
		return nil
	}
	return slog.New(&minLevel{h: log.Handler(), min: min})
}

type minLevel struct {
	h   slog.Handler
	min slog.Level
}

func (m *minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.h.Enabled(ctx, l)
}
func (m *minLevel) Handle(ctx context.Context, r slog.Record) error { return m.h.Handle(ctx, r) }
func (m *minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return &minLevel{h: m.h.WithAttrs(a), min: m.min}
}
func (m *minLevel) WithGroup(g string) slog.Handler {
	return &minLevel{h: m.h.WithGroup(g), min: m.min}
}

// natsLog adapts slog to the NATS server's logger.
type natsLog struct{ l *slog.Logger }

var _ natsserver.Logger = natsLog{}

func (n natsLog) Noticef(f string, v ...any) { n.l.Info(fmt.Sprintf(f, v...)) }
func (n natsLog) Warnf(f string, v ...any)   { n.l.Warn(fmt.Sprintf(f, v...)) }
func (n natsLog) Fatalf(f string, v ...any)  { n.l.Error(fmt.Sprintf(f, v...)) }
func (n natsLog) Errorf(f string, v ...any)  { n.l.Error(fmt.Sprintf(f, v...)) }
func (n natsLog) Debugf(f string, v ...any)  { n.l.Debug(fmt.Sprintf(f, v...)) }
func (n natsLog) Tracef(f string, v ...any)  { n.l.Debug(fmt.Sprintf(f, v...)) }

// wireDumps are the messages FerretDB starts its dumps of wire-protocol
// traffic with. It logs the dump of every error response at warn
// (NamespaceNotFound on a first start among them); they are debug output.
var wireDumps = []string{"Request header", "Request message", "Response header", "Response message", "Proxy response", "Header diff"}

// demoteWireDumps logs FerretDB's wire dumps at debug, whatever level
// FerretDB gave them.
type demoteWireDumps struct{ h slog.Handler }

func (d demoteWireDumps) Enabled(ctx context.Context, l slog.Level) bool { return d.h.Enabled(ctx, l) }
func (d demoteWireDumps) Handle(ctx context.Context, r slog.Record) error {
	if r.Level > slog.LevelDebug && slices.ContainsFunc(wireDumps, func(p string) bool { return strings.HasPrefix(r.Message, p) }) {
		if !d.h.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return d.h.Handle(ctx, r)
}
func (d demoteWireDumps) WithAttrs(a []slog.Attr) slog.Handler {
	return demoteWireDumps{d.h.WithAttrs(a)}
}
func (d demoteWireDumps) WithGroup(g string) slog.Handler { return demoteWireDumps{d.h.WithGroup(g)} }
