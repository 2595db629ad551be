// Package server turns declared operations into a running HTTP service:
// echo routing of versioned paths and their aliases, authentication,
// request ids, slog logging, Prometheus metrics, the 1 MiB body limit, the
// one error handler, /healthz, /readyz, /metrics, /openapi.json, the
// console's operation list (api.ReflectionPath), and a
// graceful shutdown that fails readiness first and finishes in-flight
// requests.
//
// It holds no business rule and no storage code.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nubes-io/nubes/pkg/api"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
)

// MaxBody is the largest request body accepted.
const MaxBody = 1 << 20

// The default connection timeouts (Options). The write timeout leaves
// room for the slowest synchronous operation (a plugin call, a merged
// list from every service) and is the same as the chart's Ingress read
// timeout.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
)

// Options configure a Server.
type Options struct {
	Name            string             // service name, for logs and the OpenAPI title
	Logger          *slog.Logger       // default slog.Default()
	Auth            auth.Authenticator // verifies bearer credentials
	Ready           func(context.Context) error
	DrainDelay      time.Duration // readiness fails this long before the listener closes
	ShutdownTimeout time.Duration // in-flight requests get this long to finish (default 20s)
	// Timeouts of the connection (zero: the Default* below). No response
	// streams, so one write timeout bounds every answer; a slow client
	// cannot hold a connection open by sending or reading slowly.
	ReadHeaderTimeout time.Duration // the request line and headers
	ReadTimeout       time.Duration // the whole request, body included
	WriteTimeout      time.Duration // from the end of the headers to the end of the answer
	IdleTimeout       time.Duration // a kept-alive connection between requests
	// OpenAPI, when set, replaces the document built from the routes (the
	// devstack serves the merged document of every service).
	OpenAPI map[string]any
	// Documents are JSON documents served by GET at their path, such as
	// identity's /.well-known/jwks.json.
	Documents map[string][]byte
	// Reflection, when set, answers GET api.ReflectionPath with the whole
	// suite's list (SuiteReflection); unset, the server lists its own
	// routes. ?local=1 always gets the server's own.
	Reflection func(ctx context.Context) (api.Reflection, error)
	// Raw are routes outside the operation contract (see Raw).
	Raw []Raw
}

// Raw is a route outside the operation contract: a path with parameters
// and its own authentication, such as a webhook's ingest URL. The server
// gives it request ids, logging, metrics and the error body of a returned
// error; the handler does the rest (body limit, decoding, access). Path is
// in echo syntax (/x/:id/events); the handler reads a parameter with
// r.PathValue(name).
type Raw struct {
	Method string
	Path   string
	Handle func(w http.ResponseWriter, r *http.Request) error
}

// Server is one HTTP service built from routes.
type Server struct {
	opts     Options
	echo     *echo.Echo
	log      *slog.Logger
	metrics  *metrics
	registry *prometheus.Registry
	stopping atomic.Bool
	aliases  map[string]string
	routes   []api.Route
}

// New builds the server. It fails when two routes claim the same path.
func New(opts Options, routes ...api.Route) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = 20 * time.Second
	}
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&opts.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {&opts.ReadTimeout, DefaultReadTimeout},
		{&opts.WriteTimeout, DefaultWriteTimeout}, {&opts.IdleTimeout, DefaultIdleTimeout}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if opts.Ready == nil {
		opts.Ready = func(context.Context) error { return nil }
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s := &Server{opts: opts, log: opts.Logger, registry: reg, metrics: newMetrics(reg), routes: routes}

	// The caller's address (auth.SourceFromContext) is the peer's, or the
	// X-Forwarded-For entry a proxy on a private network (the Ingress)
	// appended; entries a caller wrote itself are not believed.
	e := echo.NewWithConfig(echo.Config{Logger: opts.Logger, HTTPErrorHandler: s.handleError, IPExtractor: echo.ExtractIPFromXFFHeader()})
	e.Use(s.requestContext)
	e.GET("/healthz", func(c *echo.Context) error { return c.JSON(http.StatusOK, map[string]string{"status": "ok"}) })
	e.GET("/readyz", s.ready)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))

	paths := map[string]bool{}
	for _, r := range routes {
		p := r.Meta().Path
		if paths[p] {
			return nil, fmt.Errorf("path %s declared twice", p)
		}
		paths[p] = true
		e.POST(p, s.handler(r, p))
	}
	s.aliases = Aliases(routes)
	byPath := map[string]api.Route{}
	for _, r := range routes {
		byPath[r.Meta().Path] = r
	}
	for alias, target := range s.aliases {
		if paths[alias] {
			continue
		}
		e.POST(alias, s.handler(byPath[target], target))
	}
	for _, rr := range opts.Raw {
		e.Add(rr.Method, rr.Path, s.raw(rr))
	}
	doc := opts.OpenAPI
	if doc == nil {
		doc = s.OpenAPI()
	}
	docJSON, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	e.GET("/openapi.json", func(c *echo.Context) error { return c.JSONBlob(http.StatusOK, docJSON) })
	e.GET(api.ReflectionPath, s.serveReflection(api.Reflect(routes)))
	for path, body := range opts.Documents {
		e.GET(path, func(c *echo.Context) error { return c.JSONBlob(http.StatusOK, body) })
	}
	s.echo = e
	return s, nil
}

