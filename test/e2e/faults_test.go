package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// TestReplicasAgree: two replicas of board behind the round-robin share one
// store, so what one wrote the other reads, counts and aggregates the same.
func TestReplicasAgree(t *testing.T) {
	r1, r2 := st.first(t, "board"), st.extraReplica(t, "board")
	rr := newRoundRobin(t, r1, r2)
	sys := systemCaller(t, rr)
	admin := domainAdmin(t, rr, "domain-"+randHex(6))

	var b boardInfo
	sys.call("/board/v1/board/create", map[string]any{"name": "Scale", "categories": []string{"a", "b"}}).OK(&b)
	var ids []string
	for i := range 20 {
		var p postInfo
		admin.call("/board/v1/post/create", newPost(b.BoardID, fmt.Sprintf("post %02d", i), []string{"a", "b"}[i%2])).OK(&p)
		ids = append(ids, p.PostID)
	}
	for _, be := range rr.backends {
		if be.served.Load() < 5 {
			t.Fatalf("round-robin did not spread the writes: %s", rr)
		}
	}
	slices.Sort(ids)

	stat := map[string]any{"query": map[string]any{"aggregate": []any{
		map[string]any{"group": map[string]any{"keys": []any{map[string]any{"key": "category", "name": "c"}},
			"fields": []any{map[string]any{"name": "n", "operator": "count"}}}},
		map[string]any{"sort": []any{map[string]any{"key": "c"}}},
	}}}
	var stats []any
	for _, r := range []*replica{r1, r2} {
		one := admin.with(direct(r.url))
		var l postList
		one.call("/board/v1/post/list", map[string]any{"board_id": b.BoardID, "query": map[string]any{"page": map[string]any{"limit": 100}}}).OK(&l)
		var got []string
		for _, p := range l.Results {
			got = append(got, p.PostID)
		}
		slices.Sort(got)
		if l.TotalCount != 20 || !slices.Equal(got, ids) {
			t.Fatalf("%s lists %d posts (%d rows), want the 20 written", r.name, l.TotalCount, len(got))
		}
		stats = append(stats, one.call("/board/v1/post/stat", stat).JSON())
	}
	if !jsonEqual(stats[0], stats[1]) {
		t.Fatalf("replicas disagree on stat: %v vs %v", stats[0], stats[1])
	}
	// Each get counts its view by one atomic $inc before it answers, so
	// every replica reads the same total; no view is lost whoever served it.
	for i, to := range []target{direct(r1.url), direct(r2.url), rr, rr} {
		var p postInfo
		admin.with(to).call("/board/v1/post/get", map[string]any{"post_id": ids[0]}).OK(&p)
		if p.ViewCount != i+1 {
			t.Fatalf("view %d reads view_count %d", i+1, p.ViewCount)
		}
	}
	for _, r := range []*replica{r1, r2} {
		one := admin.with(direct(r.url))
		var l postList
		eventually(t, 15*time.Second, r.name+" reads the 4 views", func() bool {
			one.call("/board/v1/post/list", map[string]any{"post_id": ids[0]}).OK(&l)
			return len(l.Results) == 1 && l.Results[0].ViewCount == 4
		})
	}
	t.Logf("round-robin: %s", rr)
}

