package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"
)

type loggerKey struct{}

// Logger returns the request's logger (with its request id), or the default.
func Logger(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return l
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
			var b [8]byte
			_, _ = rand.Read(b[:])
			id = hex.EncodeToString(b[:])
		}
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		route := c.Path()
		if route == "" {
			route = "(unrouted)"
		}
		log := s.log.With("request_id", id, "route", route)
		c.SetRequest(req.WithContext(context.WithValue(req.Context(), loggerKey{}, log)))
		return next(c)
	}
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
