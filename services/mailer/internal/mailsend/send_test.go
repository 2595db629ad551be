package mailsend

import (
	"context"
	"crypto/tls"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/mailtest"
)

func letter(id string) Letter {
	return Letter{
		ID:   id,
		From: &mail.Address{Name: "Nubes", Address: "noreply@example.com"},
		To:   &mail.Address{Name: "김민수", Address: "kim@example.com"},
		Date: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC),
		// Long enough to need several encoded words, folded apart.
		Subject:  "Nubes 인증 코드 " + strings.Repeat("가나다", 20),
		Body:     "안녕하세요.\n\n123456\n.\nA line that is rather long " + strings.Repeat("x", 120) + "\n",
		Language: "ko", Template: "mfa_code",
	}
}

func TestBuildIsParseable(t *testing.T) {
	l := letter("mail-0123456789ab")
	m, err := Build(l)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(m.Raw), "\r\n") {
		if len(line) > 998 {
			t.Fatalf("line %d is %d long", i, len(line))
		}
		if strings.Contains(line, "\n") {
			t.Fatalf("bare LF in line %d", i)
		}
	}
	p, err := mailtest.Parse(m.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if p.MessageID != "mail-0123456789ab@example.com" || p.Subject != l.Subject || p.Body != l.Body {
		t.Fatalf("parsed id %q subject %q body %q", p.MessageID, p.Subject, p.Body)
	}
	to, err := p.Header.AddressList("To")
	if err != nil || len(to) != 1 || to[0].Name != "김민수" || to[0].Address != "kim@example.com" {
		t.Fatalf("To %v %v", to, err)
	}
	if p.Header.Get("Content-Language") != "ko" || p.Header.Get("Date") != "Sat, 01 Mar 2025 12:00:00 +0000" {
		t.Fatalf("headers %v", p.Header)
	}
	if m.From != "noreply@example.com" || m.To != "kim@example.com" {
		t.Fatalf("envelope %q %q", m.From, m.To)
	}
}

func TestBuildRefusesHeaderInjection(t *testing.T) {
	l := letter("mail-1")
	l.Subject = "hi\r\nBcc: evil@example.com"
	if _, err := Build(l); err == nil {
		t.Fatal("subject with CRLF built")
	}
	l = letter("mail-1>\r\nX: y")
	if _, err := Build(l); err == nil {
		t.Fatal("bad id built")
	}
}

func send(t *testing.T, s Sender, id string) error {
	t.Helper()
	m, err := Build(letter(id))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.Send(ctx, m)
}

func TestSMTPSender(t *testing.T) {
	srv := mailtest.Start(t)
	s, err := NewSMTPSender(SMTPConfig{Host: srv.Host, Port: srv.Port, TLS: TLSNone})
	if err != nil {
		t.Fatal(err)
	}
	if err := send(t, s, "mail-plain"); err != nil {
		t.Fatal(err)
	}
	got := srv.Wait(t, 1, 5*time.Second)[0]
	if got.From != "noreply@example.com" || got.To[0] != "kim@example.com" || got.MessageID != "mail-plain@example.com" || !strings.Contains(got.Body, "123456") {
		t.Fatalf("got %+v", got)
	}

	srv.FailNext(1)
	if err := send(t, s, "mail-4xx"); err == nil || IsPermanent(err) {
		t.Fatalf("4xx: %v, want a temporary error", err)
	}
	srv.FailNextWith(1, 550, "5.1.1 No such user")
	if err := send(t, s, "mail-5xx"); !IsPermanent(err) {
		t.Fatalf("5xx: %v, want a permanent error", err)
	}
	if srv.Count() != 1 {
		t.Fatalf("%d accepted", srv.Count())
	}
}

func TestSMTPSenderTLS(t *testing.T) {
	cfg, pool, err := mailtest.SelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	client := &tls.Config{RootCAs: pool}
	for _, mode := range []string{TLSStartTLS, TLSImplicit} {
		t.Run(mode, func(t *testing.T) {
			srv := mailtest.StartWith(t, mailtest.Options{TLSConfig: cfg, ImplicitTLS: mode == TLSImplicit, Username: "u", Password: "secret"})
			s, err := NewSMTPSender(SMTPConfig{Host: srv.Host, Port: srv.Port, TLS: mode, Username: "u", Password: "secret", TLSConfig: client})
			if err != nil {
				t.Fatal(err)
			}
			if err := send(t, s, "mail-tls"); err != nil {
				t.Fatal(err)
			}
			got := srv.Wait(t, 1, 5*time.Second)[0]
			if !got.TLS || got.AuthUser != "u" {
				t.Fatalf("TLS %v user %q", got.TLS, got.AuthUser)
			}
			bad, _ := NewSMTPSender(SMTPConfig{Host: srv.Host, Port: srv.Port, TLS: mode, Username: "u", Password: "wrong", TLSConfig: client})
			if err := send(t, bad, "mail-badauth"); err == nil || IsPermanent(err) {
				t.Fatalf("wrong password: %v", err)
			}
		})
	}
	// A server that does not offer STARTTLS is refused, not used in clear.
	plain := mailtest.Start(t)
	s, _ := NewSMTPSender(SMTPConfig{Host: plain.Host, Port: plain.Port, TLS: TLSStartTLS, TLSConfig: client})
	if err := send(t, s, "mail-downgrade"); err == nil || !strings.Contains(err.Error(), "STARTTLS") {
		t.Fatalf("no STARTTLS: %v", err)
	}
	// An untrusted certificate is refused.
	srv := mailtest.StartWith(t, mailtest.Options{TLSConfig: cfg})
	s, _ = NewSMTPSender(SMTPConfig{Host: srv.Host, Port: srv.Port, TLS: TLSStartTLS})
	if err := send(t, s, "mail-untrusted"); err == nil {
		t.Fatal("untrusted certificate accepted")
	}
	if plain.Count()+srv.Count() != 0 {
		t.Fatal("a message got through")
	}
}

func TestSMTPSenderHonoursContext(t *testing.T) {
	srv := mailtest.Start(t)
	srv.SetDelay(2 * time.Second)
	s, _ := NewSMTPSender(SMTPConfig{Host: srv.Host, Port: srv.Port, TLS: TLSNone, Timeout: 200 * time.Millisecond})
	start := time.Now()
	if err := send(t, s, "mail-slow"); err == nil {
		t.Fatal("slow server: no error")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("timeout took %s", d)
	}
}

func TestDirSender(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mail")
	s, err := NewDirSender(dir)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the same id twice: one file
		if err := send(t, s, "mail-0123456789ab"); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "mail-0123456789ab.eml" {
		t.Fatalf("dir holds %v", entries)
	}
	info, _ := entries[0].Info()
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", info.Mode())
	}
	raw, err := os.ReadFile(filepath.Join(dir, entries[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	p, err := mailtest.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if p.MessageID != "mail-0123456789ab@example.com" || !strings.HasPrefix(p.Subject, "Nubes 인증 코드") || !strings.Contains(p.Body, "123456") {
		t.Fatalf("parsed %q %q %q", p.MessageID, p.Subject, p.Body)
	}
	if err := s.Send(context.Background(), &Message{ID: "../escape", Raw: raw}); !IsPermanent(err) {
		t.Fatalf("path id: %v", err)
	}
}