// Aliases maps each unversioned path to the newest versioned path it
// stands for: /identity/user/create -> /identity/v2/user/create.
func Aliases(routes []api.Route) map[string]string {
	out := map[string]string{}
	for _, r := range routes {
		p := r.Meta().Path
		a := api.Alias(p)
		if a == "" {
			continue
		}
		if cur, ok := out[a]; !ok || api.Version(p) > api.Version(cur) {
			out[a] = p
		}
	}
	return out
}

// OpenAPI is the document of this server's routes.
func (s *Server) OpenAPI() map[string]any {
	return api.OpenAPI("Nubes "+s.opts.Name, s.routes, s.aliases)
}

// Handler is the root HTTP handler (tests drive it with httptest).
func (s *Server) Handler() http.Handler { return s.echo }

// Run serves on ln until ctx is done, then shuts down gracefully: readiness
// fails, the drain delay passes, in-flight requests finish.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.echo,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	s.log.Info("serving", "service", s.opts.Name, "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.stopping.Store(true)
	s.log.Info("shutting down", "drain_delay", s.opts.DrainDelay.String())
	time.Sleep(s.opts.DrainDelay)
	sctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (s *Server) ready(c *echo.Context) error {
	if s.stopping.Load() {
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "stopping"})
	}
	if err := s.opts.Ready(c.Request().Context()); err != nil {
		s.log.Warn("not ready", "error", err.Error())
		return c.JSON(http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

// handler runs one route: body limit, authentication, authorization,
// decoding and the business rule. label is the canonical path.
func (s *Server) handler(r api.Route, label string) echo.HandlerFunc {
	m := s.metrics.route(label)
	return func(c *echo.Context) error {
		start := time.Now()
		err := s.serve(c, r)
		code := http.StatusOK
		if err != nil {
			code = s.status(err)
		}
		m.observe(code, time.Since(start))
		return err
	}
}

// raw runs a Raw route with its path parameters set on the request.
func (s *Server) raw(rr Raw) echo.HandlerFunc {
	return func(c *echo.Context) error {
		start := time.Now()
		req := c.Request()
		for _, pv := range c.PathValues() {
			req.SetPathValue(pv.Name, pv.Value)
		}
		// Public URLs limit their failures per caller (auth.SourceFromContext).
		req = req.WithContext(auth.WithSource(req.Context(), c.RealIP()))
		err := rr.Handle(c.Response(), req)
		code := http.StatusOK
		if err != nil {
			code = s.status(err)
		}
		s.metrics.observe(rr.Path, code, time.Since(start))
		return err
	}
}

func (s *Server) serve(c *echo.Context, r api.Route) error {
	req := c.Request()
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return errs.New(errs.RequestTooLarge, "The request body is larger than %d bytes.", MaxBody)
		}
		return errs.New(errs.JSONFormat, "The request body could not be read.")
	}
	bearer, _ := bearerToken(req)
	resp, _, err := s.Invoke(req.Context(), r, bearer, c.RealIP(), body)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, resp)
}