// TestNATSRestart: the broker going away does not stop a service serving.
func TestNATSRestart(t *testing.T) {
	board := direct(st.first(t, "board").url)
	sys := systemCaller(t, board)
	admin := domainAdmin(t, board, "domain-"+randHex(6))
	var b boardInfo
	sys.call("/board/v1/board/create", map[string]any{"name": "Broker", "categories": []string{"x"}}).OK(&b)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stop := 10 * time.Second
	if err := st.nats.Stop(ctx, &stop); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = st.nats.Start(context.Background())
		}
	})
	for i := range 5 {
		admin.call("/board/v1/post/create", newPost(b.BoardID, fmt.Sprintf("no broker %d", i), "x")).OK(nil)
		time.Sleep(200 * time.Millisecond)
	}
	var l postList
	admin.call("/board/v1/post/list", map[string]any{"board_id": b.BoardID}).OK(&l)
	if l.TotalCount != 5 {
		t.Fatalf("list without NATS = %+v", l)
	}
	readyz(t, string(board), http.StatusOK)

	if err := st.nats.Start(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	admin.call("/board/v1/post/create", newPost(b.BoardID, "broker back", "x")).OK(nil)
	admin.call("/board/v1/post/list", map[string]any{"board_id": b.BoardID}).OK(&l)
	if l.TotalCount != 6 {
		t.Fatalf("list after NATS returned = %+v", l)
	}

	t.Run("mail queued while NATS was down goes out once", func(t *testing.T) {
		needs(t, "identity", "mailer")
		admin := rootAdmin(t, identityAt(t))
		if err := st.nats.Stop(ctx, &stop); err != nil {
			t.Fatal(err)
		}
		back := false
		t.Cleanup(func() {
			if !back {
				_ = st.nats.Start(context.Background())
			}
		})
		// Each operation answers 200: the mail waits in identity's outbox.
		addrs := make([]string, 5)
		for i := range addrs {
			addrs[i] = uniqueAddr(fmt.Sprintf("nonats%d", i))
			admin.call("/identity/v2/user/create", map[string]any{"user_id": fmt.Sprintf("nonats%d-%s", i, randHex(3)),
				"auth_type": "LOCAL", "reset_password": true, "email": addrs[i]}).OK(nil)
		}
		time.Sleep(5 * time.Second)
		if got := mailsTo(sinkMails(t), addrs...); len(got) != 0 {
			t.Fatalf("%d mails went out with NATS down", len(got))
		}
		if err := st.nats.Start(ctx); err != nil {
			t.Fatal(err)
		}
		back = true
		start := time.Now()
		got := waitMail(t, 60*time.Second, addrs...)
		t.Logf("the %d mails arrived %s after NATS started", len(addrs), time.Since(start).Round(time.Millisecond))
		exactlyOnce(t, got, addrs)
		time.Sleep(10 * time.Second)
		exactlyOnce(t, mailsTo(sinkMails(t), addrs...), addrs)
	})
}

// TestStoreOutage: with the store gone a service answers 503 quickly and
// fails readiness, then recovers by itself, without a restart, when the
// store is back; nothing written before is lost.
func TestStoreOutage(t *testing.T) {
	r := st.first(t, "board")
	board := direct(r.url)
	sys := systemCaller(t, board)
	admin := domainAdmin(t, board, "domain-"+randHex(6))
	var b boardInfo
	sys.call("/board/v1/board/create", map[string]any{"name": "Outage", "categories": []string{"x"}}).OK(&b)
	var p postInfo
	admin.call("/board/v1/post/create", newPost(b.BoardID, "before the outage", "x")).OK(&p)
	before := inspect(t, r.c)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stop := 10 * time.Second
	if err := st.mongo.Stop(ctx, &stop); err != nil {
		t.Fatal(err)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = st.mongo.Start(context.Background())
		}
	})

	// Readiness fails within a few seconds (the probe pings with a 1 s
	// timeout), so a Service stops sending traffic here.
	start := time.Now()
	waitReadyz(t, r.url, http.StatusServiceUnavailable, 10*time.Second)
	t.Logf("/readyz 503 after %s", time.Since(start).Round(time.Millisecond))

	// 2 cores, store gone: the answer must still come fast, and be 503.
	const quick = 10 * time.Second
	for _, c := range []struct {
		path string
		body any
	}{
		{"/board/v1/post/get", map[string]any{"post_id": p.PostID}},
		{"/board/v1/post/list", map[string]any{"board_id": b.BoardID}},
		{"/board/v1/post/create", newPost(b.BoardID, "during the outage", "x")},
		{"/board/v1/board/get", map[string]any{"board_id": b.BoardID}},
	} {
		res := admin.call(c.path, c.body).Fails(http.StatusServiceUnavailable, "ERROR_UNAVAILAVBLE")
		if res.took > quick {
			t.Fatalf("%s took %s to answer 503, want < %s", c.path, res.took, quick)
		}
		t.Logf("%s: 503 in %s", c.path, res.took.Round(time.Millisecond))
	}

	if err := st.mongo.Start(ctx); err != nil {
		t.Fatal(err)
	}
	restarted = true
	start = time.Now()
	waitReadyz(t, r.url, http.StatusOK, 60*time.Second)
	t.Logf("/readyz 200 again %s after the store started", time.Since(start).Round(time.Millisecond))

	var got postInfo
	admin.call("/board/v1/post/get", map[string]any{"post_id": p.PostID}).OK(&got)
	if got.Title != "before the outage" {
		t.Fatalf("post after the outage = %+v", got)
	}
	admin.call("/board/v1/post/create", newPost(b.BoardID, "after the outage", "x")).OK(nil)
	after := inspect(t, r.c)
	if after.startedAt != before.startedAt || after.restarts != before.restarts || !after.running {
		t.Fatalf("%s was restarted: before %+v, after %+v", r.name, before, after)
	}
}

