package server

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"
)

type loggerKey struct{}

// requestLog is a request's logger, built on first use: most requests
// log nothing, and With on a real handler formats its attributes at once.
type requestLog struct {
	base      *slog.Logger
	id, route string
	once      sync.Once
	log       *slog.Logger
}

func (r *requestLog) logger() *slog.Logger {
	r.once.Do(func() { r.log = r.base.With("request_id", r.id, "route", r.route) })
	return r.log
}

// Logger returns the request's logger (with its request id), or the default.
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*requestLog); ok {
		return l.logger()
	}
	return slog.Default()
}

// requestContext gives each request an id (kept from X-Request-Id when the
// caller sent a sane one) and a logger carrying it and the route: the
// route as declared, never the path, which may carry a secret (a
// webhook's ingest URL holds its access key).
func (s *Server) requestContext(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		req := c.Request()
		id := req.Header.Get(echo.HeaderXRequestID)
		if id == "" || len(id) > 64 {
			id = newRequestID()
		}
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		route := c.Path()
		if route == "" {
			route = "(unrouted)"
		}
		log := &requestLog{base: s.log, id: id, route: route}
		c.SetRequest(req.WithContext(context.WithValue(req.Context(), loggerKey{}, log)))
		return next(c)
	}
}

// newRequestID is 16 hex digits. An id only tells requests apart in the
// logs, so the runtime's generator does (no read of the system's).
func newRequestID() string {
	var b [16]byte
	const digits = "0123456789abcdef"
	for i, v := 0, rand.Uint64(); i < len(b); i, v = i+1, v>>4 {
		b[i] = digits[v&0xf]
	}
	return string(b[:])
}

type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nubes_requests_total", Help: "Requests per operation and HTTP status.",
		}, []string{"operation", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "nubes_request_duration_seconds", Help: "Request latency per operation.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"operation"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

func (m *metrics) observe(op string, status int, d time.Duration) {
	m.requests.WithLabelValues(op, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(op).Observe(d.Seconds())
}

// routeMetrics are one operation's series: the 200 count and the latency
// looked up once, on first use (so /metrics lists only what was served),
// rather than hashed from their labels on every request.
type routeMetrics struct {
	m   *metrics
	op  string
	ok  func() prometheus.Counter
	dur func() prometheus.Observer
}

func (m *metrics) route(op string) *routeMetrics {
	return &routeMetrics{m: m, op: op,
		ok:  sync.OnceValue(func() prometheus.Counter { return m.requests.WithLabelValues(op, "200") }),
		dur: sync.OnceValue(func() prometheus.Observer { return m.duration.WithLabelValues(op) }),
	}
}

func (r *routeMetrics) observe(status int, d time.Duration) {
	if status == http.StatusOK {
		r.ok().Inc()
	} else {
		r.m.requests.WithLabelValues(r.op, strconv.Itoa(status)).Inc()
	}
	r.dur().Observe(d.Seconds())
}
