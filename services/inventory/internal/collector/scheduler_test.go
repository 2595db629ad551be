package collector

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/inventory/internal/core"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestFire: a collector fires at each of its hours once, whatever the
// number of replicas and ticks.
func TestFire(t *testing.T) {
	t.Parallel()
	db := testkit.Get().Database(t)
	ctx := context.Background()
	docs := []any{
		core.Collector{ID: "collector-on", CollectorID: "collector-on", DomainID: "d", Schedule: core.Schedule{State: core.Enabled, Hours: []int{3, 15}}},
		core.Collector{ID: "collector-off", CollectorID: "collector-off", DomainID: "d", Schedule: core.Schedule{State: core.Disabled, Hours: []int{3}}},
		core.Collector{ID: "collector-other", CollectorID: "collector-other", DomainID: "d", Schedule: core.Schedule{State: core.Enabled, Hours: []int{4}}},
	}
	if _, err := db.Collection(core.CollectorsCollection).InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	fired := map[string]int{}
	collect := func(_ context.Context, c *core.Collector) error {
		mu.Lock()
		fired[c.CollectorID]++
		mu.Unlock()
		return nil
	}
	clock := time.Date(2026, 5, 1, 3, 10, 0, 0, time.UTC)
	var replicas []*Scheduler
	for range 3 {
		s := NewScheduler(db, collect, time.Hour, func() time.Time { return clock }, slog.New(slog.DiscardHandler))
		replicas = append(replicas, s)
	}
	fireAll := func() {
		var wg sync.WaitGroup
		for _, s := range replicas {
			for range 2 { // several ticks per replica in the same hour
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := s.Fire(ctx); err != nil {
						t.Error(err)
					}
				}()
			}
		}
		wg.Wait()
	}
	fireAll()
	if fired["collector-on"] != 1 || fired["collector-off"] != 0 || fired["collector-other"] != 0 {
		t.Fatalf("03:10: %v", fired)
	}
	clock = clock.Add(50 * time.Minute) // 04:00
	fireAll()
	if fired["collector-on"] != 1 || fired["collector-other"] != 1 {
		t.Fatalf("04:00: %v", fired)
	}
	clock = time.Date(2026, 5, 1, 15, 0, 1, 0, time.UTC)
	fireAll()
	clock = clock.Add(24 * time.Hour) // the next day, same hour
	fireAll()
	if fired["collector-on"] != 3 {
		t.Fatalf("15:00 twice: %v", fired)
	}
}
