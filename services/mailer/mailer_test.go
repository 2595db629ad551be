package mailer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/mailtest"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/mailer"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// timeout bounds every wait: generous, for the race detector on a busy
// machine; a passing run takes a fraction of it.
const timeout = 60 * time.Second

// env is one test's world: its own NATS server (the streams, the durable
// consumer and the bucket have fixed names, so tests must not share one),
// a producer with an outbox in a fresh FerretDB database (as identity
// has), and an SMTP server.
type env struct {
	t      *testing.T
	nats   *testkit.NATS
	bus    *events.Bus // the producer's connection
	outbox *events.Outbox
	smtp   *mailtest.Server
	log    *slog.Logger
}

func newEnv(t *testing.T) *env {
	t.Helper()
	t.Parallel()
	e := &env{t: t, smtp: mailtest.Start(t),
		log: slog.New(slog.DiscardHandler)}
	if testing.Verbose() {
		e.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	e.nats = testkit.StartNATS(t)
	e.bus = e.connect()
	var err error
	e.outbox, err = events.NewOutboxWith(context.Background(), testkit.Get().Database(t), "test_outbox", e.bus, e.log,
		events.OutboxOptions{Poll: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.outbox.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return e
}

func (e *env) connect() *events.Bus {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := events.Connect(ctx, e.nats.URL(), "test", e.log)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(b.NC.Close)
	return b
}

// config is a mailer configuration with short delays, sending to e.smtp.
func (e *env) config() mailer.Config {
	return mailer.Config{
		SMTPHost: e.smtp.Host, SMTPPort: e.smtp.Port, SMTPTLS: "none",
		SMTPFrom: "Nubes <noreply@example.com>", SMTPTimeout: 2 * time.Second,
		MaxDeliver: 8, Backoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		AckWait: 5 * time.Second, ClaimTimeout: 3 * time.Second, Concurrency: 4,
	}
}

// startMailer builds the mailer as the devstack does, on its own NATS
// connection (as its own process would), and runs its worker. The
// returned stop cancels the worker and waits for it to return.
func (e *env) startMailer(cfg mailer.Config, opts ...mailer.Option) (stop func()) {
	e.t.Helper()
	svc, err := mailer.New(cfg, opts...)(context.Background(), app.Deps{Events: e.connect(), Log: e.log})
	if err != nil {
		e.t.Fatal(err)
	}
	if svc.Name != mailer.Name || len(svc.Routes) != 0 || len(svc.Workers) != 1 {
		e.t.Fatalf("service %+v", svc)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Workers[0](ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("mailer worker: %v", err)
			}
		case <-time.After(15 * time.Second):
			e.t.Error("mailer worker did not stop")
		}
	}
	e.t.Cleanup(stop)
	return stop
}

func (e *env) enqueue(m events.Mail) string {
	e.t.Helper()
	if m.ID == "" {
		m.ID = fmt.Sprintf("mail-%d", time.Now().UnixNano())
	}
	if err := e.outbox.Enqueue(context.Background(), m); err != nil {
		e.t.Fatal(err)
	}
	return m.ID
}

// publish puts a raw payload on the mail subject with msgID as Nats-Msg-Id
// (bypassing the outbox, as a duplicate or a broken producer would).
func (e *env) publish(msgID string, payload []byte) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.bus.PublishData(ctx, events.MailSubject, msgID, payload); err != nil {
		e.t.Fatal(err)
	}
}

// waitIdle waits until nothing is left to do: the outbox is empty and the
// mailer's consumer has no message pending or unacknowledged. After that
// no further delivery can happen, so counts are final.
func (e *env) waitIdle() {
	e.t.Helper()
	testkit.Eventually(e.t, timeout, "outbox drained and consumer idle", func() bool {
		n, err := e.outbox.Pending(context.Background())
		if err != nil || n != 0 {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := e.bus.JS.Consumer(ctx, events.MailStream, events.MailConsumer)
		if err != nil {
			return false
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// dead returns the dead letters published so far.
func (e *env) dead() []events.DeadMail {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := e.bus.JS.Stream(ctx, events.MailDeadStream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []events.DeadMail
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		raw, err := s.GetMsg(ctx, seq)
		if err != nil {
			e.t.Fatal(err)
		}
		var d events.DeadMail
		if err := json.Unmarshal(raw.Data, &d); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func (e *env) waitDead(n int) []events.DeadMail {
	e.t.Helper()
	var got []events.DeadMail
	testkit.Eventually(e.t, timeout, fmt.Sprintf("%d dead letters", n), func() bool { got = e.dead(); return len(got) >= n })
	return got
}

// byID indexes messages by Message-ID and fails on a duplicate.
func byID(t *testing.T, msgs []mailtest.Message) map[string]mailtest.Message {
	t.Helper()
	out := map[string]mailtest.Message{}
	for _, m := range msgs {
		id := strings.TrimSuffix(m.MessageID, "@example.com")
		if _, dup := out[id]; dup {
			t.Errorf("mail %s delivered twice", id)
		}
		out[id] = m
	}
	return out
}

func TestSendsRenderedMailInTheUsersLanguage(t *testing.T) {
	e := newEnv(t)
	e.startMailer(e.config())
	en := e.enqueue(events.Mail{To: "Ada Lovelace <ada@example.org>", Language: "en", Template: events.MailInvite,
		Data: map[string]string{"name": "Ada", "user_id": "ada", "link": "https://console.example.org/reset?sso_access_token=tok"}})
	ko := e.enqueue(events.Mail{To: "kim@example.org", Language: "ko", Template: events.MailMFACode,
		Data: map[string]string{"user_id": "kim", "code": "482913", "purpose": "login", "expires_minutes": "5"}})

	got := byID(t, e.smtp.Wait(t, 2, timeout))
	m := got[en]
	if m.From != "noreply@example.com" || !slices.Equal(m.To, []string{"ada@example.org"}) {
		t.Errorf("en envelope %q %q", m.From, m.To)
	}
	if m.Subject != "Your Nubes account" || !strings.Contains(m.Body, "Hello Ada,") ||
		!strings.Contains(m.Body, "https://console.example.org/reset?sso_access_token=tok") {
		t.Errorf("en message %q\n%s", m.Subject, m.Body)
	}
	if to := m.Header.Get("To"); !strings.Contains(to, "Ada Lovelace") || m.Header.Get("Content-Language") != "en" {
		t.Errorf("en headers %v", m.Header)
	}
	m = got[ko]
	if m.Subject != "Nubes 인증 코드" || !strings.Contains(m.Body, "kim님, 안녕하세요.") || !strings.Contains(m.Body, "482913") ||
		!strings.Contains(m.Body, "로그인을 완료하려면") || !strings.Contains(m.Body, "5분 후에 만료") {
		t.Errorf("ko message %q\n%s", m.Subject, m.Body)
	}
	if m.Header.Get("Content-Language") != "ko" || m.Header.Get("X-Nubes-Template") != "mfa_code" {
		t.Errorf("ko headers %v", m.Header)
	}
	e.waitIdle()
	if n := e.smtp.Count(); n != 2 {
		t.Fatalf("%d messages, want 2", n)
	}
}

func TestTemporaryFailuresAreRetriedAndSentOnce(t *testing.T) {
	e := newEnv(t)
	e.smtp.FailNext(3)
	e.startMailer(e.config())
	id := e.enqueue(events.Mail{To: "a@example.org", Template: events.MailVerifyEmail, Data: map[string]string{"code": "123456"}})
	e.smtp.Wait(t, 1, timeout)
	e.waitIdle()
	if n, a := e.smtp.Count(), e.smtp.Attempts(); n != 1 || a != 4 {
		t.Fatalf("%d delivered in %d attempts, want 1 in 4", n, a)
	}
	if got := byID(t, e.smtp.Messages()); got[id].MessageID == "" {
		t.Fatalf("wrong message: %v", got)
	}
	if d := e.dead(); len(d) != 0 {
		t.Fatalf("dead letters: %+v", d)
	}
}

func TestPersistentFailureIsDeadLetteredAfterTheBound(t *testing.T) {
	e := newEnv(t)
	e.smtp.FailNext(1000)
	cfg := e.config()
	cfg.MaxDeliver = 3
	e.startMailer(cfg)
	id := e.enqueue(events.Mail{To: "a@example.org", Template: events.MailMFACode, Data: map[string]string{"code": "123456"}})
	d := e.waitDead(1)[0]
	if d.ID != id || d.Mail == nil || d.Mail.To != "a@example.org" || d.Deliveries != 3 ||
		!strings.Contains(d.Reason, "gave up after 3 deliveries") || !strings.Contains(d.Reason, "451") {
		t.Fatalf("dead letter %+v", d)
	}
	e.waitIdle()
	if n, a := e.smtp.Count(), e.smtp.Attempts(); n != 0 || a != 3 {
		t.Fatalf("%d delivered in %d attempts, want 0 in 3", n, a)
	}
}

func TestPermanentRefusalIsDeadLetteredAtOnce(t *testing.T) {
	e := newEnv(t)
	e.smtp.FailNextWith(1, 550, "5.1.1 No such user")
	e.startMailer(e.config())
	id := e.enqueue(events.Mail{To: "nobody@example.org", Template: events.MailVerifyEmail, Data: map[string]string{"code": "123456"}})
	d := e.waitDead(1)[0]
	if d.ID != id || d.Deliveries != 1 || !strings.Contains(d.Reason, "refused") || !strings.Contains(d.Reason, "550") {
		t.Fatalf("dead letter %+v", d)
	}
	e.waitIdle()
	if a := e.smtp.Attempts(); a != 1 {
		t.Fatalf("%d attempts, want 1", a)
	}
}

func TestUnrenderableMailIsDeadLetteredWithoutSending(t *testing.T) {
	e := newEnv(t)
	e.startMailer(e.config())
	mustJSON := func(m events.Mail) []byte { b, _ := json.Marshal(m); return b }
	e.publish("bad-json", []byte(`{"id": "mail-x", "to": `))
	e.publish("mail-nocode", mustJSON(events.Mail{ID: "mail-nocode", To: "a@example.org", Template: events.MailMFACode}))
	e.publish("mail-badaddr", mustJSON(events.Mail{ID: "mail-badaddr", To: "not an address", Template: events.MailGeneric}))
	e.publish("bad-id", mustJSON(events.Mail{ID: "../../etc/passwd", To: "a@example.org"}))
	e.waitDead(4)
	e.waitIdle()
	reasons := map[string]string{}
	for _, d := range e.dead() {
		if d.Deliveries != 1 {
			t.Errorf("%s: %d deliveries, want 1", d.ID, d.Deliveries)
		}
		reasons[d.ID] = d.Reason
	}
	for id, want := range map[string]string{"": "undecodable", "mail-nocode": "needs data code", "mail-badaddr": "recipient", "../../etc/passwd": "invalid mail id"} {
		if !strings.Contains(reasons[id], want) {
			t.Errorf("%q: reason %q, want %q (all: %v)", id, reasons[id], want, reasons)
		}
	}
	if a := e.smtp.Attempts(); a != 0 {
		t.Fatalf("%d SMTP attempts", a)
	}
}

func TestDuplicatesAreSentOnce(t *testing.T) {
	e := newEnv(t)
	m := events.Mail{ID: "mail-dup000000001", To: "a@example.org", Template: events.MailVerifyEmail, Data: map[string]string{"code": "123456"}}
	payload, _ := json.Marshal(m)
	// The same Nats-Msg-Id twice: the stream keeps one. The same mail id
	// under other Nats-Msg-Ids (a relay that published again after the
	// duplicate window): the mailer's sent record keeps one.
	e.publish(m.ID, payload)
	e.publish(m.ID, payload)
	e.publish("again-1", payload)
	e.publish("again-2", payload)
	e.startMailer(e.config())
	e.smtp.Wait(t, 1, timeout)
	e.waitIdle()
	// Later, the producer enqueues the same id once more.
	e.enqueue(m)
	e.waitIdle()
	if n := e.smtp.Count(); n != 1 {
		t.Fatalf("%d messages, want 1", n)
	}
	kv, err := e.bus.JS.KeyValue(context.Background(), events.MailSentBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(context.Background(), m.ID)
	if err != nil || !strings.Contains(string(entry.Value()), `"sent"`) {
		t.Fatalf("sent record %v %v", entry, err)
	}
}

// A sender that died between its claim and its record leaves a "sending"
// claim; after the claim timeout another delivery takes it over.
func TestAbandonedClaimIsTakenOver(t *testing.T) {
	e := newEnv(t)
	cfg := e.config()
	cfg.SMTPTimeout, cfg.ClaimTimeout = 500*time.Millisecond, time.Second
	e.startMailer(cfg) // creates the bucket
	ctx := context.Background()
	var kv jetstream.KeyValue
	testkit.Eventually(t, timeout, "sent bucket", func() bool {
		var err error
		kv, err = e.bus.JS.KeyValue(ctx, events.MailSentBucket)
		return err == nil
	})
	if _, err := kv.Create(ctx, "mail-abandoned01", []byte(`{"state":"sending","by":"crashed"}`)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.enqueue(events.Mail{ID: "mail-abandoned01", To: "a@example.org", Template: events.MailMFACode, Data: map[string]string{"code": "1"}})
	e.smtp.Wait(t, 1, timeout)
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("sent after %s, before the claim could expire", d)
	}
	e.waitIdle()
	if n := e.smtp.Count(); n != 1 {
		t.Fatalf("%d messages", n)
	}
}

func TestMailSurvivesANATSOutage(t *testing.T) {
	e := newEnv(t)
	e.startMailer(e.config())
	first := e.enqueue(events.Mail{To: "a@example.org", Template: events.MailVerifyEmail, Data: map[string]string{"code": "000001"}})
	e.smtp.Wait(t, 1, timeout)

	e.nats.Stop()
	testkit.Eventually(t, timeout, "producer disconnected", func() bool { return !e.bus.Connected() })
	ids := []string{first}
	for i := range 5 {
		// The operation succeeds with NATS down: its mail is in the outbox.
		ids = append(ids, e.enqueue(events.Mail{ID: fmt.Sprintf("mail-outage%d", i), To: "a@example.org",
			Template: events.MailVerifyEmail, Data: map[string]string{"code": "12345" + fmt.Sprint(i)}}))
	}
	e.nats.Start()
	e.smtp.Wait(t, 6, timeout)
	e.waitIdle()
	got := byID(t, e.smtp.Messages())
	if len(got) != 6 {
		t.Fatalf("%d distinct messages, want 6", len(got))
	}
	for _, id := range ids {
		if _, ok := got[id]; !ok {
			t.Errorf("%s not delivered", id)
		}
	}
}

// The mailer stops in the middle of a batch of 20 mails and starts
// again: every mail arrives, once.
func TestMailerRestartDeliversEveryMailOnce(t *testing.T) {
	e := newEnv(t)
	e.smtp.SetDelay(30 * time.Millisecond) // so the stop finds sends in flight
	stop := e.startMailer(e.config())
	var ids []string
	for i := range 10 {
		ids = append(ids, e.enqueue(events.Mail{ID: fmt.Sprintf("mail-batch%02d", i), To: "a@example.org",
			Template: events.MailMFACode, Data: map[string]string{"code": fmt.Sprintf("%06d", i)}}))
	}
	e.smtp.Wait(t, 3, timeout)
	stop()
	during := e.smtp.Count()
	for i := 10; i < 20; i++ { // produced while the mailer is down
		ids = append(ids, e.enqueue(events.Mail{ID: fmt.Sprintf("mail-batch%02d", i), To: "a@example.org",
			Template: events.MailMFACode, Data: map[string]string{"code": fmt.Sprintf("%06d", i)}}))
	}
	if during >= 20 {
		t.Fatalf("all %d sent before the stop; the test proves nothing", during)
	}
	e.startMailer(e.config())
	e.smtp.Wait(t, 20, timeout)
	e.waitIdle()
	got := byID(t, e.smtp.Messages())
	if len(got) != 20 || e.smtp.Count() != 20 {
		t.Fatalf("%d distinct of %d messages, want 20", len(got), e.smtp.Count())
	}
	for _, id := range ids {
		if _, ok := got[id]; !ok {
			t.Errorf("%s not delivered", id)
		}
	}
	t.Logf("%d sent before the stop", during)
}

func TestWritesEmlFilesWithoutSMTP(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(t.TempDir(), "mail")
	cfg := e.config()
	cfg.SMTPHost, cfg.MailDir = "", dir
	e.startMailer(cfg)
	id := e.enqueue(events.Mail{To: "kim@example.org", Language: "ko", Template: events.MailResetPassword,
		Data: map[string]string{"temporary_password": "Abcdef123456"}})
	file := filepath.Join(dir, id+".eml")
	testkit.Eventually(t, timeout, file, func() bool { _, err := os.Stat(file); return err == nil })
	e.waitIdle()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mailtest.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if m.MessageID != id+"@example.com" || m.Subject != "Nubes 비밀번호 재설정" || !strings.Contains(m.Body, "Abcdef123456") ||
		m.Header.Get("To") != "<kim@example.org>" {
		t.Fatalf("parsed %q %q %v\n%s", m.MessageID, m.Subject, m.Header, m.Body)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("dir holds %d entries", len(entries))
	}
}

func TestConfig(t *testing.T) {
	// Every key loads from NUBES_ variables, beside the shared keys.
	t.Setenv("NUBES_SMTP_HOST", "smtp.example.org")
	t.Setenv("NUBES_SMTP_PORT", "465")
	t.Setenv("NUBES_SMTP_TLS", "tls")
	t.Setenv("NUBES_SMTP_PASSWORD", "hunter2")
	t.Setenv("NUBES_MAIL_MAX_DELIVER", "5")
	var s struct {
		config.Base   `mapstructure:",squash"`
		mailer.Config `mapstructure:",squash"`
	}
	defaults := config.BaseDefaults()
	maps.Copy(defaults, mailer.Defaults())
	if err := config.Load(&s, defaults); err != nil {
		t.Fatal(err)
	}
	c := s.Config
	if c.SMTPHost != "smtp.example.org" || c.SMTPPort != 465 || c.SMTPTLS != "tls" || c.MaxDeliver != 5 || c.Backoff != 5*time.Second {
		t.Fatalf("loaded %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if str := config.String(&c); strings.Contains(str, "hunter2") {
		t.Fatalf("password printed: %s", str)
	}

	for name, mutate := range map[string]func(*mailer.Config){
		"nowhere to send":    func(c *mailer.Config) { c.SMTPHost = "" },
		"bad tls":            func(c *mailer.Config) { c.SMTPTLS = "ssl" },
		"clear credentials":  func(c *mailer.Config) { c.SMTPTLS, c.SMTPUsername = "none", "u" },
		"bad from":           func(c *mailer.Config) { c.SMTPFrom = "nobody" },
		"ack wait too short": func(c *mailer.Config) { c.AckWait = time.Second },
		"no deliveries":      func(c *mailer.Config) { c.MaxDeliver = -1 },
	} {
		bad := c
		mutate(&bad)
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: valid", name)
		}
	}
	if _, err := mailer.New(mailer.Config{MailDir: t.TempDir()})(context.Background(), app.Deps{Log: slog.New(slog.DiscardHandler)}); err == nil {
		t.Error("built without an event bus")
	}
}

// A mail's link or code travels sealed (events.SealMail): the outbox and
// the stream never hold it in clear, the mailer opens it at send time, the
// stream is empty once the mail is sent (a work queue), and a mail the
// mailer cannot open is dead-lettered still sealed.
func TestSealedMailIsOpenedAtSendTimeAndLeavesNothingInClear(t *testing.T) {
	keys, err := seal.Parse(seal.RandomSpec("m1"), "")
	if err != nil {
		t.Fatal(err)
	}
	const link = "https://console.example.org/reset?sso_access_token=live-token-abc"
	e := newEnv(t)
	m := events.Mail{ID: "mail-sealed-1", To: "ada@example.org", Language: "en", Template: events.MailResetPassword,
		Data: map[string]string{"name": "Ada", "user_id": "ada", "link": link}, TokenID: "jti-1"}
	if err := events.SealMail(keys, &m); err != nil {
		t.Fatal(err)
	}
	if m.Data["link"] != "" || m.Secret == nil || m.TokenID != "jti-1" {
		t.Fatalf("sealed mail %+v", m)
	}
	e.enqueue(m)
	testkit.Eventually(t, timeout, "the mail in the stream", func() bool { return e.streamMsgs() == 1 })
	if raw := e.streamData(); strings.Contains(raw, "live-token-abc") {
		t.Fatalf("the stream holds the link in clear: %s", raw)
	}
	e.startMailer(e.config(), mailer.WithKeys(keys))
	got := e.smtp.Wait(t, 1, timeout)
	if !strings.Contains(got[0].Body, link) {
		t.Fatalf("the mail does not carry the opened link:\n%s", got[0].Body)
	}
	e.waitIdle()
	testkit.Eventually(t, timeout, "the stream empty after delivery", func() bool { return e.streamMsgs() == 0 })

	// Keys that do not open it: dead-lettered, still sealed.
	other, _ := seal.Parse(seal.RandomSpec("x1"), "")
	m2 := events.Mail{ID: "mail-sealed-2", To: "bob@example.org", Language: "en", Template: events.MailMFACode,
		Data: map[string]string{"user_id": "bob", "code": "482913"}}
	if err := events.SealMail(other, &m2); err != nil {
		t.Fatal(err)
	}
	e.enqueue(m2)
	dead := e.waitDead(1)
	if dead[0].Mail == nil || dead[0].Mail.Secret == nil || dead[0].Mail.Data["code"] != "" {
		t.Fatalf("dead letter %+v", dead[0])
	}
	b, _ := json.Marshal(dead[0])
	if strings.Contains(string(b), "482913") {
		t.Fatalf("the dead letter holds the code in clear: %s", b)
	}
	if e.smtp.Count() != 1 {
		t.Fatalf("%d messages sent, want 1", e.smtp.Count())
	}
}

// streamMsgs is how many messages MailStream holds.
func (e *env) streamMsgs() uint64 {
	e.t.Helper()
	s, err := e.bus.JS.Stream(context.Background(), events.MailStream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// streamData is every message MailStream holds, concatenated.
func (e *env) streamData() string {
	e.t.Helper()
	ctx := context.Background()
	s, err := e.bus.JS.Stream(ctx, events.MailStream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out strings.Builder
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		if raw, err := s.GetMsg(ctx, seq); err == nil {
			out.Write(raw.Data)
		}
	}
	return out.String()
}