// Invoke runs route r for one caller whatever the transport: bearer (""
// for none) authenticates, the access rule and the token's scope
// authorise, body is decoded and validated, and the handler runs. HTTP
// and gRPC (pkg/grpcapi) both call it, so an operation keeps one set of
// rules. It returns the caller it authenticated, if any. The handler gets
// the caller as its argument; it is not put on ctx (auth.FromContext).
func (s *Server) Invoke(ctx context.Context, r api.Route, bearer, source string, body []byte) (any, *auth.Principal, error) {
	ctx = auth.WithSource(ctx, source)
	access := r.Meta().Access
	var p *auth.Principal
	if bearer != "" {
		var err error
		p, err = s.opts.Auth.Authenticate(ctx, bearer)
		if err != nil && !access.IsPublic() {
			return nil, nil, err
		}
		// A public operation sees the credential even when it is not one
		// that authenticates: token/grant takes a refresh token there.
		ctx = auth.WithBearer(ctx, bearer)
	}
	if err := access.Check(p); err != nil {
		return nil, p, err
	}
	if !p.Allows(r.Meta().Path) {
		return nil, p, errs.Forbidden()
	}
	resp, err := r.Serve(ctx, p, body)
	return resp, p, err
}

// Observe counts one call of the operation at path in the server's
// metrics, with the HTTP status its answer has (a gRPC call its error's).
func (s *Server) Observe(path string, status int, d time.Duration) {
	s.metrics.observe(path, status, d)
}

// Status is the HTTP status an error is answered with (500 for one that
// is not an *errs.Error).
func Status(err error) int {
	if e, ok := errs.As(err); ok {
		return e.Status()
	}
	return http.StatusInternalServerError
}

// Routes are the server's operations, as declared.
func (s *Server) Routes() []api.Route { return s.routes }

// Stopping reports that the server is shutting down (readiness fails).
func (s *Server) Stopping() bool { return s.stopping.Load() }

// Ready reports whether the server's dependencies answer.
func (s *Server) Ready(ctx context.Context) error {
	if s.stopping.Load() {
		return errors.New("stopping")
	}
	return s.opts.Ready(ctx)
}

// Log is the server's logger.
func (s *Server) Log() *slog.Logger { return s.log }

func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && (h[:7] == "Bearer " || h[:7] == "bearer ") {
		return h[7:], true
	}
	return "", false
}

// status is the HTTP status an error will be answered with.
func (s *Server) status(err error) int {
	if e, ok := errs.As(err); ok {
		return e.Status()
	}
	var he echo.HTTPStatusCoder
	if errors.As(err, &he) && slices.Contains([]int{http.StatusNotFound, http.StatusMethodNotAllowed}, he.StatusCode()) {
		return he.StatusCode()
	}
	return http.StatusInternalServerError
}

// handleError writes {"detail": {"code", "message"}} and logs the error
// once, with the request id. A 5xx never shows its cause to the client.
func (s *Server) handleError(c *echo.Context, err error) {
	if r, _ := echo.UnwrapResponse(c.Response()); r != nil && r.Committed {
		return
	}
	status := s.status(err)
	e, ok := errs.As(err)
	logged := ""
	switch {
	case ok:
	case status == http.StatusNotFound:
		e = errs.New(errs.UnsupportedAPI, "Call Unsupported API. (reason = method: %s, path: %s)", c.Request().Method, c.Request().URL.Path)
		logged = "Call Unsupported API." // the path may carry a secret: the caller sees it, the log does not
	case status == http.StatusMethodNotAllowed:
		e = &errs.Error{Code: errs.UnsupportedAPI, Message: "Only POST is supported."}
	default:
		e = errs.New(errs.Unknown, "Internal error. (request_id = %s)", c.Response().Header().Get(echo.HeaderXRequestID))
	}
	log := Logger(c.Request().Context())
	if status >= 500 && status != http.StatusNotImplemented {
		log.Error("request failed", "status", status, "code", e.Code, "error", err.Error())
	} else {
		if logged == "" {
			logged = e.Message
		}
		log.Info("request refused", "status", status, "code", e.Code, "message", logged)
	}
	body := map[string]any{"detail": map[string]string{"code": e.Code, "message": e.Message}}
	if werr := c.JSON(status, body); werr != nil {
		log.Warn("error response not sent", "error", werr.Error())
	}
}
