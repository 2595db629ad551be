package identitytest

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/testkit"
	"github.com/nubes-io/nubes/services/identity/internal/core"
)

// mailbox records every mail event of the test binary's NATS. MailStream
// is a work queue: one consumer for every harness (acking each mail, as
// the mailer would); a harness finds its mails by address (each test has
// its own) and opens their sealed secret with its own keys.
var mailbox struct {
	once  sync.Once
	mu    sync.Mutex
	mails []events.Mail
	err   error
}

// WatchMail starts the test binary's mail consumer once; every harness
// of the binary (this package's and a package's own) reads through it,
// as a second consumer on the work queue would take half the mails.
func WatchMail(t testing.TB) {
	t.Helper()
	mailbox.once.Do(func() {
		ctx := context.Background() // lives as long as the test binary
		bus, err := events.Connect(ctx, testkit.Get().NATS.URL, "identity-test-mail", slog.New(slog.DiscardHandler))
		if err != nil {
			mailbox.err = err
			return
		}
		if err := bus.EnsureStreams(ctx); err != nil {
			mailbox.err = err
			return
		}
		cons, err := bus.JS.CreateOrUpdateConsumer(ctx, events.MailStream, jetstream.ConsumerConfig{
			Durable: "identity-test", FilterSubject: events.MailSubject, AckPolicy: jetstream.AckExplicitPolicy,
		})
		if err != nil {
			mailbox.err = err
			return
		}
		_, mailbox.err = cons.Consume(func(m jetstream.Msg) {
			var mail events.Mail
			if json.Unmarshal(m.Data(), &mail) == nil {
				mailbox.mu.Lock()
				mailbox.mails = append(mailbox.mails, mail)
				mailbox.mu.Unlock()
			}
			_ = m.Ack()
		})
	})
	if mailbox.err != nil {
		t.Fatal(mailbox.err)
	}
}

// sealed asserts that a mail event carries no link or code in clear.
func sealed(t testing.TB, m events.Mail) {
	t.Helper()
	for _, k := range events.SecretMailKeys {
		if _, ok := m.Data[k]; ok {
			t.Fatalf("mail %s carries %s in clear: %+v", m.ID, k, m.Data)
		}
	}
	if m.TokenID == "" {
		t.Fatalf("mail %s names no token", m.ID)
	}
}

// open opens a mail's sealed secret with the keys of cipherSpec.
func open(t testing.TB, cipherSpec string, m events.Mail) events.Mail {
	t.Helper()
	cipher, err := core.NewCipher(cipherSpec)
	if err != nil {
		t.Fatal(err)
	}
	out, err := events.OpenMail(cipher, m)
	if err != nil {
		t.Fatalf("mail %s does not open: %v", m.ID, err)
	}
	return out
}

// MailTo waits for the next mail to addr with template and returns it,
// opened with the keys of cipherSpec. Addresses are unique per test, so
// tests sharing the stream never mix.
func MailTo(t testing.TB, cipherSpec, addr, template string) events.Mail {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		mailbox.mu.Lock()
		for i, m := range mailbox.mails {
			if m.To == addr && m.Template == template {
				mailbox.mails = append(mailbox.mails[:i], mailbox.mails[i+1:]...)
				mailbox.mu.Unlock()
				sealed(t, m)
				return open(t, cipherSpec, m)
			}
		}
		mailbox.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %q mail to %s within 10s", template, addr)
	return events.Mail{}
}

// NoMailTo asserts that no mail to addr arrives within a short while.
func NoMailTo(t testing.TB, addr string) {
	t.Helper()
	time.Sleep(300 * time.Millisecond)
	mailbox.mu.Lock()
	defer mailbox.mu.Unlock()
	for _, m := range mailbox.mails {
		if m.To == addr {
			t.Fatalf("unexpected mail to %s: %+v", addr, m)
		}
	}
}

// MailTo is the package's MailTo with the harness' keys.
func (h *Harness) MailTo(addr, template string) events.Mail {
	h.T.Helper()
	return MailTo(h.T, h.CipherSpec, addr, template)
}

// NoMailTo is the package's NoMailTo.
func (h *Harness) NoMailTo(addr string) {
	h.T.Helper()
	NoMailTo(h.T, addr)
}
