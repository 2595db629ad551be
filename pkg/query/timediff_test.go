package query

import (
	"testing"
	"time"
)

func TestTimediff(t *testing.T) {
	wed := time.Date(2024, 5, 15, 13, 45, 10, 0, time.UTC) // a Wednesday
	day := func(y int, m time.Month, d, h, min, s int) time.Time {
		return time.Date(y, m, d, h, min, s, 0, time.UTC)
	}
	cases := []struct {
		expr string
		now  time.Time // zero: wed
		want time.Time
	}{
		{"now", time.Time{}, wed},
		{"now/d", time.Time{}, day(2024, 5, 15, 0, 0, 0)},
		{"now/w", time.Time{}, day(2024, 5, 13, 0, 0, 0)},
		{"now/m", time.Time{}, day(2024, 5, 1, 0, 0, 0)},
		{"now/d - 7d", time.Time{}, day(2024, 5, 8, 0, 0, 0)},
		{"now/d-7d", time.Time{}, day(2024, 5, 8, 0, 0, 0)},
		{"now+1h", time.Time{}, day(2024, 5, 15, 14, 45, 10)},
		{"now - 30m", time.Time{}, day(2024, 5, 15, 13, 15, 10)},
		{"now-10s", time.Time{}, day(2024, 5, 15, 13, 45, 0)},
		{"now + 2w", time.Time{}, day(2024, 5, 29, 13, 45, 10)},
		{"now/m-1w", time.Time{}, day(2024, 4, 24, 0, 0, 0)},
		{"now/w +2d", time.Time{}, day(2024, 5, 15, 0, 0, 0)},
		{"  now/d  ", time.Time{}, day(2024, 5, 15, 0, 0, 0)},
		{"now  -  1d", time.Time{}, day(2024, 5, 14, 13, 45, 10)},
		{"now-0d", time.Time{}, wed},
		{"now/m - 1d", time.Time{}, day(2024, 4, 30, 0, 0, 0)},
		// week edges: Sunday belongs to the week of the Monday before it
		{"now/w", day(2024, 5, 19, 23, 59, 59), day(2024, 5, 13, 0, 0, 0)},
		{"now/w", day(2024, 5, 13, 0, 0, 0), day(2024, 5, 13, 0, 0, 0)},
		{"now/w", day(2024, 3, 2, 10, 0, 0), day(2024, 2, 26, 0, 0, 0)},
		// times are UTC whatever the zone of now
		{"now/d", time.Date(2024, 5, 16, 1, 0, 0, 0, time.FixedZone("KST", 9*3600)), day(2024, 5, 15, 0, 0, 0)},
		{"now/m", time.Date(2024, 6, 1, 5, 0, 0, 0, time.FixedZone("KST", 9*3600)), day(2024, 5, 1, 0, 0, 0)},
	}
	for _, c := range cases {
		t.Run(c.expr, func(t *testing.T) {
			now := c.now
			if now.IsZero() {
				now = wed
			}
			got, err := Timediff(c.expr, now)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equal(c.want) || got.Location() != time.UTC {
				t.Fatalf("Timediff(%q, %v) = %v, want %v", c.expr, now, got, c.want)
			}
		})
	}
}

func TestTimediffErrors(t *testing.T) {
	wed := time.Date(2024, 5, 15, 13, 45, 10, 0, time.UTC)
	for _, expr := range []string{
		"", "today", "NOW", "now/y", "now/", "now/dd", "now-1y", "now-1M", "now - 7", "now 7d", "now-d",
		"now/d -", "now--1d", "now+-1d", "now-1.5d", "now-1d-1h", "now - 7 d x", "7d", "-7d",
		"now-99999999999999999999d", // does not fit an int64
		"now-999999999w",            // fits, but the duration would wrap around
	} {
		t.Run(expr, func(t *testing.T) {
			if got, err := Timediff(expr, wed); err == nil {
				t.Fatalf("Timediff(%q) = %v, want an error", expr, got)
			}
		})
	}
}