// TestSIGTERMDuringBurst: a replica stopped (SIGTERM, then a grace period)
// in the middle of a request burst fails no request. It fails readiness
// first, keeps serving for the drain delay while the round-robin notices,
// then finishes what is in flight and exits 0.
func TestSIGTERMDuringBurst(t *testing.T) {
	r1, r2 := st.first(t, "board"), st.extraReplica(t, "board")
	rr := newRoundRobin(t, r1, r2)
	sys := systemCaller(t, rr)
	admin := domainAdmin(t, rr, "domain-"+randHex(6))
	var b boardInfo
	sys.call("/board/v1/board/create", map[string]any{"name": "Burst", "categories": []string{"x"}}).OK(&b)

	var (
		done     = make(chan struct{})
		wg       sync.WaitGroup
		requests atomic.Int64
		mu       sync.Mutex
		failures []string
		created  []string
	)
	fail := func(f string, args ...any) {
		mu.Lock()
		failures = append(failures, fmt.Sprintf(f, args...))
		mu.Unlock()
	}
	for w := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				res, err := admin.try("/board/v1/post/create", newPost(b.BoardID, fmt.Sprintf("w%d-%d", w, i), "x"))
				requests.Add(1)
				if err != nil || res.status != http.StatusOK {
					fail("create: %d %v %s", res.status, err, res.body)
					continue
				}
				var p postInfo
				if err := json.Unmarshal(res.body, &p); err != nil {
					fail("create: %v", err)
					continue
				}
				res, err = admin.try("/board/v1/post/get", map[string]any{"post_id": p.PostID})
				requests.Add(1)
				if err != nil || res.status != http.StatusOK {
					fail("get: %d %v %s", res.status, err, res.body)
					continue
				}
				mu.Lock()
				created = append(created, p.PostID)
				mu.Unlock()
			}
		})
	}

	time.Sleep(2 * time.Second)
	servedBefore := rr.backends[1].served.Load() // answered before SIGTERM
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	grace := 30 * time.Second
	start := time.Now()
	if err := r2.c.Stop(ctx, &grace); err != nil { // docker stop: SIGTERM, then SIGKILL after grace
		t.Fatal(err)
	}
	stopped := time.Since(start)
	servedInShutdown := rr.backends[1].served.Load() - servedBefore
	time.Sleep(time.Second)
	close(done)
	wg.Wait()

	info := inspect(t, r2.c)
	t.Logf("%d requests, %s; %s answered %d after SIGTERM, stopped in %s, exit code %d",
		requests.Load(), rr, r2.name, servedInShutdown, stopped.Round(time.Millisecond), info.exitCode)
	if len(failures) > 0 {
		t.Fatalf("%d requests failed during the stop, first: %s", len(failures), failures[0])
	}
	if servedBefore == 0 || requests.Load() < 50 {
		t.Fatalf("the burst did not load both replicas: %d requests, %s", requests.Load(), rr)
	}
	if info.exitCode != 0 {
		t.Fatalf("%s exited %d on SIGTERM, want 0 (graceful)", r2.name, info.exitCode)
	}
	if stopped < drainDelay {
		t.Fatalf("%s stopped in %s, before its drain delay %s", r2.name, stopped, drainDelay)
	}
	// Every post the burst created is there, whichever replica wrote it.
	var l postList
	admin.with(direct(r1.url)).call("/board/v1/post/list", map[string]any{"board_id": b.BoardID, "query": map[string]any{"count_only": true}}).OK(&l)
	if l.TotalCount != len(created) {
		t.Fatalf("store holds %d posts, the burst created %d", l.TotalCount, len(created))
	}
}

type containerInfo struct {
	startedAt string
	restarts  int
	running   bool
	exitCode  int
}

func inspect(t *testing.T, c testcontainers.Container) containerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	j, err := c.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return containerInfo{startedAt: j.State.StartedAt, restarts: j.RestartCount, running: j.State.Running, exitCode: j.State.ExitCode}
}

func readyz(t *testing.T, base string, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	status, body, err := get(ctx, base+"/readyz")
	if err != nil || status != want {
		t.Fatalf("/readyz = %d %s %v, want %d", status, body, err, want)
	}
}

func waitReadyz(t *testing.T, base string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		status, _, err := get(ctx, base+"/readyz")
		cancel()
		if err == nil && status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz of %s not %d within %s (last %d %v)", base, want, within, status, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
